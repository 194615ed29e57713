"""bf16 against fp32 on the CPU: the validation metrics of shipped configs, side by side.

For each config, each seed and each precision, one `mpirun -np 2 megabatch train` (1 thread per
rank) from a fresh run directory on the data the config's header makes; the last validation
evaluation of each run is kept. The summary per config: the median over seeds of each metric in
fp32 and in bf16, the median difference, and the spread of fp32 itself over the seeds (the noise
a precision difference is judged against). This is the quality check behind `precision: auto` on
the CPU (docs/operations.md, "Precision on the CPU"); speed is bench/models/cpu_throughput.py's.

usage: /usr/bin/python3 bench/models/cpu_precision_quality.py BUILD_DIR --config NAME:DATA.h5
           [--config ...] [--seeds 1,2,3] [--steps N] [--set KEY=VALUE ...] [--out results.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402

ROOT = benchlib.ROOT


def last_validation(metrics_path):
    evals = []
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "eval" and record.get("split") == "val":
                evals.append(record)
    if not evals:
        raise SystemExit(f"{metrics_path}: no validation evaluation was recorded")
    last = evals[-1]
    skip = ("time", "eval_time_s", "step", "epoch", "samples")
    return {k: float(v) for k, v in last.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip}


def train(binary, config, data, precision, seed, steps, workdir, overrides):
    run_dir = os.path.join(workdir, f"{os.path.basename(config)}-{precision}-{seed}")
    command = ["mpirun", "-np", "2", "--oversubscribe", binary, "train", "--config", config,
               f"data.path={data}", f"run.dir={run_dir}", f"train.precision={precision}",
               f"train.seed={seed}", "train.threads=1"]
    if steps:
        command.append(f"train.max_steps={steps}")
    command += overrides
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return last_validation(os.path.join(run_dir, "metrics.jsonl"))


def summarise(runs):
    metrics = sorted(set(runs["fp32"][0]) & set(runs["bf16"][0]))
    summary = {}
    for name in metrics:
        fp32 = [r[name] for r in runs["fp32"]]
        bf16 = [r[name] for r in runs["bf16"]]
        summary[name] = {"fp32_median": statistics.median(fp32),
                         "bf16_median": statistics.median(bf16),
                         "difference_median": statistics.median(b - a for a, b in zip(fp32, bf16)),
                         "fp32_spread": max(fp32) - min(fp32)}
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir")
    parser.add_argument("--config", action="append", required=True, help="NAME:DATA.h5 (configs/NAME.yaml)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=0, help="train.max_steps (0: the config's)")
    parser.add_argument("--set", action="append", default=[], help="a config override for every run")
    parser.add_argument("--out")
    args = parser.parse_args()
    binary = os.path.abspath(os.path.join(args.build_dir, "megabatch"))
    host = benchlib.Host(threads=2, binaries={"megabatch": binary})
    seeds = [int(s) for s in args.seeds.split(",")]
    result = {"seeds": seeds, "steps": args.steps, "overrides": args.set, "configs": {}}
    with tempfile.TemporaryDirectory(prefix="mb-quality-") as workdir:
        for spec in args.config:
            name, data = spec.split(":", 1)
            config = os.path.join("configs", name + ".yaml")
            runs = {"fp32": [], "bf16": []}
            for seed in seeds:
                for precision in ("fp32", "bf16"):
                    runs[precision].append(train(binary, config, os.path.abspath(data), precision, seed,
                                                 args.steps, workdir, args.set))
                    host.sample_load()
                    print(f"{name} seed {seed} {precision}: {runs[precision][-1]}", flush=True)
            result["configs"][name] = {"runs": runs, "summary": summarise(runs)}
            for metric, s in result["configs"][name]["summary"].items():
                print(f"{name} {metric}: fp32 {s['fp32_median']:.6g} bf16 {s['bf16_median']:.6g} "
                      f"difference {s['difference_median']:+.4g} (fp32's spread over seeds {s['fp32_spread']:.4g})")
    benchlib.finish("cpu_precision_quality", result, host, out=args.out)


if __name__ == "__main__":
    main()
