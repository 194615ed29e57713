#pragma once
// Small data files for the data-layer tests, written with the project's HDF5 helpers. Values
// are exact in float32 and unique per (stream, row, feature), so a wrong gather cannot match.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>

#include "common/Hdf5.h"
#include "config/Config.h"
#include "data/Batch.h"

#include "tests/support/TempDir.h"

namespace mb::test {

// values[s][r][f] = s * 2^20 + r * 8 + f (F <= 8, rows < 2^17).
inline at::Tensor streamValues(std::int64_t stream, std::int64_t rows, std::int64_t features) {
  return at::arange(rows, at::kFloat).mul(8).unsqueeze(1) +
         at::arange(features, at::kFloat).unsqueeze(0) + static_cast<float>(stream * (1 << 20));
}

struct SeriesSpec {
  std::int64_t rows = 2000;  // finest rows
  std::vector<std::pair<std::string, std::int64_t>> streams{{"m1", 1}, {"m5", 5}};
  std::int64_t features = 3;
  std::int64_t firstRow = 0;  // row of sample 0 in the finest stream
  h5::WriteOptions write;
};

// Sample i ends at finest row firstRow + i; in a stream of period p at row (t + 1) / p - 1
// (clamped to 0). Targets [N] = i * 0.5; timestamps 1000 + 60 i.
inline std::int64_t writeSeriesFile(const std::string& path, const SeriesSpec& spec) {
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  std::int64_t n = spec.rows - spec.firstRow;
  at::Tensor t = at::arange(spec.firstRow, spec.rows, at::kLong);
  h5::Handle ends = h5::createGroup(file.get(), "samples/end", ExitCode::kFailure);
  for (std::size_t s = 0; s < spec.streams.size(); ++s) {
    const auto& [name, period] = spec.streams[s];
    h5::Handle group = h5::createGroup(file.get(), "series/" + name, ExitCode::kFailure);
    h5::writeTensor(group.get(), "values",
                    streamValues(static_cast<std::int64_t>(s), spec.rows / period, spec.features),
                    spec.write, ExitCode::kFailure);
    h5::writeTensor(ends.get(), name, (t + 1).div(period, "floor").sub(1).clamp_min(0), spec.write,
                    ExitCode::kFailure);
  }
  h5::writeTensor(file.get(), "targets", at::arange(n, at::kFloat).mul(0.5), spec.write,
                  ExitCode::kFailure);
  h5::writeTensor(file.get(), "timestamps", at::arange(n, at::kLong).mul(60).add(1000), spec.write,
                  ExitCode::kFailure);
  return n;
}

// features [N, T, F] (or [N, F] when window == 0): sample i, step k, feature f = i*64 + k*4 + f.
inline void writeSamplesFile(const std::string& path, std::int64_t n, std::int64_t window,
                             std::int64_t features, const at::Tensor& targets,
                             const h5::WriteOptions& write = {}) {
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  at::Tensor x = at::arange(n, at::kFloat).mul(64).view({n, 1, 1}) +
                 at::arange(std::max<std::int64_t>(window, 1), at::kFloat).mul(4).view({1, -1, 1}) +
                 at::arange(features, at::kFloat).view({1, 1, features});
  if (window == 0) x = x.squeeze(1);
  h5::writeTensor(file.get(), "features", x, write, ExitCode::kFailure);
  h5::writeTensor(file.get(), "targets", targets, write, ExitCode::kFailure);
}

// tokens [T] of `type` with values i % vocab.
inline void writeTokensFile(const std::string& path, std::int64_t length, std::int64_t vocab,
                            at::ScalarType type, const h5::WriteOptions& write = {}) {
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  h5::writeTensor(file.get(), "tokens", at::arange(length, at::kLong).remainder(vocab).to(type),
                  write, ExitCode::kFailure);
  h5::Handle tokens = h5::openDataset(file.get(), "tokens", ExitCode::kFailure);
  h5::writeAttribute(tokens.get(), "vocab_size", vocab, ExitCode::kFailure);
}

// `batch` with every tensor copied to the CPU, to compare with rows read from the file.
inline data::Batch toCpu(const data::Batch& batch) {
  auto cpu = [](const at::Tensor& t) { return t.defined() ? t.cpu() : t; };
  data::Batch out;
  for (const auto& input : batch.inputs)
    out.inputs.push_back(cpu(input));
  out.targets = cpu(batch.targets);
  out.sampleIndex = cpu(batch.sampleIndex);
  out.lanes = cpu(batch.lanes);
  return out;
}

inline Config seriesConfig(const std::string& path, std::vector<StreamSpec> streams) {
  Config c;
  c.data.path = path;
  c.data.layout = "series";
  c.data.streams = std::move(streams);
  c.data.canonicalShards = 4;
  c.train.globalBatch = 16;
  c.data.residency = Residency::kHost;
  return c;
}

}  // namespace mb::test
