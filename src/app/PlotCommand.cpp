// megabatch plot RUN_DIR: loss, learning rate, and throughput curves from metrics.jsonl (with
// out-of-memory redos and restarts marked), rendered to a PNG by matplotlib (Debian's
// python3-matplotlib); megabatch plot RUN_DIR RUN_DIR ... (or a folder of runs): the runs in one;
// megabatch plot PREDICTIONS.h5: a model's predictions against the truth (PredictionPlot.cpp).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "app/Cli.h"
#include "app/PredictionPlot.h"
#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "dist/Runtime.h"

namespace mb::app {
namespace {
namespace fs = std::filesystem;

// Reads metrics.jsonl (argv[1]) and writes the PNG (argv[2]). Every reader of metrics.jsonl
// skips record kinds it does not know and a torn last line (DESIGN.md, "Run directory"): the
// file may belong to a run that is still training, or one killed mid-write, and new kinds of
// event are added over time. Each panel draws the fields it finds and leaves out the rest.
// What both scripts begin with: matplotlib (exit 3 without it), and what a record is.
const char* const kPythonPrelude = R"PY(
import json, math, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("matplotlib is not installed: apt-get install python3-matplotlib\n")
    sys.exit(3)

def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

def kind_of(record):
    kind = record.get("event")
    if kind is None:  # files written before every record had an event kind
        kind = "train" if record.get("split") == "train" else "eval"
    return kind
)PY";

const char* const kPlotScript = R"PY(
metrics, out, title = sys.argv[1], sys.argv[2], sys.argv[3]

kinds = {}
torn = []
with open(metrics, errors="replace") as f:
    lines = f.read().split("\n")
for line_number, line in enumerate(lines, 1):
    line = line.strip()
    if not line:
        continue
    try:
        record = json.loads(line)
    except ValueError:
        torn.append(line_number)
        continue
    if isinstance(record, dict) and number(record.get("step")):
        kinds.setdefault(kind_of(record), []).append(record)
train = kinds.get("train", [])
evals = kinds.get("eval", [])
plans = kinds.get("memory_plan", [])
redos = kinds.get("oom_redo", [])
restarts = kinds.get("restart", [])
known = {"train", "eval", "memory_plan", "oom_redo", "restart", "checkpoint", "baseline"}
for line_number in torn:
    sys.stderr.write("%s:%d is not a whole JSON record (a run killed mid-write?): skipped\n"
                     % (metrics, line_number))
skipped = sorted(k for k in kinds if k not in known)
if skipped:
    print("records of kinds not drawn: " + ", ".join("%s (%d)" % (k, len(kinds[k])) for k in skipped))
if not train:
    sys.stderr.write("%s has no training records yet: the first comes at step run.log_every "
                     "(or the first epoch end); plot again then\n" % metrics)
    sys.exit(4)

def series(records, key, scale=1.0):
    points = [(r["step"], r[key] * scale) for r in records if number(r.get(key))]
    return [p[0] for p in points], [p[1] for p in points]

def mark_redos(axis):
    for r in redos:
        axis.axvline(r["step"], color="tab:red", ls=":", lw=1)

def mark_restarts(axis, label):
    # A restart resumes at its checkpoint's step; the label gives the rank counts it changed.
    for r in restarts:
        axis.axvline(r["step"], color="tab:orange", ls="--", lw=1)
        if label:
            text = "restart %s" % r.get("restart", "")
            if number(r.get("ranks_before")) and number(r.get("ranks_after")):
                text += ": %d to %d ranks" % (r["ranks_before"], r["ranks_after"])
            axis.annotate(text, xy=(r["step"], 0.97), xycoords=("data", "axes fraction"), rotation=90,
                          va="top", ha="right", fontsize=7, color="tab:orange")

panels = ["loss", "lr", "speed", "time", "memory"]
fig, axes = plt.subplots(len(panels), 1, figsize=(9, 14), sharex=True)
ax = dict(zip(panels, axes))

steps, losses = series(train, "loss")
ax["loss"].plot(steps, losses, label="train loss", lw=1.2)
for split in sorted({r.get("split", "val") for r in evals}):
    x, y = series([r for r in evals if r.get("split", "val") == split], "loss")
    if x:
        ax["loss"].plot(x, y, "o-", label=split + " loss", lw=1.2)
# The baselines' MSE on the same samples (docs/evaluation.md): what the val loss must get under.
for record in kinds.get("baseline", [])[:1]:
    for name, words, style in (("zero", "zero forecast", ":"), ("mean", "train mean", "-."),
                               ("last", "last known target", "--")):
        if number(record.get(name + "_mse")):
            ax["loss"].axhline(record[name + "_mse"], ls=style, lw=1, color="grey",
                               label="%s MSE of the %s" % (record.get("split", "val"), words))
if losses and all(v > 0 for v in losses):
    ax["loss"].set_yscale("log")
ax["loss"].set_ylabel("loss")

x, y = series(train, "lr")
ax["lr"].plot(x, y, color="tab:green")
ax["lr"].set_ylabel("learning rate")

key = "tokens_per_s" if any("tokens_per_s" in r for r in train) else "samples_per_s"
x, y = series(train, key)
ax["speed"].plot(x, y, color="tab:purple")
ax["speed"].set_ylabel(key.replace("_per_s", "/s"))

parts = [("data_time_s", "data"), ("fwd_bwd_time_s", "fwd-bwd"), ("comm_time_s", "comm"),
         ("optimizer_time_s", "opt"), ("other_time_s", "other")]
rows = [r for r in train if all(number(r.get(k)) for k, _ in parts[:4])]
if rows:
    x = [r["step"] for r in rows]
    stacks = [[1000 * r[k] if number(r.get(k)) else 0.0 for r in rows] for k, _ in parts]
    ax["time"].stackplot(x, *stacks, labels=[name for _, name in parts], alpha=0.8)
    ax["time"].legend(loc="upper right", fontsize=8, ncol=5)
else:
    x, y = series(train, "step_time_s", 1000)
    ax["time"].plot(x, y, color="tab:brown")
ax["time"].set_ylabel("step time (ms)")

mib = 1.0 / (1 << 20)
highest = 0.0
for field, label in [("mem_mb", "rss"), ("mem_peak_mb", "rss peak"), ("gpu_mem_peak_mb", "gpu peak")]:
    x, y = series(train, field)
    if x:
        ax["memory"].plot(x, y, label=label, lw=1.2)
        highest = max(highest, max(y))
memory_label = "memory (MiB)"
for plan in plans[-1:]:  # the plan of the newest (re)start
    # The plan counts what the run adds to the process it starts in; rss_at_start_bytes is that
    # process's own floor, so their sum is what the rss line is set against.
    floor = plan.get("rss_at_start_bytes", 0) if number(plan.get("rss_at_start_bytes")) else 0
    suffix = " + start rss" if floor else ""
    for field, label, style in [("total_bytes", "plan", "--"), ("budget_bytes", "budget", ":")]:
        if not (number(plan.get(field)) and plan[field] > 0):
            continue
        level = (plan[field] + floor) * mib
        if field == "budget_bytes" and highest > 0 and level > 3 * highest:
            # Far above the run (the default budget is 90% of the host): named, not drawn.
            memory_label = "memory (MiB; budget %.0f)" % (plan[field] * mib)
            continue
        ax["memory"].axhline(level, color="gray", ls=style, lw=1, label=label + suffix)
ax["memory"].set_ylabel(memory_label)
if ax["memory"].get_legend_handles_labels()[0]:
    ax["memory"].legend(loc="lower right", fontsize=8)

for name, axis in ax.items():
    mark_redos(axis)
    mark_restarts(axis, name == "loss")
    axis.grid(alpha=0.3)
if redos:
    ax["loss"].plot([], [], color="tab:red", ls=":", label="out-of-memory redo")
if restarts:
    ax["loss"].plot([], [], color="tab:orange", ls="--", label="restart")
ax["loss"].legend()
axes[-1].set_xlabel("step")
fig.suptitle(title)
fig.tight_layout()
fig.savefig(out, dpi=90)
print(out)
)PY";

