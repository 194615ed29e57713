#include "dist/Agreement.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <ATen/Functions.h>

#include "common/Log.h"
#include "common/OutOfMemory.h"

namespace mb::dist {
namespace {

// Record layout: [0] ok flag, [1] exit code, [2..3] message length, [4..] message bytes.
constexpr std::int64_t kRecordBytes = 4096;
constexpr std::int64_t kHeaderBytes = 4;
constexpr std::int64_t kMaxMessage = kRecordBytes - kHeaderBytes;

at::Tensor encode(const Error* error) {
  at::Tensor record = at::zeros({kRecordBytes}, at::kByte);
  auto* bytes = record.data_ptr<std::uint8_t>();
  bytes[0] = error == nullptr ? 1 : 0;
  if (error != nullptr) {
    bytes[1] = static_cast<std::uint8_t>(static_cast<int>(error->code()));
    std::string text = error->what();
    std::int64_t length =
        std::min<std::int64_t>(static_cast<std::int64_t>(text.size()), kMaxMessage);
    bytes[2] = static_cast<std::uint8_t>(length & 0xff);
    bytes[3] = static_cast<std::uint8_t>(length >> 8);
    std::memcpy(bytes + kHeaderBytes, text.data(), static_cast<std::size_t>(length));
  }
  return record;
}

}  // namespace

void agree(Communicator& comm, const Error* localError, const std::string& phase) {
  if (comm.size() == 1) {
    if (localError == nullptr) return;
    Error error = *localError;
    error.markAgreed();
    throw error;
  }
  at::Tensor records = comm.allGather(encode(localError), "agree: " + phase);
  for (int r = 0; r < comm.size(); ++r) {
    const auto* bytes = records[r].data_ptr<std::uint8_t>();
    if (bytes[0] == 1) continue;
    auto code = static_cast<ExitCode>(bytes[1]);
    std::size_t length = bytes[2] | (static_cast<std::size_t>(bytes[3]) << 8);
    std::string message(reinterpret_cast<const char*>(bytes + kHeaderBytes), length);
    if (localError == nullptr || r != comm.rank()) {
      // Tell this rank's log why it stops, so every rank's output names the cause.
      log::get("dist").error("stopping: rank {} failed while {}", r, phase);
    }
    // "rank 1: ..." unless the message already begins with its rank (an out-of-memory one).
    const std::string rank = "rank " + std::to_string(r);
    Error error =
        makeError(code, message.rfind(rank + " ", 0) == 0 ? message : rank + ": " + message);
    error.markAgreed();
    throw error;
  }
}

void agreed(Communicator& comm, const std::string& phase, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    agree(comm, &error, phase);
    throw;  // unreachable: agree() throws when an error is passed
  } catch (const std::exception& e) {
    if (std::optional<Error> oom = explainOutOfMemory(e)) {  // Note [Out of memory is an ...]
      agree(comm, &*oom, phase);
      throw;
    }
    RuntimeError error(phase + ": " + e.what());
    agree(comm, &error, phase);
    throw;
  }
  agree(comm, nullptr, phase);
}

}  // namespace mb::dist
