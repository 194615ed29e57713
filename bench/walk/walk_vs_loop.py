"""A walk-forward as one `megabatch walk` against the same folds as separate commands.

The loop is what docs/operations.md shows by hand: per fold, `mpirun -np R megabatch train` with
the fold's cuts (data.split.train_from, val_from, val_until; train.init_from the fold before)
and then `megabatch predict --from --to`. Both sides train the same folds from the same cuts;
the loop's cuts come from `megabatch walk --plan`, so the script also checks that every fold's
predictions agree bit for bit between the two. Repeats alternate walk and loop, and the figure is
the median of the per-repeat ratios loop / walk, with the load average (bench/benchlib.py).

    /usr/bin/python3 bench/walk/walk_vs_loop.py --config CONFIG --data FILE [--ranks 2] [--repeats 5] \
        [--label sp] [key=value ...]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402

BINARY = os.path.join(benchlib.ROOT, "build", "megabatch")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def mpirun(ranks, args):
    return ["mpirun", "-np", str(ranks), "--bind-to", "none", BINARY] + args


def run(command):
    start = time.monotonic()
    done = subprocess.run(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if done.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (done.returncode, " ".join(command), done.stdout[-3000:]))
    return time.monotonic() - start, done.stdout


def plan(config, overrides):
    _, out = run([BINARY, "walk", "--config", config, "--plan"] + overrides)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def walk(config, overrides, ranks, run_dir):
    seconds, _ = run(mpirun(ranks, ["walk", "--config", config, "run.dir=" + run_dir] + overrides))
    with open(os.path.join(run_dir, "walk.json")) as f:
        report = json.load(f)
    return seconds, report


def loop(config, overrides, ranks, run_dir, folds, data):
    """The shell loop of docs/operations.md, fold by fold. Returns (seconds, per-fold seconds)."""
    start, per_fold = time.monotonic(), []
    for fold in folds:
        fold_start = time.monotonic()
        fold_dir = os.path.join(run_dir, "folds", fold["fold"])
        init = fold["init_from"].replace(fold["init_from"].split("/folds/")[0], run_dir) \
            if fold["init_from"] else ""
        cuts = ["data.split.train_from=" + fold["train_from"],
                "data.split.val_from=" + fold["val_from"],
                "data.split.val_until=" + fold["val_until"], "train.init_from=" + init]
        run(mpirun(ranks, ["train", "--config", config, "run.dir=" + fold_dir] + overrides + cuts))
        run([BINARY, "predict", "--checkpoint", fold_dir, "--data", data, "--from", fold["from"], "--to",
             fold["to"], "--out", os.path.join(fold_dir, "predictions.h5")])
        per_fold.append(time.monotonic() - fold_start)
    return time.monotonic() - start, per_fold


def same_predictions(walk_dir, loop_dir, folds):
    with h5py.File(os.path.join(walk_dir, "predictions.h5"), "r") as f:
        walked, which = f["predictions"][...], f["fold"][...]
    names = sorted({fold["fold"] for fold in folds})
    for i, fold in enumerate(folds):
        with h5py.File(os.path.join(loop_dir, "folds", fold["fold"], "predictions.h5"), "r") as f:
            looped = f["predictions"][...]
        mine = walked[which == names.index(fold["fold"])] if which.dtype.kind in "iu" else None
        if mine is None or not np.array_equal(mine.view(np.uint8), looped.view(np.uint8)):
            return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True, help="the config's data.path, for predict")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--label", default="walk")
    parser.add_argument("--out", default="")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    benchlib.check_repeats(args.repeats)
    overrides = args.overrides + ["train.threads=1"]
    folds = [f for f in plan(args.config, overrides) if f["predict_end"] > f["predict_begin"]]
    host = benchlib.Host(threads=args.ranks, binaries={"megabatch": BINARY})
    walks, loops, identical, overheads, fold_loops, memory = [], [], [], [], [], []
    scratch = tempfile.mkdtemp(prefix="walk-bench-")
    try:
        for repeat in range(args.repeats):
            walk_dir, loop_dir = os.path.join(scratch, "walk"), os.path.join(scratch, "loop")
            for d in (walk_dir, loop_dir):
                shutil.rmtree(d, ignore_errors=True)
            seconds, report = walk(args.config, overrides, args.ranks, walk_dir)
            walks.append(seconds)
            overheads.append([f["seconds_overhead"] for f in report["folds"]])
            memory.append([(f["rss_bytes"], f["peak_rss_bytes"]) for f in report["folds"]])
            seconds, per_fold = loop(args.config, overrides, args.ranks, loop_dir, folds,
                                   args.data)
            loops.append(seconds)
            fold_loops.append(per_fold)
            identical.append(same_predictions(walk_dir, loop_dir, folds))
            host.sample_load()
            print("repeat %d: walk %.1f s, loop %.1f s (x%.2f), predictions identical: %s, "
                  "load %.2f" % (repeat + 1, walks[-1], loops[-1], loops[-1] / walks[-1],
                                 identical[-1], benchlib.load_average()[0]), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ratio = benchlib.median_ratio(loops, walks)
    fold_overhead = statistics.median(x for repeat in overheads for x in repeat)
    print("%s: %d folds on %d ranks: walk %.1f s, loop %.1f s (medians); loop / walk = %.2fx "
          "(median of per-repeat ratios); walk's median overhead per fold %.2f s; loop per fold "
          "%.2f s, walk per fold %.2f s" % (
              args.label, len(folds), args.ranks, statistics.median(walks),
              statistics.median(loops), ratio, fold_overhead,
              statistics.median(x for repeat in fold_loops for x in repeat),
              statistics.median(walks) / len(folds)))
    first = statistics.median(m[0][0] for m in memory) / 2**20
    last = statistics.median(m[-1][0] for m in memory) / 2**20
    peak_first = statistics.median(m[0][1] for m in memory) / 2**20
    peak_last = statistics.median(m[-1][1] for m in memory) / 2**20
    print("rank 0's memory after fold 1 and after fold %d (medians): rss %.1f -> %.1f MiB, peak "
          "during the fold %.1f -> %.1f MiB" % (len(folds), first, last, peak_first, peak_last))
    result = {"label": args.label, "walk_fold_memory_bytes": memory, "config": args.config, "overrides": overrides,
              "ranks": args.ranks, "folds": len(folds), "walk_seconds": walks,
              "loop_seconds": loops, "loop_fold_seconds": fold_loops,
              "walk_fold_overhead_seconds": overheads, "ratio_median": ratio,
              "predictions_identical": identical}
    benchlib.finish("walk_vs_loop-" + args.label, result, host, out=args.out)
    if not all(identical):
        sys.exit("the walk's and the loop's predictions differ")


if __name__ == "__main__":
    main()
