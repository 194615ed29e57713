// Every test program reads configs as megabatch does: the data layouts and the models are handed
// down to config before main() runs (Note [Kinds handed down] in src/config/ConfigKinds.h).
#include "model/ModelRegistry.h"

namespace {

struct HandKindsDown {
  HandKindsDown() { mb::model::handKindsToConfig(); }
};
const HandKindsDown kHandKindsDown;

}  // namespace
