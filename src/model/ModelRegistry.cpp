// The one list of models (model.kind); see ModelRegistry.h for adding one.
#include "model/ModelRegistry.h"

#include "common/Error.h"
#include "common/Strings.h"
#include "model/Gat.h"
#include "model/Gpt.h"
#include "model/Lstm.h"
#include "model/Mlp.h"

namespace mb::model {

const std::vector<ModelKind>& modelKinds() {
  static const std::vector<ModelKind> kinds{
      lstmModelKind(),
      gptModelKind(),
      mlpModelKind(),
      gatModelKind(),
  };
  return kinds;
}

const ModelKind* findModelKind(const std::string& name) {
  for (const auto& kind : modelKinds()) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

std::vector<std::string> modelKindNames() {
  std::vector<std::string> names;
  for (const auto& kind : modelKinds())
    names.push_back(kind.name);
  return names;
}

const ModelKind& modelKind(const std::string& name) {
  if (const ModelKind* kind = findModelKind(name)) return *kind;
  throw ConfigError("model.kind = '" + name + "' is not a model megabatch knows",
                    "use one of " + str::join(modelKindNames(), ", ") + " (docs/models.md)");
}

}  // namespace mb::model
