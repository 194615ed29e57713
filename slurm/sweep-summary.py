#!/usr/bin/env python3
"""Prints one line per run of a sweep directory: best validation loss, its step, the last
train step and loss. Used by slurm/sweep.sh's summary job; works on any directory of runs.

    python3 slurm/sweep-summary.py runs/sweep-1234
"""
import json
import os
import sys


def summarise(run_dir):
    best, last = None, None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("event") == "eval" and r.get("split") == "val" and isinstance(r.get("loss"), (int, float)):
                if best is None or r["loss"] < best[0]:
                    best = (r["loss"], r["step"])
            elif r.get("event") == "train":
                last = (r["step"], r.get("loss"))
    return best, last


def main(root):
    rows = []
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, "metrics.jsonl")):
            rows.append((name,) + summarise(os.path.join(root, name)))
    if not rows:
        print("no runs with metrics.jsonl under %s" % root)
        return 1
    rows.sort(key=lambda r: (r[1] is None, r[1][0] if r[1] else 0))
    print("%-40s %14s %8s %10s %14s" % ("run", "best val_loss", "at step", "last step", "last loss"))
    for name, best, last in rows:
        print("%-40s %14s %8s %10s %14s" % (name, "%.6g" % best[0] if best else "-", best[1] if best else "-",
                                           last[0] if last else "-", "%.6g" % last[1] if last and last[1] is not None else "-"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: sweep-summary.py RUNS_DIR")
    sys.exit(main(sys.argv[1]))
