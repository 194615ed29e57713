#include "data/pipeline/ContentIdentity.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "data/Layout.h"
#include "data/pipeline/ContentHash.h"
#include "dist/Agreement.h"
#include "dist/Communicator.h"

namespace mb::data {
namespace {

constexpr std::array<Split, 3> kHeldSplits{Split::kTrain, Split::kVal, Split::kTest};

// The units of one dataset claimed so far, as sorted disjoint ranges.
class UnitClaims {
 public:
  // The parts of `units` no earlier call claimed; claims them.
  std::vector<ItemRange> claim(ItemRange units) {
    std::vector<ItemRange> fresh;
    std::int64_t at = units.begin;
    for (const auto& r : ranges_) {
      if (r.begin >= units.end) break;
      if (r.end <= at) continue;
      if (r.begin > at) fresh.push_back({at, r.begin});
      at = std::max(at, r.end);
    }
    if (at < units.end) fresh.push_back({at, units.end});
    ranges_.insert(ranges_.end(), fresh.begin(), fresh.end());
    std::sort(ranges_.begin(), ranges_.end(),
              [](const ItemRange& a, const ItemRange& b) { return a.begin < b.begin; });
    return fresh;
  }
  // The units of [0, total) nobody claimed.
  std::vector<ItemRange> unclaimed(std::int64_t total) const {
    std::vector<ItemRange> gaps;
    std::int64_t at = 0;
    for (const auto& r : ranges_) {
      if (r.begin > at) gaps.push_back({at, r.begin});
      at = std::max(at, r.end);
    }
    if (at < total) gaps.push_back({at, total});
    return gaps;
  }

