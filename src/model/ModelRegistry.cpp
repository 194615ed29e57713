// The one list of models (model.kind); see ModelRegistry.h for adding one.
#include "model/ModelRegistry.h"

#include "common/Error.h"
#include "common/Registry.h"
#include "common/Strings.h"
#include "data/LayoutRegistry.h"
#include "model/kinds/Gat.h"
#include "model/kinds/Gnn.h"
#include "model/kinds/Gpt.h"
#include "model/kinds/Lstm.h"
#include "model/kinds/Mlp.h"
#include "model/kinds/TorchScriptModel.h"

namespace mb::model {

const std::vector<ModelKind>& modelKinds() {
  static const std::vector<ModelKind> kinds{
      lstmModelKind(), gptModelKind(), mlpModelKind(),
      gnnModelKind(),  gatModelKind(), torchScriptModelKind(),
  };
  return kinds;
}

const ModelKind* findModelKind(const std::string& name) {
  return registry::find(modelKinds(), name);
}

std::vector<std::string> modelKindNames() {
  return registry::names(modelKinds());
}

void handKindsToConfig() {
  ConfigKinds kinds;
  // Each kind is copied as the part config reads (its base class).
  for (const data::LayoutKind& layout : data::layoutKinds())
    kinds.layouts.push_back(layout);
  for (const ModelKind& model : modelKinds())
    kinds.models.push_back(model);
  installConfigKinds(std::move(kinds));
}

const ModelKind& modelKind(const std::string& name) {
  if (const ModelKind* kind = findModelKind(name)) return *kind;
  throw ConfigError("model.kind = '" + name + "' is not a model megabatch knows",
                    "use one of " + str::join(modelKindNames(), ", ") + " (docs/models.md)");
}

}  // namespace mb::model
