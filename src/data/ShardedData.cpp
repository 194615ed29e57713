// ShardedData::load: validate, plan, check memory, read collectively, check the values, record
// the data identity (when asked), build the residency. identifyFile: validate, plan, identify.
// Every phase where ranks may fail differently runs inside dist::agreed (Note [Schema
// validation], Note [Collective reads]); the phases in between are deterministic functions of
// what every rank read, so all ranks take the same branches.
#include "data/ShardedData.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include <ATen/Functions.h>

#include "common/Environment.h"
#include "common/Error.h"
#include "common/Hdf5External.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "data/Layout.h"
#include "data/LayoutRegistry.h"
#include "data/pipeline/ChunkStreamer.h"
#include "data/pipeline/ContentIdentity.h"
#include "data/pipeline/DataIdentity.h"
#include "data/pipeline/MappedFile.h"
#include "data/pipeline/MemoryBudget.h"
#include "data/pipeline/Reader.h"
#include "data/pipeline/ResidentData.h"
#include "data/pipeline/RowCache.h"
#include "data/pipeline/Splits.h"
#include "data/pipeline/Store.h"
#include "data/pipeline/TargetStats.h"
#include "data/pipeline/TimeSplits.h"
#include "dist/Agreement.h"
#include "dist/Communicator.h"
#include "dist/ParallelIo.h"

namespace mb::data {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr std::array<Split, 3> kSplits{Split::kTrain, Split::kVal, Split::kTest};

Residency resolveResidency(Residency residency, c10::Device device) {
  if (residency == Residency::kAuto)
    return device.is_cuda() ? Residency::kDevice : Residency::kHost;
  return residency;
}

const char* residencyName(Residency residency) {
  switch (residency) {
    case Residency::kDevice:
      return "device";
    case Residency::kHost:
      return "host";
    case Residency::kStream:
      return "stream";
    default:
      return "auto";
  }
}

std::uint64_t hostHash(int deviceIndex) {
  std::string key = env::hostName() + "#" + std::to_string(deviceIndex);
  return hashBytes(key.data(), key.size());
}

class Loader {
 public:
  Loader(const Config& config, dist::Communicator& comm, c10::Device device)
      : config_(config),
        comm_(comm),
        device_(device),
        rank_(comm.rank()),
        world_(comm.size()),
        residency_(resolveResidency(config.data.residency, device)),
        storeDevice_(residency_ == Residency::kHost ? c10::Device(c10::kCPU) : device) {
    stats_.residency = residency_;
  }

  std::unique_ptr<ShardedData> run(Identity identity) {
    purpose_ = identity == Identity::kRecord ? "train" : "read";
    auto start = Clock::now();
    plan();
    stats_.validateSeconds = secondsSince(start);
    checkMemory();
    std::array<std::vector<at::Tensor>, 3> tensors;
    dist::agreed(comm_, "allocating memory for " + config_.data.path,
                 [&] { tensors = allocate(); });
    read(tensors);
    start = Clock::now();
    dist::agreed(comm_, "checking the values of " + config_.data.path,
                 [&] { checkLoadedValues(tensors); });
    stats_.checkSeconds = secondsSince(start);
    // After the value checks, so that a bad row is reported by the rank that loaded it.
    if (identity == Identity::kRecord) identifyLoaded(tensors);
    return build(std::move(tensors));
  }

  // Note [Data continuity]: what a load with this config would record, with nothing loaded.
  DataIdentity identifyOnly() {
    announce_ = false;
    plan();
    return identifyContent(config_.data.path, *layout_, info_, {plans_, {}, nullptr}, comm_);
  }

 private:
  // Checks the launch and the file's structure, and plans the splits and every rank's reads.
  void plan() {
    dist::agreed(comm_, "checking the launch against data.canonical_shards",
                 [&] { checkLaunch(); });
    h5::Handle file;
    dist::agreed(comm_, "validating " + config_.data.path, [&] { file = validate(); });
    dist::agreed(comm_, "planning the shards of " + config_.data.path,
                 [&] { planReads(file.get()); });
    file.reset();
    checkSameFileEverywhere();
  }

