// megabatch sample: not implemented yet (models issue #6). Says so and exits 1.
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

int runSample(const ParsedArgs&, dist::Runtime&) {
  throw RuntimeError("megabatch sample is not implemented yet (models issue #6)");
}

}  // namespace mb::app
