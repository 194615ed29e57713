// megabatch predict: not implemented yet (models issue #6). Says so and exits 1.
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

int runPredict(const ParsedArgs&, dist::Runtime&) {
  throw RuntimeError("megabatch predict is not implemented yet (models issue #6)");
}

}  // namespace mb::app
