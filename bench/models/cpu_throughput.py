"""CPU training throughput: megabatch (1 rank) against the same model in PyTorch (Python).

Side by side in one run, alternating, on the same data file, model, batch, optimiser and
thread count:
  - demo LSTM   (configs/demo.yaml: streams m1:60, m5:24, h1:12, hidden 32, batch 128)
  - tiny GPT    (configs/arith-gpt.yaml: width 64, 2 layers, 4 heads, context 32, batch 128)
The Python baseline is written the way a competent PyTorch user would: the data already in
memory as tensors, windows gathered by index arithmetic (no DataLoader, no disk in the loop),
the reference modules of tests/model/test_parity.py (the very modules whose outputs and
gradients megabatch matches to 1e-5), torch.optim.AdamW(foreach=True), fp32, and
torch.set_num_threads(threads). Both time the same number of steps after warm-up; medians of
the repeats are reported with their ratio (> 1 means megabatch is faster).

usage: /usr/bin/python3 bench/models/cpu_throughput.py BUILD_DIR [--repeats 5] [--steps 200]
                                                      [--threads 1] [--only lstm|gpt]
                                                      [--out results.json]
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
import test_parity as reference  # noqa: E402

LSTM_STREAMS = {"m1": 60, "m5": 24, "h1": 12}


# --- Python baselines: one training step per call ------------------------------------------

def lstm_baseline(path, batch, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with h5py.File(path, "r") as f:
        series = {k: torch.from_numpy(f["series/%s/values" % k][()].astype("f4")) for k in LSTM_STREAMS}
        ends = {k: torch.from_numpy(f["samples/end/%s" % k][()].astype("i8")) for k in LSTM_STREAMS}
        targets = torch.from_numpy(f["targets"][()].astype("f4"))
    first = max(int(np.searchsorted(ends[k].numpy(), LSTM_STREAMS[k] - 1)) for k in LSTM_STREAMS)
    n = int((len(targets) - first) * 0.8)
    offsets = {k: torch.arange(-w + 1, 1) for k, w in LSTM_STREAMS.items()}
    features = [series[k].shape[1] for k in LSTM_STREAMS]
    model = reference.MultiStreamLstm(list(LSTM_STREAMS), features, 32, 1, 32, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=True)
    order = torch.randperm(n) + first
    position = [0]

    def step():
        if position[0] + batch > n:
            position[0] = 0
        idx = order[position[0]:position[0] + batch]
        position[0] += batch
        xs = [series[k][ends[k][idx].unsqueeze(1) + offsets[k]] for k in LSTM_STREAMS]
        loss = F.mse_loss(model(xs).squeeze(1), targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def gpt_baseline(path, batch, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    context, width, layers, heads = 32, 64, 2, 4
    with h5py.File(path, "r") as f:
        tokens = torch.from_numpy(f["tokens"][()].astype("i8"))
    n = int(((len(tokens) - 1) // context) * 0.9)
    model = reference.Gpt(128, context, width, layers, heads, True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=5e-3, betas=(0.9, 0.99), foreach=True)
    order = torch.randperm(n)
    span = torch.arange(context + 1)
    position = [0]

    def step():
        if position[0] + batch > n:
            position[0] = 0
        items = tokens[(order[position[0]:position[0] + batch] * context).unsqueeze(1) + span]
        position[0] += batch
        logits = model(items[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), items[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def time_python(make_step, path, batch, threads, steps, warmup):
    """(wall seconds, CPU seconds) per step."""
    step = make_step(path, batch, threads)
    for _ in range(warmup):
        step()
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps, (time.process_time() - start_cpu) / steps


# --- megabatch --------------------------------------------------------------------------

def child_cpu_seconds(cmd, env):
    """Runs cmd; returns the CPU seconds (user + system) it and its threads used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_megabatch(binary, config, path, run_dir, threads, steps, warmup, overrides=()):
    """Seconds per step over the steps after warm-up, from metrics.jsonl: log windows of
    `warmup` steps each (one host sync per window, as in a real run), the first one dropped."""
    total = warmup + steps
    cmd = [binary, "train", "--config", config, "data.path=" + path, "run.dir=" + run_dir, "run.resume=never",
           "train.max_steps=%d" % total, "train.eval_every=0", "run.log_every=%d" % warmup, "run.checkpoint_every=0",
           "train.threads=%d" % threads, "train.precision=fp32", "train.grad_clip=1.0",
           "run.progress=lines"] + list(overrides)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    # CPU time per step = (CPU of this run - CPU of a warm-up-only run) / steps: start-up, data
    # loading and warm-up cancel, and it is less sensitive than wall time to other load.
    short = [a if not a.startswith("train.max_steps=") else "train.max_steps=%d" % warmup for a in cmd]
    short = [a if not a.startswith("run.dir=") else "run.dir=" + run_dir + "-short" for a in short]
    cpu = (child_cpu_seconds(cmd, env) - child_cpu_seconds(short, env)) / steps
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if r["event"] == "train"]
    # Epoch ends add log lines; weight each window by the steps it covers.
    seconds, counted, previous = 0.0, 0, 0
    for r in train:
        covered = r["step"] - previous
        if previous >= warmup:
            seconds += r["step_time_s"] * covered
            counted += covered
        previous = r["step"]
    assert counted == steps, (counted, steps)
    return seconds / counted, cpu


