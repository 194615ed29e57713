#pragma once
// Typed errors. Each carries the exit-code category of DESIGN.md "CLI", a message that names
// the file, key, or rank at fault, and (where the user can fix it) a hint that says how.
#include <stdexcept>
#include <string>

namespace mb {

// Process exit codes: the contract that scripts (SLURM requeue, CI) rely on.
enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,     // anything else
  kUsage = 2,       // bad command line or config
  kData = 3,        // bad data
  kCheckpoint = 4,  // checkpoint problem
  kPreempted = 75,  // stopped by a signal after writing a checkpoint (EX_TEMPFAIL)
};

const char* exitCodeName(ExitCode code);

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, std::string message, std::string hint = {});
  ExitCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }
  // True once every rank holds this same error (dist::agree): the process may then exit
  // normally; an error not agreed on must end the job (MPI_Abort) so no peer waits forever.
  bool agreed() const { return agreed_; }
  void markAgreed() { agreed_ = true; }

 private:
  ExitCode code_;
  std::string message_;
  std::string hint_;
  bool agreed_ = false;
};

// Bad command line or config (exit 2).
class ConfigError : public Error {
 public:
  explicit ConfigError(std::string message, std::string hint = {})
      : Error(ExitCode::kUsage, std::move(message), std::move(hint)) {}
};

// Bad input data (exit 3).
class DataError : public Error {
 public:
  explicit DataError(std::string message, std::string hint = {})
      : Error(ExitCode::kData, std::move(message), std::move(hint)) {}
};

// Checkpoint missing, corrupt, or unwritable (exit 4).
class CheckpointError : public Error {
 public:
  explicit CheckpointError(std::string message, std::string hint = {})
      : Error(ExitCode::kCheckpoint, std::move(message), std::move(hint)) {}
};

// Anything else that we detected and can explain (exit 1).
class RuntimeError : public Error {
 public:
  explicit RuntimeError(std::string message, std::string hint = {})
      : Error(ExitCode::kFailure, std::move(message), std::move(hint)) {}
};

// Builds an Error of the given category (used when an error crosses ranks as plain values).
Error makeError(ExitCode code, std::string message, std::string hint = {});

}  // namespace mb