// Several runs in one picture (megabatch plot RUN_DIR RUN_DIR ..., or a folder of runs): argv
// is OUT TITLE NAME METRICS NAME METRICS ...; one colour per run, named in the legend. A run's
// resumptions append to its one metrics.jsonl, so each run is one line; where a step repeats (a
// resumed run trained it again), the last record counts.
const char* const kOverlayScript = R"PY(
out, title = sys.argv[1], sys.argv[2]
runs = list(zip(sys.argv[3::2], sys.argv[4::2]))

def read(path):
    records = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line: a run killed mid-write, or one still training
            if isinstance(record, dict) and number(record.get("step")):
                records.append(record)
    return records

def last_per_step(records, key):
    by_step = {}
    for r in records:
        if number(r.get(key)):
            by_step[r["step"]] = r[key]
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]

fig, axes = plt.subplots(3, 1, figsize=(9, 11), sharex=True)
loss_ax, lr_ax, speed_ax = axes
positive = True
drawn = 0
for i, (name, path) in enumerate(runs):
    records = read(path)
    colour = "C%d" % (i % 10)
    train = [r for r in records if kind_of(r) == "train"]
    evals = [r for r in records if kind_of(r) == "eval" and r.get("split", "val") == "val"]
    if not train:
        print("%s: no training records yet: left out" % name)
        continue
    drawn += 1
    x, y = last_per_step(train, "loss")
    positive = positive and all(v > 0 for v in y)
    loss_ax.plot(x, y, color=colour, lw=1.2, label=name)
    x, y = last_per_step(evals, "loss")
    if x:
        loss_ax.plot(x, y, "o--", color=colour, lw=1, ms=3)
        positive = positive and all(v > 0 for v in y)
    x, y = last_per_step(train, "lr")
    lr_ax.plot(x, y, color=colour, lw=1.2)
    key = "tokens_per_s" if any("tokens_per_s" in r for r in train) else "samples_per_s"
    x, y = last_per_step(train, key)
    speed_ax.plot(x, y, color=colour, lw=1)
    speed_ax.set_ylabel(key.replace("_per_s", "/s"))
    for r in records:
        if r.get("event") == "restart":
            for axis in axes:
                axis.axvline(r["step"], color=colour, ls=":", lw=1)