  void identifyLoaded(const std::array<std::vector<at::Tensor>, 3>& tensors) {
    const auto start = Clock::now();
    const HeldRows held{plans_, {readsSplit(Split::kTrain), true, true}, &tensors};
    info_.identityYaml =
        identityToYaml(identifyContent(config_.data.path, *layout_, info_, held, comm_));
    stats_.identifySeconds = secondsSince(start);
    if (rank_ == 0)
      log::get("data").info("{}: every row hashed for the data identity in {:.2f} s",
                            config_.data.path, stats_.identifySeconds);
  }

  void checkLaunch() {
    std::int64_t shards = config_.data.canonicalShards;
    if (shards < world_)
      throw ConfigError(
          "data.canonical_shards = " + std::to_string(shards) + " is smaller than the " +
              std::to_string(world_) + " ranks launched: every rank needs at least one shard",
          "set data.canonical_shards >= " + std::to_string(world_) + " (it caps the ranks a run " +
              "can use or resume on), or launch fewer ranks");
  }

  // Structure and this rank's slice of the index arrays (Note [Schema validation]).
  h5::Handle validate() {
    // Without this, an empty path reaches HDF5 and the message reads ": no such file".
    if (config_.data.path.empty())
      throw ConfigError(
          "data.path is not set: the config names no data file",
          "add `data: {path: FILE.h5}` to the config, or the override data.path=FILE.h5");
    h5::setAllowExternal(config_.data.allowExternal);
    h5::Handle file = h5::openFile(config_.data.path, false, ExitCode::kData);
    layout_ = openLayout(file.get(), config_.data.path, config_);
    checkIndexSlice(file.get(), *layout_, rank_, world_);
    return file;
  }

  // Splits, order, and every rank's reads: the same on every rank once validation passed.
  void planReads(hid_t file) {
    IndexReader index(file, schema().path);
    std::int64_t first = layout_->firstUsableSample(index);
    if (first > 0 && rank_ == 0 && announce_)
      log::get("data").warn(
          "{}: skipping the first {} samples: their windows would start before row 0",
          schema().path, first);
    const SplitConfig& split = config_.data.split;
    NextStart embargo =
        split.embargo >= 0 ? fixedGap(split.embargo) : layout_->oneWindowEmbargo(index);
    if (split.embargo < 0 && config_.data.horizon > 0)
      embargo = pastTheHorizon(config_.data.horizon, std::move(embargo));
    std::optional<SampleTimes> times;
    if (schema().timestamps.present())
      times.emplace(index, schema().timestamps, config_.data.timeUnit, schema().path);
    fillInfo(planAllSplits({first, schema().numSamples}, embargo, times));
    if (times) {
      for (Split s : kSplits)
        info_.splitTimes[static_cast<int>(s)] = times->span(info_.split(s));
    }
    info_.fingerprint = fingerprint(file, *layout_, index);
    checkShardCount();
    order_.emplace(info_.split(Split::kTrain).size(), config_.data.canonicalShards,
                   static_cast<std::uint64_t>(config_.train.seed), config_.train.globalBatch,
                   config_.data.shuffle,
                   residency_ == Residency::kStream ? config_.data.streamChunkItems : 0, laneSpec(),
                   layout_->sampleCosts(info_.split(Split::kTrain)));
    planStores(index);
    findMappable(file);
    logPlan(first);
  }

  // By fractions or by time (Note [Splits by time]); a selected period as the test split (Note
  // [Selected period]).
  std::array<SampleRange, 3> planAllSplits(SampleRange usable, const NextStart& embargo,
                                           std::optional<SampleTimes>& times) {
    const DataConfig& data = config_.data;
    const PeriodSelection& period = data.period;
    if ((data.split.byTime() || period.active()) && !times)
      throw DataError(
          schema().path + " has no timestamps (dataset /" +
              (schema().layout == "panel" ? data.names.time : data.names.timestamps) +
              "), so it cannot be " +
              (period.active() ? "cut by --from/--to" : "split by time (data.split.train_until)"),
          period.active() ? "evaluate a whole split with --split val|test"
                          : "add the timestamps to the file (docs/data-format.md), or "
                            "split by data.split.train_fraction/val_fraction/"
                            "test_fraction");
    if (period.active() && period.split.empty())
      return periodSplits(usable, usable, *times, "the file");
    std::array<SampleRange, 3> splits =
        data.split.byTime() ? planTimeSplits(usable, data.split, *times, embargo, data.horizon)
                            : planSplits(usable, data.split, embargo, schema().path);
    if (!period.active()) return splits;
    for (Split s : kSplits) {
      if (period.split == toString(s))
        return periodSplits(usable, splits[static_cast<int>(s)], *times,
                            "the " + period.split + " split");
    }
    throw ConfigError("--split " + period.split + ": expected train, val or test");
  }

