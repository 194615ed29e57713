#include "common/OutOfMemory.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <regex>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "common/CpuAllocationScope.h"
#include "common/Log.h"
#include "common/Strings.h"

namespace mb {
namespace {

// What the last exception to leave a phase left (Note [Out of memory is an expected error]).
struct FailedPhase {
  std::string name;
  bool fresh = false;  // set by the innermost phase the exception left, taken by the report
};
thread_local FailedPhase failedOomPhase;

std::mutex oomPlanMutex;
std::string& oomPlanSummary() {
  static std::string summary;
  return summary;
}

// "6400000000 bytes" (the CPU allocator), "2.00 GiB" (CUDA's): -1 when neither is there.
std::int64_t oomRequestedBytesIn(const std::string& text) {
  static const std::regex cpu("allocate (\\d+) bytes");
  static const std::regex gpu("[Tt]ried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)");
  std::smatch m;
  if (std::regex_search(text, m, cpu)) return std::stoll(m[1].str());
  if (std::regex_search(text, m, gpu)) {
    static const std::vector<std::string> units = {"B", "KiB", "MiB", "GiB", "TiB"};
    double bytes = std::stod(m[1].str());
    for (const auto& unit : units) {
      if (unit == m[2].str()) break;
      bytes *= 1024.0;
    }
    return static_cast<std::int64_t>(bytes);
  }
  return -1;
}

// MEGABATCH_FAULT_OOM=RANK:PHASE[:SKIP[:DEVICE]].
struct InjectedOom {
  bool active = false;
  int rank = -1;  // -1: every rank
  std::string phase;
  int skip = 0;
  bool cuda = false;  // DEVICE = cuda: CUDA's caching allocator refuses, not the CPU's
  int seen = 0;
};

InjectedOom& injectedOom() {
  static InjectedOom spec = [] {
    InjectedOom s;
    const char* text = std::getenv("MEGABATCH_FAULT_OOM");
    if (text == nullptr || *text == '\0') return s;
    std::vector<std::string> fields = str::split(text, ':');
    if (fields.size() < 2) return s;
    s.active = true;
    s.rank = fields[0] == "*" ? -1 : std::stoi(fields[0]);
    s.phase = fields[1];
    s.skip = fields.size() > 2 ? std::stoi(fields[2]) : 0;
    s.cuda = fields.size() > 3 && fields[3] == "cuda";
    return s;
  }();
  return spec;
}

void maybeInjectOom(const std::string& phase) {
  InjectedOom& spec = injectedOom();
  if (!spec.active || phase.find(spec.phase) == std::string::npos) return;
  if (spec.rank >= 0 && spec.rank != log::rank()) return;
  if (spec.seen++ != spec.skip) return;
  log::get("app").warn("MEGABATCH_FAULT_OOM: an allocation of 1 PiB on the {} starts {}",
                       spec.cuda ? "GPU" : "CPU", phase);
  constexpr std::size_t kPebibyte = std::size_t{1} << 50;  // past any address space
  // On CUDA the caching allocator's own path: cudaMalloc fails, the cache is freed, cudaMalloc
  // fails again, and c10::OutOfMemoryError says what the card holds (GetAllocator throws
  // where no CUDA allocator is registered: a CPU build).
  c10::Allocator* allocator =
      spec.cuda ? c10::GetAllocator(c10::DeviceType::CUDA) : c10::GetCPUAllocator();
  c10::DataPtr never = allocator->allocate(kPebibyte);
}

// The remedies for running out in `phase`, most effective first (seed 001's order).
std::string oomRemediesFor(const std::string& phase) {
  const std::string batch =
      "a smaller train.micro_batch, or train.micro_batch: auto to find the largest that fits "
      "(train.global_batch stays: gradient accumulation makes up the rest)";
  const std::string recompute =
      "train.recompute: blocks (a gpt's transformer blocks are run again in the backward pass "
      "instead of keeping their activations)";
  const std::string precision = "train.precision: bf16 or fp16 (half the activation memory)";
  const std::string data =
      "data.residency: stream, or more ranks (each holds 1/N of the data), frees the memory "
      "the resident data holds";
  if (phase.find("building the model") != std::string::npos)
    return "a smaller model (model.hidden, model.layers), or fewer ranks on each node so that "
           "each has more memory";
  if (phase.find("loading the data") != std::string::npos)
    return data +
           "; or a lower data.memory_fraction / data.memory_budget_mb, so that megabatch "
           "streams before memory runs out";
  if (phase.find("checkpoint") != std::string::npos)
    return "rank 0 assembles the checkpoint in host memory: fewer ranks on rank 0's node, "
           "or " +
           data;
  if (phase.find("export") != std::string::npos || phase.find("sampling") != std::string::npos)
    return "run it where the model fits in memory (the model alone must fit)";
  return "(1) " + batch + "; (2) " + recompute + "; (3) " + precision + "; (4) " + data;
}

}  // namespace

std::optional<OutOfMemory> asOutOfMemory(const std::exception& e) {
  if (const auto* cap = dynamic_cast<const AllocationCapExceeded*>(&e))
    return OutOfMemory{"CPU", cap->requested};
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return OutOfMemory{"CPU", -1};
  if (const auto* gpu = dynamic_cast<const c10::OutOfMemoryError*>(&e))
    return OutOfMemory{"GPU", oomRequestedBytesIn(gpu->what_without_backtrace())};
  if (const auto* c10Error = dynamic_cast<const c10::Error*>(&e)) {
    const std::string text = c10Error->what_without_backtrace();
    if (text.find("can't allocate memory") != std::string::npos ||
        text.find("CUDA out of memory") != std::string::npos)
      return OutOfMemory{text.find("CUDA") != std::string::npos ? "GPU" : "CPU",
                         oomRequestedBytesIn(text)};
  }
  return std::nullopt;
}

MemoryPhase::MemoryPhase(std::string name)
    : name_(std::move(name)), exceptionsAtStart_(std::uncaught_exceptions()) {
  failedOomPhase.fresh = false;  // an earlier failure was handled: it names no phase now
  try {
    maybeInjectOom(name_);
  } catch (...) {
    failedOomPhase = {name_, true};
    throw;
  }
}

MemoryPhase::~MemoryPhase() {
  if (std::uncaught_exceptions() > exceptionsAtStart_ && !failedOomPhase.fresh)
    failedOomPhase = {name_, true};
}

std::string takeFailedPhase() {
  if (!failedOomPhase.fresh) return "";
  failedOomPhase.fresh = false;
  return failedOomPhase.name;
}

void setMemoryPlanSummary(const std::string& summary) {
  std::lock_guard<std::mutex> lock(oomPlanMutex);
  oomPlanSummary() = summary;
}

Error outOfMemoryError(const OutOfMemory& oom, int rank, const std::string& phase) {
  std::string message = "rank " + std::to_string(rank) + " ran out of " + oom.device +
                        " memory while " + (phase.empty() ? "running" : phase);
  message += oom.requestedBytes >= 0
                 ? ": an allocation of " +
                       str::humanBytes(static_cast<double>(oom.requestedBytes)) + " failed"
                 : ": an allocation failed";
  {
    std::lock_guard<std::mutex> lock(oomPlanMutex);
    if (!oomPlanSummary().empty()) message += " (memory plan: " + oomPlanSummary() + ")";
  }
  return RuntimeError(message, "remedies, in this order: " + oomRemediesFor(phase));
}

std::optional<Error> explainOutOfMemory(const std::exception& e) {
  std::optional<OutOfMemory> oom = asOutOfMemory(e);
  if (!oom) return std::nullopt;
  return outOfMemoryError(*oom, log::rank(), takeFailedPhase());
}

}  // namespace mb
