// Commands whose issue has not landed yet say so and exit 1 (see the issue tracker).
#include "app/Cli.h"
#include "common/Error.h"

namespace mb::app {

static int notYet(const std::string& command, const std::string& issue) {
  throw RuntimeError("megabatch " + command + " is not implemented yet (" + issue + ")");
}

int runEval(const ParsedArgs&, dist::Runtime&) { return notYet("eval", "models issue #6"); }
int runPredict(const ParsedArgs&, dist::Runtime&) { return notYet("predict", "models issue #6"); }
int runSample(const ParsedArgs&, dist::Runtime&) { return notYet("sample", "models issue #6"); }
int runData(const ParsedArgs&, dist::Runtime&) { return notYet("data", "data issue #3"); }
int runInspect(const ParsedArgs&, dist::Runtime&) { return notYet("inspect", "data issue #3"); }
int runPlot(const ParsedArgs&, dist::Runtime&) { return notYet("plot", "trainer issue #5"); }

}  // namespace mb::app