  std::array<SampleRange, 3> periodSplits(SampleRange usable, SampleRange within,
                                          SampleTimes& times, const std::string& what) {
    std::array<SampleRange, 3> splits{};
    splits[static_cast<int>(Split::kTest)] = selectPeriod(within, config_.data.period, times, what);
    const std::int64_t shards = std::min(usable.size(), config_.data.canonicalShards);
    splits[static_cast<int>(Split::kTrain)] = {usable.begin, usable.begin + shards};
    splits[static_cast<int>(Split::kVal)] = {usable.begin, usable.begin};
    return splits;
  }

  void fillInfo(const std::array<SampleRange, 3>& splits) {
    info_.layout = schema().layout;
    info_.path = schema().path;
    info_.numSamples = schema().numSamples;
    info_.splits = splits;
    layout_->describe(info_);
    info_.canonicalShards = config_.data.canonicalShards;
    info_.hasTimestamps = schema().timestamps.present();
    info_.timeUnit = config_.data.timeUnit;
    info_.splitsByTime = config_.data.split.byTime();
    info_.periodSelected = config_.data.period.active();
    info_.horizon = config_.data.horizon;
    info_.targetsDataset = schema().targets.path;
    if (schema().timestamps.present()) info_.timestampsDataset = schema().timestamps.path;
  }

  void checkShardCount() {
    std::int64_t trainSamples = info_.split(Split::kTrain).size();
    if (trainSamples < config_.data.canonicalShards)
      throw DataError(schema().path + ": the train split has " + std::to_string(trainSamples) +
                          " samples, fewer than data.canonical_shards = " +
                          std::to_string(config_.data.canonicalShards) + " (every shard needs one)",
                      "lower data.canonical_shards or use more data");
  }

  // Note [Lane order]. The validator checks the config alone; this checks what the run really
  // uses: a resumed run keeps the checkpoint's V and G, and only here is n known.
  LaneSpec laneSpec() const {
    if (!config_.model.stateful) return {};
    const std::int64_t shards = config_.data.canonicalShards;
    const std::int64_t batch = config_.train.globalBatch;
    const std::int64_t lanes = config_.model.lanes > 0 ? config_.model.lanes : batch / shards;
    if (lanes < 1 || batch != shards * lanes)
      throw ConfigError(
          "model.stateful = true takes one item per lane per step, so "
          "train.global_batch = " +
              std::to_string(batch) +
              " must equal data.canonical_shards = " + std::to_string(shards) +
              " x lanes per shard (model.lanes = " + std::to_string(config_.model.lanes) +
              ", 0 = global_batch / shards)",
          "set train.global_batch to a multiple of data.canonical_shards and "
          "model.lanes = 0 (a resumed run keeps the global batch it started with)");
    if (residency_ == Residency::kStream)
      throw ConfigError("model.stateful = true cannot use data.residency = stream",
                        "set data.residency = host or device");
    const std::int64_t shortest = info_.split(Split::kTrain).size() / shards;
    if (shortest < lanes)
      throw DataError(schema().path + ": the train split's shortest shard has " +
                          std::to_string(shortest) + " samples, fewer than its " +
                          std::to_string(lanes) + " lanes (model.stateful needs >= 1 per lane)",
                      "lower train.global_batch or data.canonical_shards, or use more data");
    return {lanes, config_.model.laneStride};
  }

  void planStores(IndexReader& index) {
    for (Split split : kSplits) {
      auto& plans = plans_[static_cast<int>(split)];
      for (int r = 0; r < world_; ++r) {
        SampleRange samples = split == Split::kTrain
                                  ? trainPart(info_.split(split), *order_, r, world_)
                                  : evalPart(info_.split(split), r, world_);
        plans.push_back(layout_->planStore(samples, config_.data.residentDtype, index));
      }
    }
  }

  void logPlan(std::int64_t first) {
    if (rank_ != 0 || !announce_) return;
    const bool period = config_.data.period.active();  // the command says what it selected
    log::get("data").info(
        "{}: {} layout, {} samples (usable from {}); V = {} shards over {} ranks; residency {}{}",
        schema().path, info_.layout, schema().numSamples, first, info_.canonicalShards, world_,
        residencyName(residency_),
        period               ? ""
        : info_.splitsByTime ? "; splits by time:"
                             : "; splits by fractions:");
    if (period) return;
    for (Split s : kSplits)
      log::get("data").info("  {:<5} {}", toString(s), describeSplit(info_, s));
  }