 private:
  std::vector<ItemRange> ranges_;
};

// Units a store of this rank hashes from its tensors: read `read` of split `split`.
struct HeldUnits {
  std::size_t dataset;
  int split;
  std::size_t read;
  ItemRange units;
};

// Units read from the file.
struct FileUnits {
  std::size_t dataset;
  ItemRange units;
};

struct Shares {
  std::vector<HeldUnits> held;                 // this rank's
  std::vector<std::vector<FileUnits>> toRead;  // [rank]
};

const ReadSpec* firstReadOf(const std::array<std::vector<StorePlan>, 3>& plans,
                            const std::string& path) {
  for (const auto& split : plans) {
    for (const auto& plan : split) {
      for (const auto& read : plan.reads) {
        if (read.path == path) return &read;
      }
    }
  }
  return nullptr;
}

// The datasets of the identity, in a fixed order: those scheme 1 listed (the fingerprint's,
// targets, timestamps), then any other a store reads. As the stores hold them, else as the file.
std::vector<HashedDataset> hashedDatasets(hid_t file, const Layout& layout,
                                          const std::array<std::vector<StorePlan>, 3>& plans) {
  std::vector<HashedDataset> datasets;
  auto add = [&](const std::string& path, const h5::DatasetInfo& info, int sinceScheme) {
    if (path.empty()) return;  // an optional dataset the file lacks
    for (const auto& d : datasets) {
      if (d.path == path) return;
    }
    HashedDataset d;
    d.path = path;
    d.dims = info.dims;
    d.fileType = info.typeName();
    d.sinceScheme = sinceScheme;
    if (const ReadSpec* read = firstReadOf(plans, path)) {
      d.type = read->type;
      d.axis = read->axis;
    } else {
      d.type = h5::naturalScalarType(info, ExitCode::kData, path);
    }
    datasets.push_back(std::move(d));
  };
  for (const auto& d : layout.contentDatasets())
    add(d.path, d.info, 1);
  add(layout.schema().targets.path, layout.schema().targets.info, 1);
  add(layout.schema().timestamps.path, layout.schema().timestamps.info, 1);
  for (const auto& split : plans) {
    for (const auto& plan : split) {
      for (const auto& read : plan.reads) {
        if (std::any_of(datasets.begin(), datasets.end(),
                        [&](const HashedDataset& d) { return d.path == read.path; }))
          continue;
        h5::Handle dataset = h5::openDataset(file, read.path, ExitCode::kData);
        add(read.path, h5::describe(dataset.get()), 2);
      }
    }
  }
  return datasets;
}

// Rank r of `world` reads units [r*T/W, (r+1)*T/W) of the T units in `gaps`, in order.
void spreadOverRanks(std::size_t dataset, const std::vector<ItemRange>& gaps,
                     std::vector<std::vector<FileUnits>>& toRead) {
  std::int64_t total = 0;
  for (const auto& g : gaps)
    total += g.size();
  const auto world = static_cast<std::int64_t>(toRead.size());
  for (std::int64_t r = 0; r < world; ++r) {
    const std::int64_t first = total * r / world, last = total * (r + 1) / world;
    std::int64_t seen = 0;  // units of the gaps before g
    for (const auto& g : gaps) {
      const std::int64_t begin = std::max(first, seen), end = std::min(last, seen + g.size());
      if (begin < end)
        toRead[r].push_back({dataset, {g.begin + begin - seen, g.begin + end - seen}});
      seen += g.size();
    }
  }
}

Shares planShares(const std::vector<HashedDataset>& datasets, const HeldRows& held, int rank,
                  int world) {
  Shares shares;
  shares.toRead.resize(world);
  for (std::size_t d = 0; d < datasets.size(); ++d) {
    UnitClaims claims;
    for (Split split : kHeldSplits) {
      const int s = static_cast<int>(split);
      if (!held.resident[s]) continue;
      const auto& plans = held.plans[s];
      for (std::size_t r = 0; r < plans.size(); ++r) {
        for (std::size_t i = 0; i < plans[r].reads.size(); ++i) {
          const ReadSpec& read = plans[r].reads[i];
          if (read.path != datasets[d].path) continue;
          for (const ItemRange& units : claims.claim(datasets[d].unitsWithin(read.rows))) {
            if (static_cast<int>(r) == rank) shares.held.push_back({d, s, i, units});
          }
        }
      }
    }
    spreadOverRanks(d, claims.unclaimed(datasets[d].units()), shares.toRead);
  }
  return shares;
}

std::int64_t bytesToRead(const std::vector<HashedDataset>& datasets,
                         const std::vector<FileUnits>& units) {
  std::int64_t bytes = 0;
  for (const auto& u : units)
    bytes += datasets[u.dataset].rowsOf(u.units).size() * datasets[u.dataset].rowBytes();
  return bytes;
}

// Progress of the reads (Note [Work progress]): the rank with the most to read speaks.
WorkProgress::Options readProgress(const std::string& path,
                                   const std::vector<HashedDataset>& datasets, const Shares& shares,
                                   int rank) {
  std::vector<std::int64_t> bytes;
  for (const auto& units : shares.toRead)
    bytes.push_back(bytesToRead(datasets, units));
  const auto speaker =
      static_cast<int>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
  WorkProgress::Options shown;
  shown.label = "identify";
  shown.counting = WorkProgress::Unit::kBytes;
  shown.total = bytes[rank];
  shown.speaks = rank == speaker;
  shown.tag = "data";
  shown.startLine =
      "identify " + path + ": " + str::humanBytes(static_cast<double>(shown.total)) +
      " of rows no rank holds to read and hash" +
      (bytes.size() > 1 ? " on rank " + std::to_string(speaker) + " (the most)" : std::string());
  return shown;
}

// This rank's sums, one per dataset.
std::vector<std::uint64_t> hashShare(const std::string& path,
                                     const std::vector<HashedDataset>& datasets,
                                     const HeldRows& held, const Shares& shares, int rank) {
  std::vector<std::uint64_t> sums(datasets.size(), 0);
  for (const auto& piece : shares.held) {
    const HashedDataset& d = datasets[piece.dataset];
    const ReadSpec& read = held.plans[piece.split][rank].reads[piece.read];
    const at::Tensor& tensor = (*held.tensors)[piece.split][piece.read];
    const at::Tensor rows = tensor.transpose(0, read.axis);  // rows along dim 0
    const ItemRange span = d.rowsOf(piece.units);
    sums[piece.dataset] +=
        hashUnits(d, piece.units.begin, rows.narrow(0, span.begin - read.rows.begin, span.size()));
  }
  const std::vector<FileUnits>& mine = shares.toRead[rank];
  if (mine.empty()) return sums;
  WorkProgress progress(readProgress(path, datasets, shares, rank));
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  for (const auto& piece : mine) {
    sums[piece.dataset] += hashFileUnits(file.get(), datasets[piece.dataset], piece.units,
                                         [&](std::int64_t bytes) { progress.advance(bytes); });
  }
  progress.finish();
  return sums;
}

// The sums of every rank, added mod 2^64: as two 32-bit halves each, which an int64 all-reduce
// adds without overflow (for fewer than 2^31 ranks).
std::vector<std::uint64_t> addOverRanks(const std::vector<std::uint64_t>& mine,
                                        dist::Communicator& comm) {
  const auto n = static_cast<std::int64_t>(mine.size());
  at::Tensor halves = at::empty({n, 2}, at::kLong);
  auto* h = halves.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    h[2 * i] = static_cast<std::int64_t>(mine[i] & 0xffffffffULL);
    h[2 * i + 1] = static_cast<std::int64_t>(mine[i] >> 32);
  }
  if (n > 0) comm.allReduce(halves, dist::ReduceOp::kSum, "data: content hashes");
  h = halves.data_ptr<std::int64_t>();
  std::vector<std::uint64_t> sums(mine.size());
  for (std::int64_t i = 0; i < n; ++i)
    sums[i] =
        static_cast<std::uint64_t>(h[2 * i]) + (static_cast<std::uint64_t>(h[2 * i + 1]) << 32);
  return sums;
}

std::string sumText(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

DataIdentity identifyContent(const std::string& path, const Layout& layout, const DataInfo& info,
                             const HeldRows& held, dist::Communicator& comm) {
  std::vector<HashedDataset> datasets;
  std::vector<std::uint64_t> mine;
  dist::agreed(comm, "identifying the content of " + path, [&] {
    {
      h5::Handle file = h5::openFile(path, false, ExitCode::kData);
      datasets = hashedDatasets(file.get(), layout, held.plans);
    }
    const Shares shares = planShares(datasets, held, comm.rank(), comm.size());
    mine = hashShare(path, datasets, held, shares, comm.rank());
  });
  const std::vector<std::uint64_t> sums = addOverRanks(mine, comm);
  DataIdentity identity;
  identity.samples = info.numSamples;
  identity.splits = info.splits;
  identity.splitTimes = info.splitTimes;
  identity.timeUnit = info.timeUnit;
  identity.splitsByTime = info.splitsByTime;
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    const HashedDataset& d = datasets[i];
    DatasetIdentity dataset;
    dataset.path = d.path;
    dataset.dims = d.dims;
    dataset.type = d.fileType;
    dataset.hash = sumText(sums[i]);
    dataset.heldAs = heldTypeName(d.type);
    dataset.axis = d.axis;
    dataset.unitRows = d.unitRows();
    dataset.sinceScheme = d.sinceScheme;
    identity.datasets.push_back(std::move(dataset));
  }
  return identity;
}

}  // namespace mb::data
