#pragma once
// The data layouts by name (Note [Adding a layout] in Layout.h). LayoutRegistry.cpp lists them
// in one place; nothing else names a layout.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/Hdf5.h"
#include "config/Config.h"
#include "config/ConfigKinds.h"

namespace mb::data {

class Layout;

// One dataset of a file, for `megabatch inspect`.
struct ListedDataset {
  std::string path;  // no leading '/'
  h5::DatasetInfo info;
};

// One value of data.layout. Its name and config rules are the LayoutRules that config sees
// (Note [Kinds handed down] in config/ConfigKinds.h).
struct LayoutKind : LayoutRules {
  std::string summary;  // one line: what a sample is and which datasets hold it
  // The object that marks this layout in a file with default names ("/features").
  std::string marker;
  // Pass 1 of Note [Schema validation]: the file `path`, open as `file`, read as this
  // layout. Throws DataError (exit 3) naming the dataset and the fix.
  std::function<std::shared_ptr<const Layout>(hid_t file, const std::string& path,
                                              const Config& config)>
      open;
  // `megabatch inspect` (no config there, so default dataset names): the lines that describe
  // the file as this layout ("layout: ...\nsamples: ..."), or nullopt when it is not one.
  std::function<std::optional<std::string>(hid_t file, const std::vector<ListedDataset>& datasets)>
      inspect;
};

// The layouts in the order --help-config lists them.
const std::vector<LayoutKind>& layoutKinds();
// nullptr when `name` is no layout.
const LayoutKind* findLayoutKind(const std::string& name);
// The layout `name`; throws ConfigError (exit 2) naming the known ones.
const LayoutKind& layoutKind(const std::string& name);
std::vector<std::string> layoutNames();
// Pass 1 of Note [Schema validation] for config.data.layout.
std::shared_ptr<const Layout> openLayout(hid_t file, const std::string& path, const Config& config);

}  // namespace mb::data
