// megabatch data check --config FILE [key=value ...] [--batches K] [--dump FILE.h5] [--report
// FILE.json] Validates and loads a dataset exactly as `train` would (collective, every rank), then
// says what it found: layout, splits, shards per rank, resident bytes, read throughput, peak
// memory, and (with --batches) the time to gather a batch. --dump writes the gathered batches for
// tests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/Functions.h>

#include "app/Cli.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"

namespace mb::app {
namespace {

// Per-rank numbers, all-gathered for rank 0's table. Index names in kStatNames.
enum Stat {
  kTrain,
  kVal,
  kTest,
  kResident,
  kBytesRead,
  kReadSeconds,
  kValidateSeconds,
  kCheckSeconds,
  kPeakRss,
  kGatherMs,
  kBytesMapped,
  kIdentifySeconds,
  kStats
};
const char* kStatNames[] = {"train_items",      "val_samples",   "test_samples",
                            "resident_bytes",   "bytes_read",    "read_seconds",
                            "validate_seconds", "check_seconds", "peak_rss_bytes",
                            "gather_ms_median", "bytes_mapped",  "identify_seconds"};

c10::Device resolveDevice(const Config& config, const dist::Topology& topology) {
  bool cuda = at::hasCUDA();
  if (config.train.device == DeviceKind::kCuda && !cuda)
    throw ConfigError("train.device = cuda, but no CUDA device is available to this megabatch",
                      "use train.device=cpu, or a CUDA build on a GPU machine");
  if (config.train.device == DeviceKind::kCpu || !cuda) return c10::Device(c10::kCPU);
  auto gpus = static_cast<int>(at::getNumGPUs());
  return c10::Device(c10::kCUDA,
                     static_cast<c10::DeviceIndex>(topology.localRank % std::max(1, gpus)));
}

double peakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (str::startsWith(line, "VmHWM:")) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

std::string rankFile(const std::string& path, int rank, int world) {
  if (world == 1) return path;
  auto dot = path.rfind('.');
  std::string suffix = ".rank" + std::to_string(rank);
  return dot == std::string::npos ? path + suffix : path.substr(0, dot) + suffix + path.substr(dot);
}

// An HDF5 file closed under the HDF5 lock (the gather itself must not hold the lock: it waits
// for the stream loader, which takes it).
struct LockedFile {
  h5::Handle file;
  ~LockedFile() {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    file.reset();
  }
};

void writeBatch(hid_t file, const std::string& group, const data::Batch& batch) {
  // Stream residency reads chunks on a background thread: every HDF5 caller holds the lock.
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle g = h5::createGroup(file, group, ExitCode::kFailure);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i)
    h5::writeTensor(g.get(), "input" + std::to_string(i), batch.inputs[i].cpu(), {},
                    ExitCode::kFailure);
  h5::writeTensor(g.get(), "targets", batch.targets.cpu(), {}, ExitCode::kFailure);
  h5::writeTensor(g.get(), "sample_index", batch.sampleIndex.cpu(), {}, ExitCode::kFailure);
  const std::pair<const char*, const at::Tensor*> graph[] = {{"node_features", &batch.nodeFeatures},
                                                             {"node_type", &batch.nodeTypes},
                                                             {"edge_index", &batch.edgeIndex},
                                                             {"edge_features", &batch.edgeFeatures},
                                                             {"node_graph", &batch.nodeGraph}};
  for (const auto& [name, tensor] : graph) {
    if (tensor->defined()) h5::writeTensor(g.get(), name, tensor->cpu(), {}, ExitCode::kFailure);
  }
}

// Times (and optionally dumps) the first `count` train batches of epoch 0; median ms.
double gatherBatches(data::ShardedData& data, std::int64_t count, hid_t dump) {
  data.beginEpoch(0);
  std::vector<double> times;
  count = std::min(count, data.batchesPerEpoch());
  WorkProgress::Options shown;
  shown.label = "data check: gather";
  shown.unit = "batches";
  shown.total = count;
  shown.tag = "data";
  shown.speaks = log::rank() == 0;  // every rank gathers in step: rank 0 reports
  WorkProgress progress(shown);
  for (std::int64_t b = 0; b < count; ++b) {
    auto start = std::chrono::steady_clock::now();
    data::Batch batch = data.trainBatch(b, 0, data.localCount(b), at::kFloat);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (dump >= 0) writeBatch(dump, "train/" + std::to_string(b), batch);
    progress.update(b + 1);
  }
  progress.finish();
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void dumpEval(data::ShardedData& data, hid_t dump) {
  for (data::Split split : {data::Split::kVal, data::Split::kTest}) {
    std::int64_t n = std::min<std::int64_t>(data.evalCount(split), 512);
    writeBatch(dump, data::toString(split), data.evalBatch(split, 0, n, at::kFloat));
  }
}

void printSummary(const data::ShardedData& data, const at::Tensor& stats, int world) {
  const data::DataInfo& info = data.info();
  data::LoadStats load = data.loadStats();
  std::printf("data: %s\nlayout: %s, %lld samples, fingerprint %s\n", info.path.c_str(),
              info.layout.c_str(), static_cast<long long>(info.numSamples),
              info.fingerprint.c_str());
  std::printf("splits %s%s:\n", info.splitsByTime ? "by time" : "by fractions",
              info.hasTimestamps
                  ? (std::string(" (data.time_unit = ") + timeUnitName(info.timeUnit) + ")").c_str()
                  : "");
  for (data::Split split : {data::Split::kTrain, data::Split::kVal, data::Split::kTest})
    std::printf("%-5s samples %s\n", data::toString(split),
                data::describeSplit(info, split).c_str());
  for (const auto& input : info.inputs)
    std::printf("input %s: window %lld, features %lld\n", input.name.c_str(),
                static_cast<long long>(input.window), static_cast<long long>(input.features));
  std::printf(
      "targets: %s%s", info.integerTargets ? "integer" : "float32",
      info.numClasses > 0 ? (", " + std::to_string(info.numClasses) + " classes").c_str() : "");
  if (info.vocabSize > 0) std::printf(", vocab_size %lld", static_cast<long long>(info.vocabSize));
  std::printf(
      "\ncanonical shards: %lld over %d ranks; %lld global batches per epoch; residency %s; io "
      "%s\n",
      static_cast<long long>(info.canonicalShards), world,
      static_cast<long long>(data.batchesPerEpoch()), toString(load.residency).c_str(),
      load.io.c_str());
  std::printf("memory budget per rank: %s (%s)\n",
              str::humanBytes(static_cast<double>(load.budgetBytes)).c_str(), load.budget.c_str());
  std::printf(
      "rank  train_items  val  test  resident     loaded      load_s  peak_rss   gather_ms\n");
  double bytes = 0, seconds = 0;
  for (int r = 0; r < world; ++r) {
    auto s = stats[r];
    auto v = [&](Stat k) { return s[k].item<double>(); };
    bytes += v(kBytesRead) + v(kBytesMapped);
    seconds = std::max(seconds, v(kReadSeconds));
    std::printf("%4d  %11.0f  %5.0f %5.0f %-12s %-11s %6.3f  %-10s %.3f\n", r, v(kTrain), v(kVal),
                v(kTest), str::humanBytes(v(kResident)).c_str(),
                str::humanBytes(v(kBytesRead) + v(kBytesMapped)).c_str(), v(kReadSeconds),
                str::humanBytes(v(kPeakRss)).c_str(), v(kGatherMs));
  }
  std::printf("load: %s in %.3f s = %.3f GB/s over all ranks (%s)\n",
              str::humanBytes(bytes).c_str(), seconds, seconds > 0 ? bytes / seconds / 1e9 : 0.0,
              load.bytesMapped > 0 ? "zero-copy mappings from the page cache, data.host_mmap"
                                   : "reads into resident memory");
}

void writeReport(const std::string& path, const data::ShardedData& data, const at::Tensor& stats,
                 int world) {
  std::ofstream out(path);
  if (!out) throw ConfigError("--report " + path + ": cannot write");
  const data::DataInfo& info = data.info();
  out << "{\"path\": \"" << info.path << "\", \"layout\": \"" << info.layout
      << "\", \"samples\": " << info.numSamples << ", \"world\": " << world
      << ", \"fingerprint\": \"" << info.fingerprint << "\", \"splits\": [";
  for (int s = 0; s < 3; ++s)
    out << (s ? ", " : "") << "[" << info.splits[s].begin << ", " << info.splits[s].end << "]";
  out << "], \"identity\": {";  // Note [Data continuity]: per dataset, its hash and how taken
  if (auto identity = data::identityFromYaml(info.identityYaml)) {
    for (std::size_t i = 0; i < identity->datasets.size(); ++i) {
      const auto& d = identity->datasets[i];
      out << (i ? ", " : "") << "\"" << d.path << "\": {\"hash\": \"" << d.hash
          << "\", \"held_as\": \"" << d.heldAs << "\", \"axis\": " << d.axis
          << ", \"unit_rows\": " << d.unitRows << "}";
    }
  }
  out << "}, \"ranks\": [";
  for (int r = 0; r < world; ++r) {
    out << (r ? ", " : "") << "{";
    for (int k = 0; k < kStats; ++k)
      out << (k ? ", " : "") << "\"" << kStatNames[k] << "\": " << stats[r][k].item<double>();
    out << "}";
  }
  out << "]}\n";
}

}  // namespace

int runDataCheck(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("config"))
    throw ConfigError("megabatch data check needs --config FILE", "overrides follow as key=value");
  std::vector<std::string> overrides(args.positionals.begin() + 1, args.positionals.end());
  Config config;
  dist::agreed(runtime.control(), "reading the config",
               [&] { config = loadConfigFile(args.get("config"), overrides); });
  log::setLevel(config.run.logLevel);
  c10::Device device = resolveDevice(config, runtime.topology());
  auto data = data::ShardedData::load(config, runtime.control(), device, data::Identity::kRecord);

