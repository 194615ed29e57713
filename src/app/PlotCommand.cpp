// megabatch plot: not implemented yet (trainer issue #5). Says so and exits 1.
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

int runPlot(const ParsedArgs&, dist::Runtime&) {
  throw RuntimeError("megabatch plot is not implemented yet (trainer issue #5)");
}

}  // namespace mb::app
