"""Overhead of model.kind = torchscript: a TorchScript LSTM against the built-in LSTM of the same
size, trained by megabatch on the same data, side by side in one run.

Both sides are `megabatch train` on configs/demo.yaml (streams m1:60, m5:24, h1:12 of
`megabatch data synth-series`, hidden 32, 1 layer, head 32, batch 128, AdamW, clipping, fp32);
only model.kind differs. The TorchScript module is the built-in model written in Python, with
the same structure and state_dict names (tests/model/test_parity.py's MultiStreamLstm with a
forward that takes one argument per stream), scripted with torch.jit.script. The repeats
alternate between the two, so a change of load hits both alike. Time per step comes from
megabatch's metrics (log windows of --warmup steps, the first dropped) and CPU time per step from
a long minus a warm-up-only run (bench/models/cpu_throughput.py's time_megabatch); medians of the
repeats and their ratio (TorchScript / built-in samples per second; the target is >= 0.9).
With --paired both sides run at the same time, one per core (`taskset`, cores swapped every
repeat), so load from other processes hits both alike; CPU time per step then covers the whole
run (start-up included).

usage: /usr/bin/python3 bench/models/torchscript_overhead.py BUILD_DIR [--repeats 5] [--steps 200]
                                                            [--warmup 20] [--threads 1] [--paired]
                                                            [--out FILE.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
import cpu_throughput  # noqa: E402
import test_parity as reference  # noqa: E402

STREAMS = ["m1", "m5", "h1"]  # configs/demo.yaml
FEATURES, HIDDEN, HEAD_HIDDEN = 4, 32, 32


class DemoLstm(reference.MultiStreamLstm):
    """The built-in lstm of configs/demo.yaml in PyTorch: forward(m1, m5, h1) -> [B, 1]."""

    def forward(self, m1: torch.Tensor, m5: torch.Tensor, h1: torch.Tensor) -> torch.Tensor:
        _, (a, _) = self.encoders["m1"](m1)
        _, (b, _) = self.encoders["m5"](m5)
        _, (c, _) = self.encoders["h1"](h1)
        return self.head(torch.cat([a[-1], b[-1], c[-1]], dim=1))


def script_lstm(path):
    torch.manual_seed(0)
    module = DemoLstm(STREAMS, [FEATURES] * len(STREAMS), HIDDEN, 1, HEAD_HIDDEN, 1)
    torch.jit.script(module).save(path)


def paired_run(binary, config, data, run_dirs, sides, threads, steps, warmup, cores):
    """Both sides at once, side i pinned to cores[i]: the same load hits both. Returns
    {side: (seconds per step after warm-up, CPU seconds per step over the whole run)}."""
    total = warmup + steps
    procs = {}
    for (side, overrides), run_dir, core in zip(sides.items(), run_dirs, cores):
        cmd = ["taskset", "-c", str(core), binary, "train", "--config", config, "data.path=" + data,
               "run.dir=" + run_dir, "run.resume=never", "train.max_steps=%d" % total, "train.eval_every=0",
               "run.log_every=%d" % warmup, "run.checkpoint_every=0", "train.threads=%d" % threads,
               "train.precision=fp32", "train.grad_clip=1.0", "run.progress=lines"] + list(overrides)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        procs[side] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env), run_dir)
    out = {}
    for side, (proc, run_dir) in procs.items():
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, (side, proc.stderr.read().decode()[-2000:])
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            train = [json.loads(line) for line in f if line.strip() and '"train"' in line]
        timed = [r for r in train if r["step"] > warmup]
        seconds = sum(r["step_time_s"] * warmup for r in timed) / (len(timed) * warmup)
        out[side] = (seconds, (usage.ru_utime + usage.ru_stime) / total)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="also the log window; divides --steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--paired", action="store_true",
                        help="run both sides at once, one per core (cores swapped each repeat): robust to "
                             "load from other processes; CPU time then covers the whole run")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    workdir = tempfile.mkdtemp(prefix="mb-ts-bench-")
    data = os.path.join(workdir, "demo.h5")
    subprocess.run([binary, "data", "synth-series", "--out", data], check=True, stdout=subprocess.DEVNULL)
    archive = os.path.join(workdir, "lstm.pt")
    script_lstm(archive)
    config = os.path.join(ROOT, "configs", "demo.yaml")
    sides = {"built-in lstm": [], "torchscript lstm": ["model.kind=torchscript", "model.path=" + archive]}
    times = {side: [] for side in sides}
    for r in range(args.repeats):
        run_dirs = [os.path.join(workdir, "run-%s-%d" % (side.split()[0], r)) for side in sides]
        if args.paired:
            cores = [r % 2, (r + 1) % 2]
            for side, result in paired_run(binary, config, data, run_dirs, sides, args.threads, args.steps,
                                           args.warmup, cores).items():
                times[side].append(result)
        else:
            for (side, overrides), run_dir in zip(sides.items(), run_dirs):
                times[side].append(cpu_throughput.time_megabatch(binary, config, data, run_dir, args.threads,
                                                                 args.steps, args.warmup, overrides))
        print("repeat %d: %s" % (r, ", ".join("%s %.2f ms/step (CPU %.2f)" % (s, 1e3 * t[-1][0], 1e3 * t[-1][1])
                                                for s, t in times.items())), flush=True)
    batch = 128
    row = {"batch": batch, "threads": args.threads, "steps": args.steps, "repeats": args.repeats,
           "paired": args.paired}
    for side, runs in times.items():
        key = side.split()[0].replace("-", "_")
        row[key + "_wall_ms"] = [1e3 * w for w, _ in runs]
        row[key + "_cpu_ms"] = [1e3 * c for _, c in runs]
        row[key + "_samples_per_s"] = 1e3 * batch / statistics.median(row[key + "_wall_ms"])
        row[key + "_median_cpu_ms"] = statistics.median(row[key + "_cpu_ms"])
    row["ratio"] = row["torchscript_samples_per_s"] / row["built_in_samples_per_s"]
    row["cpu_ratio"] = row["built_in_median_cpu_ms"] / row["torchscript_median_cpu_ms"]
    print("\n| model (configs/demo.yaml) | threads | built-in samples/s | TorchScript samples/s "
          "| ratio, wall (TorchScript / built-in) | ratio, CPU time per step |")
    print("|---|---|---|---|---|---|")
    print("| LSTM m1:60, m5:24, h1:12, hidden 32, batch %d | %d | %.0f | %.0f | **%.2f** | %.2f |" % (
        batch, args.threads, row["built_in_samples_per_s"], row["torchscript_samples_per_s"], row["ratio"],
        row["cpu_ratio"]))
    print("per repeat, ms per step (built-in / TorchScript): " + ", ".join(
        "%.1f/%.1f" % (a, b) for a, b in zip(row["built_in_wall_ms"], row["torchscript_wall_ms"])))
    print("torch %s, %s" % (torch.__version__, torch.__config__.parallel_info().splitlines()[0]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
