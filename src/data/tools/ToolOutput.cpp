#include "data/tools/ToolOutput.h"

#include <algorithm>
#include <cstdint>

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::data {

h5::WriteOptions writeOptions(const WriteSettings& write) {
  if (write.compression != "none" && write.compression != "gzip")
    throw ConfigError("--compression " + write.compression + ": expected none or gzip");
  if (write.chunkRows < 0) throw ConfigError("--chunk-rows must be >= 0");
  h5::WriteOptions options;
  options.gzipLevel = write.compression == "gzip" ? 4 : 0;
  options.chunkRows = write.chunkRows;
  return options;
}

at::ScalarType valueType(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "float64") return at::kDouble;
  throw ConfigError("--dtype " + dtype + ": expected float16, float32, or float64");
}

at::Tensor textRows(const std::vector<std::string>& rows) {
  std::size_t width = 1;
  for (const auto& r : rows)
    width = std::max(width, r.size());
  at::Tensor out = at::zeros(
      {static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(width)}, at::kByte);
  auto* data = out.data_ptr<std::uint8_t>();
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::copy(rows[i].begin(), rows[i].end(), data + i * width);
  return out;
}

}  // namespace mb::data
