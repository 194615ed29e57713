// Objects an HDF5 file stores outside itself: external links, external storage, virtual
// datasets (the declarations and the policy are in Hdf5.h, "objects stored outside the file").
#include <atomic>
#include <mutex>
#include <set>
#include <vector>

#include "common/Hdf5.h"
#include "common/Hdf5External.h"
#include "common/Log.h"
#include "common/Strings.h"

namespace mb::h5 {
namespace {

std::atomic<bool> gAllowExternal{false};

const char* kOptInHint =
    "a data file that reads other files must be opted into: set `data.allow_external: true` "
    "if you built it from external raw files on purpose (docs/data-format.md)";
const char* kCheckpointHint =
    "megabatch writes every tensor of a checkpoint inside the file; use a checkpoint a megabatch "
    "run wrote, or an older one from the same run directory";

// Logs "<file>: <what> (read because data.allow_external = true)" once per object.
void logOptIn(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mutex);
  if (!logged.insert(line).second) return;
  log::get("data").info("{} (read because data.allow_external = true)", line);
}

}  // namespace

void setAllowExternal(bool allow) {
  gAllowExternal = allow;
}
bool allowExternal() {
  return gAllowExternal;
}

std::string describeLink(hid_t loc, const std::string& name) {
  H5L_info_t info;
  if (H5Lget_info(loc, name.c_str(), &info, H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return "";
  }
  if (info.type == H5L_TYPE_HARD) return "";
  std::string value(info.u.val_size + 1, '\0');
  if (info.u.val_size > 0 &&
      H5Lget_val(loc, name.c_str(), value.data(), value.size(), H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    value.assign(1, '\0');
  }
  if (info.type == H5L_TYPE_SOFT) return "a soft link to " + std::string(value.c_str());
  if (info.type == H5L_TYPE_EXTERNAL) {
    const char* file = nullptr;
    const char* object = nullptr;
    unsigned flags = 0;
    if (H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &file, &object) >= 0 && file &&
        object)
      return std::string("an external link to ") + file + ":" + object;
    H5Eclear2(H5E_DEFAULT);
    return "an external link to another file";
  }
  return "a user-defined link (type " + std::to_string(static_cast<int>(info.type)) + ")";
}

namespace {

// Note [Soft links lead on]: a soft link stays inside the file, but the path it names may itself
// pass an external link (found by fuzz.checkpoint: /meta a soft link to /model, and /model an
// external link to a FIFO, so opening /meta blocked). Its target is checked the same way, a
// bounded number of links deep. Checkpoints hold no soft links at all (megabatch never writes
// one), so there any soft link is refused outright.
constexpr int kMaxSoftLinks = 8;

void checkLinksFrom(hid_t loc, const std::string& path, ExitCode code, int softLinks) {
  std::string prefix = str::startsWith(path, "/") ? "/" : "";
  for (const auto& part : str::split(path, '/')) {
    if (part.empty() || part == ".") continue;
    const std::string parent = prefix;
    prefix += (prefix.empty() || prefix == "/") ? part : "/" + part;
    htri_t present = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (present <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return;  // missing: the caller says so
    }
    std::string link = describeLink(loc, prefix);
    if (link.empty()) continue;
    const std::string line =
        fileNameOf(loc) + ": " + (prefix[0] == '/' ? "" : "/") + prefix + " is " + link;
    const bool soft = str::startsWith(link, "a soft link to ");
    if (soft && code != ExitCode::kCheckpoint) {
      if (softLinks >= kMaxSoftLinks)
        throw makeError(code, line + ", past " + std::to_string(kMaxSoftLinks) +
                                  " soft links in a row (a cycle?)");
      std::string target = link.substr(std::string("a soft link to ").size());
      if (!str::startsWith(target, "/")) target = parent.empty() ? target : parent + "/" + target;
      checkLinksFrom(loc, target, code, softLinks + 1);
      continue;
    }
    if (code == ExitCode::kData && allowExternal()) {
      logOptIn(line);
      continue;
    }
    if (code == ExitCode::kCheckpoint)
      throw makeError(code, line + ": not written by megabatch, or rewritten", kCheckpointHint);
    throw makeError(code, line + ", which megabatch does not follow by default", kOptInHint);
  }
}

}  // namespace

void checkLinks(hid_t loc, const std::string& path, ExitCode code) {
  checkLinksFrom(loc, path, code, 0);
}

std::string describeOutsideStorage(hid_t dataset) {
  Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  if (!plist.valid()) {
    H5Eclear2(H5E_DEFAULT);
    return "";
  }
  if (H5Pget_layout(plist.get()) == H5D_VIRTUAL) {
    std::size_t count = 0;
    H5Pget_virtual_count(plist.get(), &count);
    std::vector<std::string> sources;
    for (std::size_t i = 0; i < count && i < 4; ++i) {
      char file[1024] = {0}, name[1024] = {0};
      H5Pget_virtual_filename(plist.get(), i, file, sizeof(file));
      H5Pget_virtual_dsetname(plist.get(), i, name, sizeof(name));
      sources.push_back(std::string(file) + ":" + name);
    }
    H5Eclear2(H5E_DEFAULT);
    std::string text = "a virtual dataset (VDS) mapping " + std::to_string(count) + " source" +
                       (count == 1 ? "" : "s");
    if (!sources.empty())
      text += " (" + str::join(sources, ", ") + (count > 4 ? ", ..." : "") + ")";
    return text;
  }
  int files = H5Pget_external_count(plist.get());
  if (files <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return "";
  }
  std::vector<std::string> parts;
  for (int i = 0; i < files && i < 4; ++i) {
    char name[1024] = {0};
    off_t offset = 0;
    hsize_t size = 0;
    H5Pget_external(plist.get(), static_cast<unsigned>(i), sizeof(name), name, &offset, &size);
    std::string range = size == H5F_UNLIMITED
                            ? std::to_string(offset) + "..end"
                            : std::to_string(offset) + ".." +
                                  std::to_string(static_cast<hsize_t>(offset) + size - 1);
    parts.push_back(std::string(name) + " (bytes " + range + ")");
  }
  H5Eclear2(H5E_DEFAULT);
  return "external storage in " + str::join(parts, ", ") + (files > 4 ? ", ..." : "");
}

void checkStorage(hid_t dataset, const std::string& what, ExitCode code) {
  std::string outside = describeOutsideStorage(dataset);
  if (outside.empty()) return;
  std::string line = what + " is " + outside;
  if (code == ExitCode::kData && allowExternal()) {
    logOptIn(line);
    return;
  }
  if (code == ExitCode::kCheckpoint)
    throw makeError(code, line + ": not written by megabatch, or rewritten", kCheckpointHint);
  throw makeError(code, line + ", which megabatch does not read by default", kOptInHint);
}

}  // namespace mb::h5
