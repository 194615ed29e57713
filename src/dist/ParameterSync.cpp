// synchronizeParameters (declared in GradientReducer.h): start-up agreement on the model.
//  1. Every rank compares its parameter and buffer list (names, shapes, dtypes) with rank 0's.
//     A mismatch (different configs on different nodes) is a ConfigError on every rank that
//     names the lowest differing rank and the first differing entry.
//  2. Rank 0 broadcasts every parameter and buffer.
//  3. Every rank checks a bitwise checksum per tensor against rank 0's.
// Small tensors travel on the parameters' device, so this works over NCCL as well as MPI.
#include <algorithm>
#include <cstring>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "dist/GradientReducer.h"

namespace mb::dist {
namespace {

struct Entry {
  std::string kind;  // "parameter" or "buffer"
  std::string name;
  at::Tensor tensor;
};

std::vector<Entry> collectEntries(torch::nn::Module& module) {
  std::vector<Entry> entries;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    entries.push_back({"parameter", item.key(), item.value()});
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    entries.push_back({"buffer", item.key(), item.value()});
  return entries;
}

std::string describe(const Entry& e) {
  std::string shape = "[";
  for (std::size_t i = 0; i < e.tensor.sizes().size(); ++i)
    shape += (i > 0 ? ", " : "") + std::to_string(e.tensor.sizes()[i]);
  return e.kind + " '" + e.name + "' " + shape + "] " + c10::toString(e.tensor.scalar_type());
}

// --- bytes over a communicator ------------------------------------------------

at::Tensor bytesTensor(const std::string& text) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(t.data_ptr(), text.data(), text.size());
  return t;
}

std::string bytesText(const at::Tensor& cpuBytes) {
  return std::string(reinterpret_cast<const char*>(cpuBytes.data_ptr()),
                     static_cast<std::size_t>(cpuBytes.numel()));
}

// Rank 0's `text` on every rank (length first, then the bytes), carried on `device`.
std::string broadcastText(Communicator& comm, const std::string& text, at::Device device) {
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(text.size()), at::kLong).to(device);
  comm.broadcast(length, 0, "parameter list length");
  std::int64_t n = length.cpu().item<std::int64_t>();
  at::Tensor bytes = comm.rank() == 0 ? bytesTensor(text) : at::zeros({n}, at::kByte);
  bytes = bytes.to(device);
  comm.broadcast(bytes, 0, "parameter list");
  return bytesText(bytes.cpu());
}

// Every rank's fixed-size message ("" = fine); returns the lowest rank with a message.
std::pair<int, std::string> firstComplaint(Communicator& comm, const std::string& mine,
                                           at::Device device) {
  constexpr std::int64_t kRecord = 1024;
  std::string clipped = mine.substr(0, kRecord - 1);
  at::Tensor record = at::zeros({kRecord}, at::kByte);
  std::memcpy(record.data_ptr(), clipped.data(), clipped.size());
  at::Tensor all = comm.allGather(record.to(device), "parameter check").cpu();  // [W, kRecord]
  for (int r = 0; r < comm.size(); ++r) {
    std::string text(reinterpret_cast<const char*>(all[r].data_ptr()));
    if (!text.empty()) return {r, text};
  }
  return {-1, ""};
}

// --- 1. names, shapes, dtypes -----------------------------------------------

std::string compareWithRoot(const std::vector<std::string>& mine,
                            const std::vector<std::string>& root, int rank) {
  std::size_t common = std::min(mine.size(), root.size());
  for (std::size_t i = 0; i < common; ++i) {
    if (mine[i] != root[i])
      return "entry " + std::to_string(i) + " differs: " + mine[i] + " on rank " +
             std::to_string(rank) + ", but " + root[i] + " on rank 0";
  }
  if (mine.size() == root.size()) return "";
  bool extraHere = mine.size() > root.size();
  return "rank " + std::to_string(rank) + " has " + std::to_string(mine.size()) +
         " parameters and buffers, rank 0 has " + std::to_string(root.size()) + "; the first " +
         (extraHere ? "extra one here is " + mine[common] : "one missing here is " + root[common]);
}

void checkLayout(Communicator& comm, const std::vector<Entry>& entries, at::Device device) {
  std::vector<std::string> mine;
  for (const auto& e : entries)
    mine.push_back(describe(e));
  std::string rootText = broadcastText(comm, str::join(mine, "\n"), device);
  std::vector<std::string> root =
      rootText.empty() ? std::vector<std::string>{} : str::split(rootText, '\n');
  auto [rank, message] = firstComplaint(comm, compareWithRoot(mine, root, comm.rank()), device);
  if (rank < 0) return;
  ConfigError error(
      "the model differs between ranks: rank " + std::to_string(rank) + ": " + message,
      "every rank must build the same model: check that all nodes read the same "
      "config (model.* keys, overrides) and run the same megabatch version");
  error.markAgreed();
  throw error;
}

// --- 2. broadcast -------------------------------------------------------------

