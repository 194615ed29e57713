"""What the stop check costs an evaluation (Note [Stopping within seconds] in
src/train/Signals.cpp): two builds side by side on the demo, 2 CPU ranks, evaluating every 25
steps, and the evaluations' own times (eval_time_s in metrics.jsonl) compared.

    /usr/bin/python3 bench/stop_check.py NEW_BUILD OLD_BUILD [--repeats 5]

NEW_BUILD has the check between evaluation batches and the extra entry in the evaluation's
all-reduce; OLD_BUILD is the commit before it. Every repeat trains with both, in alternating
order, so load on the host hits both alike. Reported: the median evaluation time of each build,
and the median of the per-repeat ratios new / old of the median evaluation time (1.00: no cost).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

DEMO = os.path.join(benchlib.ROOT, "configs", "demo.yaml")


def eval_times(binary, data, run_dir):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", os.path.join(binary, "megabatch"), "train", "--config", DEMO,
           "data.path=" + data, "run.dir=" + run_dir, "train.max_steps=250", "train.eval_every=25",
           "train.threads=1", "run.checkpoint_every=1000"]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=True, env=env, timeout=900)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["eval_time_s"] for r in records if r.get("event") == "eval"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new")
    parser.add_argument("old")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    benchlib.check_repeats(args.repeats)
    host = benchlib.Host(threads=2, binaries={"new": os.path.join(args.new, "megabatch"),
                                              "old": os.path.join(args.old, "megabatch")})
    with tempfile.TemporaryDirectory(prefix="mbstopcheck-") as tmp:
        data = os.path.join(tmp, "demo.h5")
        subprocess.run([os.path.join(args.new, "megabatch"), "data", "synth-series", "--out", data],
                       stdout=subprocess.DEVNULL, check=True)
        runs = {"new": [], "old": []}
        for repeat in range(args.repeats):
            order = ("new", "old") if repeat % 2 == 0 else ("old", "new")
            for side in order:
                times = eval_times(getattr(args, side), data, os.path.join(tmp, "%s-%d" % (side, repeat)))
                runs[side].append(times)
                print("repeat %d %s: %d evaluations, median %.4f s" % (repeat, side, len(times),
                                                                      statistics.median(times)), flush=True)
            host.sample_load()
    medians = {side: [statistics.median(times) for times in runs[side]] for side in runs}
    ratio = benchlib.median_ratio(medians["new"], medians["old"])
    result = {"eval_time_s": runs, "median_eval_time_s": {side: statistics.median(m) for side, m in medians.items()},
              "median_ratio_new_over_old": ratio}
    print("median evaluation: new %.4f s, old %.4f s; median per-repeat ratio new/old %.4f" % (
        result["median_eval_time_s"]["new"], result["median_eval_time_s"]["old"], ratio))
    benchlib.finish("stop-check", result, host, args.out)


if __name__ == "__main__":
    main()