if drawn == 0:
    sys.stderr.write("none of the runs has training records yet\n")
    sys.exit(4)
if positive:
    loss_ax.set_yscale("log")
loss_ax.set_ylabel("loss (solid: train, dashed: val)")
loss_ax.legend(fontsize=8, ncol=2 if drawn > 6 else 1)
lr_ax.set_ylabel("learning rate")
axes[-1].set_xlabel("step")
for axis in axes:
    axis.grid(alpha=0.3)
fig.suptitle(title + " (dotted: a restart)")
fig.tight_layout()
fig.savefig(out, dpi=90)
print(out)
)PY";

}  // namespace

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

namespace {

// The runs a folder holds: its sub-folders with a metrics.jsonl (a sweep's --dir, runs/), sorted.
std::vector<fs::path> runsIn(const fs::path& folder) {
  std::vector<fs::path> runs;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error))
    if (entry.is_directory() && fs::exists(entry.path() / "metrics.jsonl"))
      runs.push_back(entry.path());
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::string runName(const fs::path& runDir) {
  return fs::absolute(runDir).lexically_normal().filename().string();
}

}  // namespace

int runPlot(const ParsedArgs& args, dist::Runtime& runtime) {
  const std::string usage =
      "usage: megabatch plot RUN_DIR [RUN_DIR ...] [--out FILE.png], or megabatch plot "
      "PREDICTIONS.h5 [--out FILE.png]";
  if (args.positionals.empty()) throw ConfigError("megabatch plot needs a RUN_DIR", usage);
  if (runtime.rank() != 0) return 0;
  const fs::path first = args.positionals[0];
  // A file, not a run directory: what megabatch predict wrote, drawn next to it by default.
  if (args.positionals.size() == 1 && (fs::is_regular_file(first) || first.extension() == ".h5")) {
    plotPredictions(first.string(),
                    args.get("out", fs::path(first).replace_extension(".png").string()));
    return 0;
  }
  // One run: its curves. Several, or a folder of runs (no metrics.jsonl of its own): one
  // picture of them all.
  std::vector<fs::path> runs;
  std::string out;
  if (args.positionals.size() == 1 && !fs::exists(first / "metrics.jsonl")) {
    runs = runsIn(first);
    if (runs.empty())
      throw ConfigError(
          (first / "metrics.jsonl").string() + " does not exist, and " + first.string() +
              " holds no run directory with one",
          "pass the run.dir of a training run, several, or the folder a sweep wrote its runs to");
    out = args.get("out", (first / "runs.png").string());
  } else {
    for (const auto& positional : args.positionals) {
      const fs::path metrics = fs::path(positional) / "metrics.jsonl";
      if (!fs::exists(metrics))
        throw ConfigError(metrics.string() + " does not exist",
                          "pass the run.dir of a training run; " + usage);
      runs.emplace_back(positional);
    }
    out = args.get("out", runs.size() == 1 ? (first / "curves.png").string() : "runs.png");
  }
  std::vector<std::string> command = {pythonInterpreter(), "-c"};
  if (runs.size() == 1 && args.positionals.size() == 1 && fs::exists(first / "metrics.jsonl")) {
    command.insert(command.end(),
                   {std::string(kPythonPrelude) + kPlotScript, (first / "metrics.jsonl").string(),
                    out, "megabatch run " + runName(first)});
  } else {
    command.insert(command.end(), {std::string(kPythonPrelude) + kOverlayScript, out,
                                   fmt::format("megabatch: {} runs", runs.size())});
    for (const auto& run : runs)
      command.insert(command.end(), {runName(run), (run / "metrics.jsonl").string()});
  }
  const int status = runProcess(command);
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
