"""How close the memory plan comes to what a run really holds (issue 36 item 1; docs/operations.md
"Memory plan"). For each model, one rank trains a few steps and metrics.jsonl gives:
  - planned: the memory_plan event's total_bytes (parameters, gradients, optimizer state,
    resident data, and the activations and workspace a trial step measured);
  - measured: the process's peak RSS over the steps (mem_peak_mb of the last train record: VmHWM,
    reset after the plan's trial) minus its RSS when Trainer::run started, before the data, the
    model and the optimizer existed (the memory_plan event's rss_at_start_bytes).
The ratio measured / planned is what the plan misses (above 1) or overstates (below 1): glibc's
heap, OpenMP's and oneDNN's buffers, HDF5's, and the gradient buckets' copies are in the RSS and
not in the plan.

    /usr/bin/python3 bench/memory_plan_peaks.py [--bin build/megabatch] [--steps 10]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

MIB = 1 << 20

# (name, config, data tool arguments, overrides): the configs as the repository ships them, on
# the CPU line where a config has one.
MODELS = [
    ("demo LSTM", "demo.yaml",
     ["synth-series", "--rows", "100000", "--features", "4", "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"],
     []),
    ("lstm-multitf (CPU line)", "lstm-multitf.yaml",
     ["synth-series", "--rows", "400000", "--features", "128", "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"],
     ["train.global_batch=64", "train.eval_batches=20"]),
    ("arith-gpt", "arith-gpt.yaml",
     ["arith", "--digits", "2", "--ops", "+-", "--problems", "200000", "--heldout", "1000"], []),
    ("graphs-gin", "graphs-gin.yaml",
     ["synth-graphs", "--graphs", "3000", "--min-nodes", "10", "--max-nodes", "30"], []),
]


def run(cmd, timeout=1800):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=timeout)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-3000:]))
    return r.stdout


def measure(binary, name, config, tool, overrides, steps, work):
    data = os.path.join(work, config.replace(".yaml", ".h5"))
    if not os.path.exists(data):
        run([binary, "data"] + tool[:1] + ["--out", data] + tool[1:])
    run_dir = os.path.join(work, "run-" + config.replace(".yaml", ""))
    run([binary, "train", "--config", os.path.join(benchlib.ROOT, "configs", config), "data.path=" + data,
         "run.dir=" + run_dir, "run.resume=never", "train.max_steps=%d" % steps, "train.eval_every=0",
         "run.checkpoint_every=100000", "run.log_every=1", "run.progress=lines", "train.threads=1"] + overrides)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    plan = [r for r in records if r["event"] == "memory_plan"][0]
    steps_seen = [r for r in records if r["event"] == "train"]
    peak = max(r["mem_peak_mb"] for r in steps_seen) * MIB
    measured = peak - plan["rss_at_start_bytes"]
    row = {"model": name, "config": config, "overrides": overrides, "steps": len(steps_seen),
           "micro_batch": plan["micro_batch"], "planned_bytes": plan["total_bytes"],
           "measured_bytes": measured, "ratio_measured_to_planned": measured / plan["total_bytes"],
           "plan": {k: v for k, v in plan.items() if k.endswith("_bytes")},
           # Held before step 1 (data, model, optimizer, and what loading left in the heap), and
           # what the steps added on top, to set against the trial's activations + workspace.
           "held_before_step_1_bytes": plan["rss_at_plan_bytes"] - plan["rss_at_start_bytes"],
           "steps_growth_bytes": peak - plan["rss_at_plan_bytes"],
           "planned_activations_workspace_bytes": plan["activations_bytes"] + plan["workspace_bytes"],
           "peak_rss_bytes": peak}
    print("%-26s micro batch %4d  planned %8.1f MiB  measured %8.1f MiB  measured/planned %.2f  "
          "| fixed planned %7.1f MiB, held before step 1 %7.1f MiB | activations+workspace planned %7.1f MiB, "
          "steps grew %7.1f MiB"
          % (name, row["micro_batch"], row["planned_bytes"] / MIB, measured / MIB, row["ratio_measured_to_planned"],
             (plan["total_bytes"] - row["planned_activations_workspace_bytes"]) / MIB,
             row["held_before_step_1_bytes"] / MIB, row["planned_activations_workspace_bytes"] / MIB,
             row["steps_growth_bytes"] / MIB), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(benchlib.ROOT, "build", "megabatch"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--models", default="", help="comma-separated names' prefixes (default: all)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    host = benchlib.Host(threads=1, binaries={"megabatch": args.bin})
    chosen = [m for m in MODELS if not args.models or any(m[0].startswith(p) for p in args.models.split(","))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mb-plan-peaks-") as work:
        for name, config, tool, overrides in chosen:
            rows.append(measure(args.bin, name, config, tool, overrides, args.steps, work))
            host.sample_load()
    benchlib.finish("memory_plan_peaks", {"rows": rows, "steps": args.steps}, host, out=args.out)


if __name__ == "__main__":
    main()
