// megabatch data: not implemented yet (data issue #3). Says so and exits 1.
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

int runData(const ParsedArgs&, dist::Runtime&) {
  throw RuntimeError("megabatch data is not implemented yet (data issue #3)");
}

}  // namespace mb::app