  int rank = runtime.rank(), world = runtime.size();
  double gatherMs = 0;
  dist::agreed(runtime.control(), "gathering batches", [&] {
    LockedFile dump;
    if (args.has("dump")) {
      std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
      dump.file =
          h5::createFile(rankFile(args.get("dump"), rank, world), false, ExitCode::kFailure);
    }
    hid_t id = dump.file.valid() ? dump.file.get() : -1;
    gatherMs = gatherBatches(*data, args.getInt("batches", args.has("dump") ? 4 : 0), id);
    if (id >= 0) dumpEval(*data, id);
  });

  data::LoadStats load = data->loadStats();
  std::vector<double> mine(kStats, 0.0);
  mine[kTrain] = static_cast<double>(
      data->order()
          .itemsOfShards(data::GlobalOrder::shardsOfRank(data->order().numShards(), rank, world))
          .size());
  mine[kVal] = static_cast<double>(data->evalCount(data::Split::kVal));
  mine[kTest] = static_cast<double>(data->evalCount(data::Split::kTest));
  mine[kResident] = static_cast<double>(data->residentBytes());
  mine[kBytesRead] = static_cast<double>(load.bytesRead);
  mine[kBytesMapped] = static_cast<double>(load.bytesMapped);
  mine[kReadSeconds] = load.readSeconds;
  mine[kValidateSeconds] = load.validateSeconds;
  mine[kCheckSeconds] = load.checkSeconds;
  mine[kIdentifySeconds] = load.identifySeconds;
  mine[kPeakRss] = peakRssBytes();
  mine[kGatherMs] = gatherMs;
  at::Tensor stats =
      runtime.control().allGather(at::tensor(mine, at::kDouble), "data check: stats");
  if (rank == 0) {
    printSummary(*data, stats, world);
    if (args.has("report")) writeReport(args.get("report"), *data, stats, world);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace mb::app
