#!/usr/bin/env python3
"""CPU time of an evaluation at a small batch (a training micro-batch) against 256 samples per
forward pass (Note [Evaluation batch] in src/train/memory/EvalBatch.h), on the models of
configs/demo.yaml and configs/lstm-multitf.yaml, with the metrics of both compared.

    /usr/bin/python3 bench/eval_batch.py [--bin build/megabatch] [--out bench/results/eval_batch.json]

Each model trains one step on its header's data (multitf: --rows 400000, 128 features, the five
streams), then `megabatch eval --batch B --max-samples M` runs REPEATS times per batch size,
alternating, one thread (OMP_NUM_THREADS=1, train.threads=1), and the CPU time of each run
(user + system, from the kernel's accounting of the child) is recorded. The result: medians, the
ratio small/256, and the largest relative difference of any metric between the two batch sizes.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {
    "demo": {
        "config": "configs/demo.yaml",
        "data": ["--rows", "100000", "--features", "4", "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"],
        "small": 16,
        "samples": 4096,
    },
    "multitf": {
        "config": "configs/lstm-multitf.yaml",
        "data": ["--rows", "400000", "--features", "128", "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"],
        "small": 8,
        "samples": 256,
    },
}


def run(cmd, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, **kw)
    if proc.returncode != 0:
        raise SystemExit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stdout[-3000:]))
    return proc.stdout


def timed(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    run(cmd, env=env)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "megabatch"))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "eval_batch.json"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="demo,multitf")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    results = {"what": __doc__.strip().splitlines()[0], "repeats": args.repeats, "models": {}}
    with tempfile.TemporaryDirectory(prefix="mbevalbatch-") as work:
        for name in args.models.split(","):
            m = MODELS[name]
            data = os.path.join(work, name + ".h5")
            run([args.bin, "data", "synth-series", "--out", data] + m["data"], env=env)
            run_dir = os.path.join(work, "run-" + name)
            run([args.bin, "train", "--config", os.path.join(ROOT, m["config"]), "data.path=" + data,
                 "run.dir=" + run_dir, "train.max_steps=1", "train.eval_batches=1", "train.global_batch=16",
                 "train.threads=1", "train.precision=fp32", "train.device=cpu", "run.checkpoint_every=0"], env=env)
            times = {m["small"]: [], 256: []}
            walls = {m["small"]: [], 256: []}
            metrics = {}
            for _ in range(args.repeats):
                for batch in (m["small"], 256):
                    out = os.path.join(work, "%s-%d.json" % (name, batch))
                    cpu, wall = timed([args.bin, "eval", "--checkpoint", run_dir, "--batch", str(batch),
                                       "--max-samples", str(m["samples"]), "--out", out, "train.threads=1"], env)
                    times[batch].append(cpu)
                    walls[batch].append(wall)
                    with open(out) as f:
                        metrics[batch] = {k: v for k, v in json.load(f).items() if k.startswith("val_")}
            small, big = statistics.median(times[m["small"]]), statistics.median(times[256])
            diff = max(abs(metrics[m["small"]][k] - metrics[256][k]) / max(abs(metrics[256][k]), 1e-30)
                       for k in metrics[256])
            results["models"][name] = {
                "config": m["config"], "samples": m["samples"], "small_batch": m["small"],
                "cpu_s": {str(b): v for b, v in times.items()}, "wall_s": {str(b): v for b, v in walls.items()},
                "median_cpu_s": {str(m["small"]): small, "256": big}, "cpu_ratio_small_over_256": small / big,
                "metrics": {str(b): v for b, v in metrics.items()}, "max_relative_metric_difference": diff,
            }
            print("%s: %d samples, CPU %.2f s at batch %d, %.2f s at 256: %.2fx less; metrics differ by %.1e (rel)"
                  % (name, m["samples"], small, m["small"], big, small / big, diff), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