def make_data(binary, workdir):
    demo = os.path.join(workdir, "demo.h5")
    arith = os.path.join(workdir, "arith.h5")
    subprocess.run([binary, "data", "synth-series", "--out", demo], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([binary, "data", "arith", "--out", arith], check=True, stdout=subprocess.DEVNULL)
    return demo, arith


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="also the log window; divides --steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=["lstm", "gpt"], help="time one model only")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    workdir = tempfile.mkdtemp(prefix="mb-bench-")
    demo, arith = make_data(binary, workdir)
    cases = [
        ("demo LSTM", os.path.join(ROOT, "configs", "demo.yaml"), demo, lstm_baseline, 128),
        ("tiny GPT", os.path.join(ROOT, "configs", "arith-gpt.yaml"), arith, gpt_baseline, 128),
    ]
    if args.only:
        cases = [c for c in cases if args.only in c[0].lower()]
    results = []
    for name, config, path, baseline, batch in cases:
        mb, py = [], []
        for r in range(args.repeats):  # alternate, so load changes hit both sides alike
            run_dir = os.path.join(workdir, "run-%s-%d" % (name.replace(" ", "_"), r))
            mb.append(time_megabatch(binary, config, path, run_dir, args.threads, args.steps, args.warmup))
            py.append(time_python(baseline, path, batch, args.threads, args.steps, args.warmup))
            print("%-10s repeat %d: megabatch %.2f ms/step (CPU %.2f), PyTorch %.2f ms/step (CPU %.2f)"
                  % (name, r, 1e3 * mb[-1][0], 1e3 * mb[-1][1], 1e3 * py[-1][0], 1e3 * py[-1][1]), flush=True)
        row = {"model": name, "batch": batch, "threads": args.threads, "steps": args.steps}
        for side, runs in (("megabatch", mb), ("pytorch", py)):
            row[side + "_wall_ms"] = [1e3 * w for w, _ in runs]
            row[side + "_cpu_ms"] = [1e3 * c for _, c in runs]
            row[side + "_median_ms"] = statistics.median(row[side + "_wall_ms"])
            row[side + "_median_cpu_ms"] = statistics.median(row[side + "_cpu_ms"])
            row[side + "_samples_per_s"] = 1e3 * batch / row[side + "_median_ms"]
        row["ratio"] = row["pytorch_median_ms"] / row["megabatch_median_ms"]
        row["cpu_ratio"] = row["pytorch_median_cpu_ms"] / row["megabatch_median_cpu_ms"]
        results.append(row)
    print("\n| model | threads | megabatch samples/s | PyTorch samples/s | ratio, wall (megabatch / PyTorch)"
          " | ratio, CPU time per step |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %d | %.0f | %.0f | **%.2f** | %.2f |" % (r["model"], r["threads"], r["megabatch_samples_per_s"],
                                                             r["pytorch_samples_per_s"], r["ratio"], r["cpu_ratio"]))
    print("torch %s, %s" % (torch.__version__, torch.__config__.parallel_info().splitlines()[0]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
