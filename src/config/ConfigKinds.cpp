// The kinds handed down to config (Note [Kinds handed down] in ConfigKinds.h).
#include "config/ConfigKinds.h"

#include <stdexcept>
#include <utility>

#include "common/Registry.h"

namespace mb {
namespace {

struct Installed {
  bool present = false;
  ConfigKinds kinds;
};

Installed& installed() {
  static Installed instance;
  return instance;
}

}  // namespace

void installConfigKinds(ConfigKinds kinds) {
  Installed& slot = installed();
  slot.kinds = std::move(kinds);
  slot.present = true;
}

const ConfigKinds& configKinds() {
  const Installed& slot = installed();
  if (!slot.present)
    throw std::logic_error(
        "config read before the data layouts and models were handed down: call "
        "model::handKindsToConfig() at the start of the program (Note [Kinds handed down])");
  return slot.kinds;
}

std::vector<std::string> layoutChoices() {
  return registry::names(configKinds().layouts);
}

std::vector<std::string> modelChoices() {
  return registry::names(configKinds().models);
}

const LayoutRules* findLayoutRules(const std::string& name) {
  return registry::find(configKinds().layouts, name);
}

const ModelRules* findModelRules(const std::string& name) {
  return registry::find(configKinds().models, name);
}

}  // namespace mb
