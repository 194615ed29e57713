// The one list of data layouts (Note [Adding a layout] in Layout.h).
#include "data/LayoutRegistry.h"

#include "common/Error.h"
#include "common/Registry.h"
#include "common/Strings.h"
#include "data/Layout.h"
#include "data/layouts/GraphsLayout.h"
#include "data/layouts/PanelLayout.h"
#include "data/layouts/SamplesLayout.h"
#include "data/layouts/SeriesLayout.h"
#include "data/layouts/TokensLayout.h"

namespace mb::data {

const std::vector<LayoutKind>& layoutKinds() {
  static const std::vector<LayoutKind> kinds{
      samplesLayoutKind(), seriesLayoutKind(), tokensLayoutKind(),
      graphsLayoutKind(),  panelLayoutKind(),
  };
  return kinds;
}

const LayoutKind* findLayoutKind(const std::string& name) {
  return registry::find(layoutKinds(), name);
}

std::vector<std::string> layoutNames() {
  return registry::names(layoutKinds());
}

const LayoutKind& layoutKind(const std::string& name) {
  if (const LayoutKind* kind = findLayoutKind(name)) return *kind;
  throw ConfigError("data.layout = '" + name + "' is not a layout megabatch knows",
                    "use one of " + str::join(layoutNames(), ", ") + " (docs/data-format.md)");
}

std::shared_ptr<const Layout> openLayout(hid_t file, const std::string& path,
                                         const Config& config) {
  std::shared_ptr<const Layout> layout = layoutKind(config.data.layout).open(file, path, config);
  if (layout->schema().numSamples < 1)
    throw DataError(path + ": the file has no samples (N = 0)", schema::kFormatHint);
  return layout;
}

}  // namespace mb::data