  // A rank that read another file would plan other reads and break the collective reads.
  void checkSameFileEverywhere() {
    if (world_ == 1) return;
    auto hash =
        static_cast<std::int64_t>(hashBytes(info_.fingerprint.data(), info_.fingerprint.size()));
    at::Tensor all = comm_.allGather(at::full({1}, hash, at::kLong), "data: same file check");
    for (int r = 1; r < world_; ++r) {
      if (all[r].item<std::int64_t>() == all[0].item<std::int64_t>()) continue;
      Error error = DataError(
          config_.data.path + ": rank " + std::to_string(r) +
              " sees different content than rank 0 (dataset shapes or values differ)",
          "every rank must read the same file: use a shared filesystem or copy it to every node");
      error.markAgreed();  // every rank reaches this same conclusion from the same gathered values
      throw error;
    }
  }

  const FileSchema& schema() const { return layout_->schema(); }

  const StorePlan& myPlan(Split split) const { return plans_[static_cast<int>(split)][rank_]; }

  bool readsSplit(Split split) const {
    return split != Split::kTrain || residency_ != Residency::kStream;
  }

  void checkMemory() {
    int deviceIndex =
        storeDevice_.is_cuda() && storeDevice_.has_index() ? storeDevice_.index() : -1;
    at::Tensor keys =
        comm_.allGather(at::full({1}, static_cast<std::int64_t>(hostHash(deviceIndex)), at::kLong),
                        "data: ranks per node");
    int sharing = static_cast<int>(keys.eq(keys[rank_]).sum().item<std::int64_t>());
    dist::agreed(comm_, "checking the memory budget", [&] {
      std::int64_t needed = 0;
      for (Split split : kSplits) {
        if (readsSplit(split)) needed += myPlan(split).bytes();
      }
      std::string what = "rank " + std::to_string(rank_) + "'s " +
                         (residency_ == Residency::kStream ? "val/test parts and train chunks"
                                                           : "train shards and val/test parts");
      if (residency_ == Residency::kStream) needed += streamBytes();
      MemoryBudget budget = memoryBudget(config_.data, storeDevice_, sharing);
      stats_.budgetBytes = budget.bytes;
      stats_.budget = budget.description;
      checkMemoryBudget(needed, budget, what, residency_, world_);
    });
  }

  // Stream residency: the chunk capacity times the bytes of an average chunk (plus windows).
  std::int64_t streamBytes() const {
    const StorePlan& train = myPlan(Split::kTrain);
    std::int64_t items = std::max<std::int64_t>(1, train.samples.size());
    std::int64_t chunkItems = std::min(items, std::max<std::int64_t>(1, order_->chunkItems()));
    std::int64_t perChunk = train.bytes() / items * chunkItems;
    for (const auto& read : train.reads) {
      if (read.haloRows > 0)
        perChunk += read.bytes() / std::max<std::int64_t>(1, read.rows.size()) * read.haloRows;
    }
    ShardRange shards = GlobalOrder::shardsOfRank(order_->numShards(), rank_, world_);
    return perChunk * ChunkStreamer::capacityBound(*order_, shards);
  }

  // Note [Zero-copy host residency]: which datasets this load maps instead of reading. The
  // same on every rank (file metadata and config only).
  void findMappable(hid_t file) {
    if (!config_.data.hostMmap || !storeDevice_.is_cpu()) return;
    for (Split split : kSplits) {
      if (!readsSplit(split)) continue;
      for (const auto& read : myPlan(split).reads) {
        if (mappable_.count(read.path)) continue;
        mappable_[read.path] = mappableOffset(file, read.path, read.type);
      }
    }
  }

  bool mapped(const ReadSpec& read) const {
    if (read.axis != 0) return false;  // a column range is not one contiguous run of bytes
    auto it = mappable_.find(read.path);
    return it != mappable_.end() && it->second.has_value();
  }

