// megabatch inspect for data files: layout, datasets, time range, samples, attributes.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <set>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "data/LayoutRegistry.h"
#include "data/Schema.h"
#include "data/tools/Tools.h"

namespace mb::data {
namespace {

using Entry = ListedDataset;

// Every dataset below `group`. A group reached twice (hard-linked elsewhere, or into itself)
// is listed once: `seen` holds h5::objectKey of the groups walked.
void collect(hid_t file, const std::string& group, std::vector<Entry>& out,
             std::set<std::string>& seen) {
  std::string where = group.empty() ? "/" : group;
  if (!seen.insert(h5::objectKey(file, where, ExitCode::kData)).second) return;
  h5::Handle handle = h5::openGroup(file, where, ExitCode::kData);
  for (const auto& name : h5::listGroup(handle.get())) {
    std::string path = group.empty() ? name : group + "/" + name;
    if (h5::isGroup(file, path)) {
      collect(file, path, out, seen);
    } else if (h5::isDataset(file, path)) {
      h5::Handle dataset = h5::openDataset(file, path, ExitCode::kData);
      out.push_back({path, h5::describe(dataset.get())});
    }
  }
}

std::string storage(const h5::DatasetInfo& info) {
  if (info.chunkDims.empty()) return "contiguous";
  std::string text = "chunks " + schema::shapeText(info.chunkDims);
  if (info.gzip) text += " gzip";
  if (info.fletcher32) text += " fletcher32";
  return text;
}

// "2024-01-01T00:01:00Z" for plausible Unix seconds, else the raw number.
std::string timeText(std::int64_t value) {
  if (value < 100000000 || value > 10000000000LL) return std::to_string(value);
  std::time_t t = static_cast<std::time_t>(value);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

std::int64_t valueAt(hid_t file, const std::string& path, std::int64_t row) {
  h5::Handle dataset = h5::openDataset(file, path, ExitCode::kData);
  at::Tensor v = h5::readRows(dataset.get(), row, row + 1, at::kLong, ExitCode::kData, path);
  return v.data_ptr<std::int64_t>()[0];
}

herr_t collectAttribute(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

std::string attributeText(hid_t object, const std::string& name) {
  h5::Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  h5::Handle type(H5Aget_type(attribute.get()), H5Tclose);
  h5::Handle space(H5Aget_space(attribute.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return "(array)";
  switch (H5Tget_class(type.get())) {
    case H5T_STRING:
      return h5::readStringAttribute(object, name, ExitCode::kData);
    case H5T_INTEGER:
      return std::to_string(h5::readIntAttribute(object, name, ExitCode::kData));
    case H5T_FLOAT: {
      std::ostringstream text;
      text << h5::readDoubleAttribute(object, name, ExitCode::kData);
      return text.str();
    }
    default:
      return "(" + std::to_string(H5Tget_size(type.get())) + "-byte value)";
  }
}

std::vector<std::string> attributeLines(hid_t object, const std::string& prefix) {
  std::vector<std::string> names;
  hsize_t index = 0;
  H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, collectAttribute, &names);
  std::vector<std::string> lines;
  for (const auto& name : names)
    lines.push_back("  " + prefix + name + " = " + attributeText(object, name));
  return lines;
}

// The first layout that recognises the file (by its default dataset names), then the time
// range when /timestamps is there.
std::string layoutSummary(hid_t file, const std::vector<Entry>& entries) {
  std::string text;
  std::vector<std::string> markers;
  for (const auto& kind : layoutKinds()) {
    markers.push_back(kind.marker);
    if (!kind.inspect) continue;
    if (auto summary = kind.inspect(file, entries)) {
      text = *summary;
      break;
    }
  }
  if (text.empty())
    text = "layout: none recognised (no " + str::join(markers, ", ") +
           "; names may be remapped with data.names.* in a config)";
  for (const auto& e : entries) {
    if (e.path != "timestamps") continue;
    if (e.info.rows() > 0 && e.info.typeClass == H5T_INTEGER)
      text += "\ntime range: " + timeText(valueAt(file, "timestamps", 0)) + " .. " +
              timeText(valueAt(file, "timestamps", e.info.rows() - 1)) + " (/timestamps)";
  }
  return text;
}

}  // namespace

bool looksLikeCheckpoint(const std::string& path) {
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  return h5::isGroup(file.get(), "meta");
}

std::string describeDataFile(const std::string& path) {
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  std::vector<Entry> entries;
  std::set<std::string> seen;
  collect(file.get(), "", entries, seen);
  struct stat st {};
  ::stat(path.c_str(), &st);
  std::ostringstream text;
  text << path << " (" << str::humanBytes(static_cast<double>(st.st_size)) << ", HDF5)\n";
  text << layoutSummary(file.get(), entries) << "\n";
  text << "datasets:\n";
  std::size_t width = 8;
  for (const auto& e : entries)
    width = std::max(width, e.path.size() + 1);
  for (const auto& e : entries) {
    char line[512];
    std::snprintf(line, sizeof(line), "  %-*s %-20s %-9s %s\n", static_cast<int>(width),
                  ("/" + e.path).c_str(), schema::shapeText(e.info.dims).c_str(),
                  e.info.typeName().c_str(), storage(e.info).c_str());
    text << line;
  }
  std::vector<std::string> attributes = attributeLines(file.get(), "");
  for (const auto& e : entries) {
    h5::Handle dataset = h5::openDataset(file.get(), e.path, ExitCode::kData);
    for (auto& line : attributeLines(dataset.get(), "/" + e.path + ": "))
      attributes.push_back(line);
  }
  if (!attributes.empty()) text << "attributes:\n" << str::join(attributes, "\n") << "\n";
  return text.str();
}

}  // namespace mb::data
