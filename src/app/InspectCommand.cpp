// megabatch inspect: not implemented yet (data issue #3 (data files) and trainer issue #5 (checkpoints)). Says so and exits 1.
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

int runInspect(const ParsedArgs&, dist::Runtime&) {
  throw RuntimeError("megabatch inspect is not implemented yet (data issue #3 (data files) and trainer issue #5 (checkpoints))");
}

}  // namespace mb::app