  std::array<std::vector<at::Tensor>, 3> allocate() const {
    std::array<std::vector<at::Tensor>, 3> tensors;
    for (Split split : kSplits) {
      if (!readsSplit(split)) continue;
      for (const auto& read : myPlan(split).reads) {
        auto options = at::TensorOptions().dtype(read.type).device(storeDevice_);
        tensors[static_cast<int>(split)].push_back(mapped(read) ? at::Tensor()
                                                                : at::empty(read.shape, options));
      }
    }
    return tensors;
  }

  void read(std::array<std::vector<at::Tensor>, 3>& tensors) {
    dist::ParallelIo io(comm_);
    stats_.io = io.describe();
    auto start = Clock::now();
    dist::agreed(comm_, "reading " + config_.data.path, [&] {
      readCollectively(io, tensors);
      mapRows(tensors);  // local: after the last collective call
    });
    stats_.readSeconds = secondsSince(start);
    if (rank_ == 0)
      log::get("data").info(
          "rank 0 loaded {} in {:.2f} s: read {} ({}), mapped {} from the page cache{}",
          str::humanBytes(
              static_cast<double>(stats_.bytesRead + stats_.bytesMapped + stats_.bytesKept)),
          stats_.readSeconds, str::humanBytes(static_cast<double>(stats_.bytesRead)), stats_.io,
          str::humanBytes(static_cast<double>(stats_.bytesMapped)),
          stats_.bytesKept > 0
              ? ", kept " + str::humanBytes(static_cast<double>(stats_.bytesKept)) +
                    " from the load before"
              : std::string());
  }

