#pragma once
// Check macros for library calls. Each failure records the expression, file:line, this
// process's rank, and the library's own error string, then throws a typed mb::Error.
// The *_ABORT variants are for destructors and watchdog threads, where throwing is wrong:
// they log the same text and abort the process.
//
// This header includes no library headers (the CUDA/NCCL macros expand only in files that
// include them); the MPI checks live in dist/MpiCheck.h, next to the only code that calls MPI.
#include <string>

#include "common/Error.h"

namespace mb::detail {

[[noreturn]] void throwCheckFailure(ExitCode code, const char* library, const char* expression,
                                    const char* file, int line, const std::string& libraryMessage);
[[noreturn]] void abortCheckFailure(const char* library, const char* expression, const char* file,
                                    int line, const std::string& libraryMessage);
std::string hdf5ErrorStack();

}  // namespace mb::detail

// Plain invariant check with a typed error: MB_CHECK(n > 0, DataError, "file has no rows").
#define MB_CHECK(cond, ErrorType, ...)         \
  do {                                         \
    if (!(cond)) throw ErrorType(__VA_ARGS__); \
  } while (0)

// HDF5 calls return a negative hid_t/herr_t on failure; the error stack says why.
#define MB_HDF5_CHECK(expr, exitCode)                                              \
  ([&]() {                                                                         \
    auto mbResult_ = (expr);                                                       \
    if (mbResult_ < 0)                                                             \
      ::mb::detail::throwCheckFailure(exitCode, "HDF5", #expr, __FILE__, __LINE__, \
                                      ::mb::detail::hdf5ErrorStack());             \
    return mbResult_;                                                              \
  }())

#define MB_CUDA_CHECK(expr)                                                                        \
  do {                                                                                             \
    cudaError_t mbStatus_ = (expr);                                                                \
    if (mbStatus_ != cudaSuccess)                                                                  \
      ::mb::detail::throwCheckFailure(::mb::ExitCode::kFailure, "CUDA", #expr, __FILE__, __LINE__, \
                                      cudaGetErrorString(mbStatus_));                              \
  } while (0)

#define MB_NCCL_CHECK(expr)                                                               \
  do {                                                                                    \
    ncclResult_t mbStatus_ = (expr);                                                      \
    if (mbStatus_ != ncclSuccess && mbStatus_ != ncclInProgress)                          \
      ::mb::detail::throwCheckFailure(                                                    \
          ::mb::ExitCode::kFailure, "NCCL", #expr, __FILE__, __LINE__,                    \
          std::string(ncclGetErrorString(mbStatus_)) + ": " + ncclGetLastError(nullptr)); \
  } while (0)

#define MB_CUDA_CHECK_ABORT(expr)                                        \
  do {                                                                   \
    cudaError_t mbStatus_ = (expr);                                      \
    if (mbStatus_ != cudaSuccess)                                        \
      ::mb::detail::abortCheckFailure("CUDA", #expr, __FILE__, __LINE__, \
                                      cudaGetErrorString(mbStatus_));    \
  } while (0)

#define MB_NCCL_CHECK_ABORT(expr)                                        \
  do {                                                                   \
    ncclResult_t mbStatus_ = (expr);                                     \
    if (mbStatus_ != ncclSuccess && mbStatus_ != ncclInProgress)         \
      ::mb::detail::abortCheckFailure("NCCL", #expr, __FILE__, __LINE__, \
                                      ncclGetErrorString(mbStatus_));    \
  } while (0)