void broadcastGroup(Communicator& comm, const std::vector<at::Tensor>& group) {
  std::vector<at::Tensor> flat;
  for (const auto& t : group)
    flat.push_back(t.detach().reshape({-1}));
  at::Tensor buffer = at::cat(flat);
  comm.broadcast(buffer, 0, "parameters from rank 0");
  std::int64_t offset = 0;
  for (const auto& t : group) {
    t.detach().copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Coalesces tensors of one dtype and device into broadcasts of at most ~64 MiB.
void broadcastAll(Communicator& comm, const std::vector<Entry>& entries) {
  constexpr std::int64_t kGroupBytes = std::int64_t{64} << 20;
  c10::NoGradGuard noGrad;
  std::vector<at::Tensor> group;
  std::int64_t groupBytes = 0;
  auto flush = [&] {
    if (!group.empty()) broadcastGroup(comm, group);
    group.clear();
    groupBytes = 0;
  };
  for (const auto& e : entries) {
    const at::Tensor& t = e.tensor;
    std::int64_t bytes = t.numel() * t.element_size();
    if (!group.empty() &&
        (group.front().scalar_type() != t.scalar_type() || group.front().device() != t.device() ||
         groupBytes + bytes > kGroupBytes))
      flush();
    group.push_back(t);
    groupBytes += bytes;
  }
  flush();
}

// --- 3. checksums ---------------------------------------------------------------

// [2] int64: the byte sum and a position-weighted byte sum. Integer sums are exact, so ranks
// with different thread counts still agree bit for bit (a float sum would not).
at::Tensor checksum(const at::Tensor& tensor) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 24;
  at::Tensor bytes = tensor.detach().contiguous().reshape({-1}).view(at::kByte);
  at::Tensor sums = at::zeros({2}, tensor.options().dtype(at::kLong));
  for (std::int64_t start = 0; start < bytes.numel(); start += kChunk) {
    std::int64_t n = std::min(kChunk, bytes.numel() - start);
    at::Tensor values = bytes.narrow(0, start, n).to(at::kLong);
    at::Tensor weights = at::arange(start, start + n, values.options()).remainder(65521) + 1;
    sums[0] += values.sum();
    sums[1] += (values * weights).sum();
  }
  return sums;
}

void checkChecksums(Communicator& comm, const std::vector<Entry>& entries, at::Device device) {
  if (entries.empty()) return;
  std::vector<at::Tensor> sums;
  for (const auto& e : entries)
    sums.push_back(checksum(e.tensor).to(device));
  at::Tensor all = comm.allGather(at::stack(sums), "parameter checksums").cpu();  // [W, E, 2]
  for (int r = 1; r < comm.size(); ++r) {
    at::Tensor differs = (all[r] != all[0]).any(1);  // [E]
    if (!differs.any().item<bool>()) continue;
    auto index = differs.nonzero()[0][0].item<std::int64_t>();
    RuntimeError error("after the broadcast from rank 0, rank " + std::to_string(r) + "'s " +
                           describe(entries[static_cast<std::size_t>(index)]) +
                           " still differs from rank 0's (checksum mismatch)",
                       "the interconnect or a GPU corrupted data: run the job again; if it "
                       "recurs, exclude the node that holds rank " +
                           std::to_string(r));
    error.markAgreed();  // every rank read the same gathered checksums
    throw error;
  }
}

}  // namespace

// Note [Buffers across ranks]
// Buffers change in the forward pass (batch norm's running statistics), from each rank's own
// samples, so between synchronisations they are rank-local, as in PyTorch DDP without
// SyncBatchNorm. averageBuffers makes them equal again: floating-point buffers become the
// mean over ranks, summed in double so that buffers that are already equal (frozen
// parameters kept as buffers) stay bit for bit what they were; other buffers (counters such
// as num_batches_tracked) take rank 0's value. The trainer calls it before every evaluation
// and checkpoint, so evaluation and checkpoints see one model, and a run resumed on the same
// number of ranks continues exactly as an uninterrupted one.
void averageBuffers(Communicator& comm, torch::nn::Module& module) {
  if (comm.size() == 1) return;
  c10::NoGradGuard noGrad;
  std::vector<at::Tensor> floating;
  std::vector<Entry> counters;
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (at::isFloatingType(item.value().scalar_type()))
      floating.push_back(item.value());
    else
      counters.push_back({"buffer", item.key(), item.value()});
  }
  if (!floating.empty()) {
    std::vector<at::Tensor> flat;
    for (const auto& t : floating)
      flat.push_back(t.detach().reshape({-1}).to(at::kDouble));
    at::Tensor sum = at::cat(flat);
    comm.allReduce(sum, ReduceOp::kSum, "buffers");
    sum.div_(static_cast<double>(comm.size()));
    std::int64_t offset = 0;
    for (const auto& t : floating) {
      t.detach().copy_(sum.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  broadcastAll(comm, counters);
}

void synchronizeParameters(Communicator& comm, torch::nn::Module& module) {
  std::vector<Entry> entries = collectEntries(module);
  at::Device device = entries.empty() ? at::Device(at::kCPU) : entries.front().tensor.device();
  checkLayout(comm, entries, device);
  if (comm.size() == 1) return;
  broadcastAll(comm, entries);
  checkChecksums(comm, entries, device);
  log::get("dist").info("parameters: {} tensors synchronised from rank 0 and verified on {} ranks",
                        entries.size(), comm.size());
}

}  // namespace mb::dist