  void readCollectively(const dist::ParallelIo& io,
                        std::array<std::vector<at::Tensor>, 3>& tensors) {
    h5::Handle file = h5::openFile(config_.data.path, false, ExitCode::kData, io.fileAccess());
    RowReader reader(file.get(), io.transfer(), io.collective());
    RowCache* kept = RowCache::of(config_.data.path);  // a walk's (Note [Rows kept between loads])
    // Progress of the read (Note [Work progress]): every rank knows every rank's plan, so the
    // one with the most bytes to read (the last to finish) reports, without a collective.
    std::vector<std::int64_t> bytes;
    for (Split split : kSplits) {
      if (!readsSplit(split)) continue;
      const auto& plans = plans_[static_cast<int>(split)];
      bytes.resize(std::max(bytes.size(), plans.size()), 0);
      for (std::size_t r = 0; r < plans.size(); ++r) {
        for (const auto& read : plans[r].reads)
          bytes[r] += mapped(read) ? 0 : read.bytes();
      }
    }
    const auto speaker = static_cast<int>(
        bytes.empty() ? 0 : std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    WorkProgress::Options shown;
    shown.label = "load";
    shown.counting = WorkProgress::Unit::kBytes;
    shown.total = rank_ < static_cast<int>(bytes.size()) ? bytes[rank_] : 0;
    shown.speaks = rank_ == speaker;
    shown.tag = "data";
    shown.startLine =
        "load " + config_.data.path + ": " + str::humanBytes(static_cast<double>(shown.total)) +
        " to read" +
        (bytes.size() > 1 ? " on rank " + std::to_string(speaker) + " (the most of any rank)"
                          : std::string());
    WorkProgress progress(shown);
    reader.setProgress(&progress);
    for (Split split : kSplits) {
      if (!readsSplit(split)) continue;
      const auto& plans = plans_[static_cast<int>(split)];
      for (std::size_t i = 0; i < myPlan(split).reads.size(); ++i) {
        if (mapped(myPlan(split).reads[i])) continue;  // on every rank alike
        std::vector<ItemRange> allRanks;
        for (const auto& plan : plans)
          allRanks.push_back(plan.reads[i].rows);
        const ReadSpec& spec = myPlan(split).reads[i];
        reader.read(spec.path, allRanks, rank_, tensors[static_cast<int>(split)][i], spec.axis,
                    kept, fmt::format("{} {} {} {}", purpose_, toString(split), spec.path, world_));
      }
    }
    file.close(ExitCode::kData, config_.data.path);  // collective under MPI-IO
    progress.finish();
    stats_.bytesRead = reader.bytesRead();
    stats_.bytesKept = reader.bytesKept();
    reader.throwIfFailed();
  }

  void mapRows(std::array<std::vector<at::Tensor>, 3>& tensors) {
    bool unlocked = false;
    for (Split split : kSplits) {
      if (!readsSplit(split)) continue;
      for (std::size_t i = 0; i < myPlan(split).reads.size(); ++i) {
        const ReadSpec& read = myPlan(split).reads[i];
        if (!mapped(read)) continue;
        std::int64_t rowBytes = read.rows.size() > 0 ? read.bytes() / read.rows.size() : 0;
        auto offset =
            *mappable_.at(read.path) + static_cast<std::uint64_t>(read.rows.begin * rowBytes);
        Mapping mapping = data::mapRows(config_.data.path, offset, read.shape, read.type);
        unlocked = unlocked || (!mapping.locked && read.bytes() > 0);
        stats_.bytesMapped += read.bytes();
        tensors[static_cast<int>(split)][i] = std::move(mapping.tensor);
      }
    }
    if (unlocked)
      log::get("data").warn(
          "{}: could not lock the mapped rows in memory (RLIMIT_MEMLOCK); the kernel may evict "
          "them under memory pressure. Raise `ulimit -l` or set data.host_mmap=false",
          config_.data.path);
  }

  void checkLoadedValues(const std::array<std::vector<at::Tensor>, 3>& tensors) {
    for (Split split : kSplits) {
      if (readsSplit(split)) layout_->checkValues(myPlan(split), tensors[static_cast<int>(split)]);
    }
  }

  std::unique_ptr<ShardedData> build(std::array<std::vector<at::Tensor>, 3> tensors) {
    std::array<Store, 3> stores;
    for (Split split : kSplits) {
      if (readsSplit(split))
        stores[static_cast<int>(split)] =
            Store(layout_, myPlan(split), std::move(tensors[static_cast<int>(split)]));
    }
    // A selected period's train split is a stand-in: its figures are not the train split's.
    const bool trainSplit = readsSplit(Split::kTrain) && !info_.periodSelected;
    if (schema().classification) {
      info_.numClasses = countClasses(stores, schema(), config_.model.numClasses, comm_);
      if (trainSplit)
        info_.trainClassCounts =
            trainClassCounts(stores[static_cast<int>(Split::kTrain)], info_.numClasses, comm_);
    }
    if (!info_.integerTargets && trainSplit)
      info_.trainTargetMean =
          trainTargetMean(stores[static_cast<int>(Split::kTrain)], info_.targetShape, comm_);
    ShardRange shards = GlobalOrder::shardsOfRank(order_->numShards(), rank_, world_);
    Store& val = stores[static_cast<int>(Split::kVal)];
    Store& test = stores[static_cast<int>(Split::kTest)];
    if (residency_ == Residency::kStream) {
      auto streamer = std::make_unique<ChunkStreamer>(layout_, info_.split(Split::kTrain),
                                                      config_.data.residentDtype, storeDevice_,
                                                      *order_, shards);
      return std::make_unique<detail::StreamingData>(info_, *order_, device_, shards,
                                                     std::move(streamer), std::move(val),
                                                     std::move(test), stats_);
    }
    return std::make_unique<detail::ResidentData>(
        info_, *order_, device_, shards, std::move(stores[static_cast<int>(Split::kTrain)]),
        std::move(val), std::move(test), stats_);
  }

  const Config& config_;
  dist::Communicator& comm_;
  c10::Device device_;
  int rank_;
  int world_;
  std::string purpose_;  // what the load is for: its rows are kept apart (RowCache keys)
  Residency residency_;
  c10::Device storeDevice_;
  std::shared_ptr<const Layout> layout_;  // set by validate()
  DataInfo info_;
  std::optional<GlobalOrder> order_;
  std::array<std::vector<StorePlan>, 3> plans_;                   // [split][rank]
  std::map<std::string, std::optional<std::uint64_t>> mappable_;  // dataset -> file offset
  LoadStats stats_;
  bool announce_ = true;  // log the plan
};

}  // namespace

std::unique_ptr<ShardedData> ShardedData::load(const Config& config, dist::Communicator& control,
                                               c10::Device device, Identity identity) {
  // Another ShardedData may be streaming (or a checkpoint being written) on another thread.
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::silenceLibraryErrors();
  MemoryPhase phase("loading the data");  // Note [Out of memory is an expected error]
  return Loader(config, control, device).run(identity);
}

DataIdentity identifyFile(const Config& config, dist::Communicator& comm) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::silenceLibraryErrors();
  return Loader(config, comm, c10::Device(c10::kCPU)).identifyOnly();
}

}  // namespace mb::data
