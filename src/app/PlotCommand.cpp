// megabatch plot RUN_DIR: loss, learning rate, and throughput curves from metrics.jsonl,
// rendered to a PNG by matplotlib (Debian's python3-matplotlib).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "app/Cli.h"
#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "dist/Runtime.h"

namespace mb::app {
namespace {
namespace fs = std::filesystem;

// Reads metrics.jsonl (argv[1]) and writes the PNG (argv[2]).
const char* const kPlotScript = R"PY(
import json, math, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("matplotlib is not installed: apt-get install python3-matplotlib\n")
    sys.exit(3)
metrics, out, title = sys.argv[1], sys.argv[2], sys.argv[3]
train, evals = [], []
with open(metrics) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        (train if r.get("event") == "train" else evals).append(r)
if not train:
    sys.stderr.write("%s has no training records yet\n" % metrics)
    sys.exit(4)
fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
steps = [r["step"] for r in train]
axes[0].plot(steps, [r["loss"] for r in train], label="train loss", lw=1.2)
for split in sorted({r.get("split", "val") for r in evals}):
    pts = [(r["step"], r["loss"]) for r in evals if r.get("split", "val") == split and math.isfinite(r["loss"])]
    if pts:
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=split + " loss", lw=1.2)
axes[0].set_ylabel("loss")
if all(r["loss"] > 0 for r in train):
    axes[0].set_yscale("log")
axes[0].legend()
axes[0].grid(alpha=0.3)
axes[1].plot(steps, [r["lr"] for r in train], color="tab:green")
axes[1].set_ylabel("learning rate")
axes[1].grid(alpha=0.3)
key = "tokens_per_s" if "tokens_per_s" in train[-1] else "samples_per_s"
axes[2].plot(steps, [r.get(key, float("nan")) for r in train], color="tab:purple")
axes[2].set_ylabel(key.replace("_per_s", "/s"))
axes[2].set_xlabel("step")
axes[2].grid(alpha=0.3)
fig.suptitle(title)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(out)
)PY";

std::string pythonInterpreter() {
  if (auto chosen = env::get("MEGABATCH_PYTHON")) return *chosen;
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

int runProcess(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid < 0) throw RuntimeError("plot: cannot start " + args[0]);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& arg : args)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int runPlot(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.positionals.size() != 1)
    throw ConfigError("megabatch plot needs one RUN_DIR",
                      "usage: megabatch plot RUN_DIR [--out FILE.png]");
  if (runtime.rank() != 0) return 0;
  fs::path runDir = args.positionals[0];
  fs::path metrics = runDir / "metrics.jsonl";
  if (!fs::exists(metrics))
    throw ConfigError(metrics.string() + " does not exist", "pass the run.dir of a training run");
  std::string out = args.get("out", (runDir / "curves.png").string());
  int status = runProcess({pythonInterpreter(), "-c", kPlotScript, metrics.string(), out,
                           "megabatch run " + fs::absolute(runDir).filename().string()});
  if (status == 3)
    throw RuntimeError("megabatch plot needs matplotlib",
                       "apt-get install python3-matplotlib (scripts/setup.sh does)");
  if (status != 0)
    throw RuntimeError("megabatch plot: rendering " + out + " failed (exit " +
                       std::to_string(status) + ")");
  log::get("app").info("wrote {}", out);
  return 0;
}

}  // namespace mb::app
