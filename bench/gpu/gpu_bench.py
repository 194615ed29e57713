#!/usr/bin/env python3
"""GPU benchmarks of issue 8: megabatch against PyTorch in Python on the same GPU, side by side.

One call runs every section and writes OUT/gpu_bench.json (every raw number, per repeat),
OUT/gpu_bench.md (tables for docs/benchmarks.md, with versions and commands) and
OUT/gpu_bench.log (the progress lines).

  python3 bench/gpu/gpu_bench.py --bin build-gpu/megabatch --out DIR [--device cuda|cpu]
                                 [--quick] [--only lstm,gpt,data,nccl] [--repeats 3]
(--only runs the sections in the order it names them)

Sections
  lstm  The seed's LSTM: one series stream of 167 features, window 360, hidden 256, 2 layers,
        linear-GELU-linear head on the last layer's final hidden state, MSE, AdamW, clip 1.0,
        bf16 autocast; batch 128 and 1024. megabatch (`megabatch train`, configs/
        bench-lstm-seed.yaml) against the same model in Python: (a) eager, fed by an h5py
        Dataset (one window read per sample) and a DataLoader (workers, pin_memory,
        non_blocking copies): the seed's "before"; (b) eager, the series on the GPU and
        windows gathered there by index arithmetic (the seed's ChunkDataLoader); (c)
        torch.compile of (b).
  gpt   GPT-2 small (configs/gpt2-small.yaml: 124M, context 1024, tied embeddings, biases,
        exact GELU), bf16; tokens/s and MFU. Python: eager with
        F.scaled_dot_product_attention(is_causal=True) and fused AdamW, and torch.compile.
        MFU = model FLOP/s (6 N + attention per token) / the card's bf16 dense peak from its
        datasheet (CARD_BF16_PEAK_TFLOPS), and / the bf16 matmul rate measured here (8192^3,
        median). Micro-batch 16 at context 1024 on cards of 70 GiB or more, 8 below (--gpt-micro
        sets it). Runnable alone: --only gpt (about 2.5 minutes on an H100 or H200, estimated).
  data  megabatch's shard load (`megabatch data check --report`): GB/s against the file size,
        warm and after evicting the file from the page cache; time from launch to the end of
        the first training step (`megabatch train`, its log timestamps).
  nccl  `megabatch train` with dist.backend=nccl (a world of one still builds an NCCL
        communicator and all-reduces every gradient bucket) against dist.backend=single (no
        communicator: every collective is the identity). On a CPU run, nccl does not exist and
        dist.backend=mpi stands in (a world of one makes it the identity too): plumbing only.

Timing: every side runs a warm-up window of W steps (cuDNN autotuning, torch.compile, CUDA
allocator growth), then --repeats windows of W steps; each window ends with a device sync
(megabatch: its metrics record, which syncs once per log line). The tables give medians over
the windows and the ratio of medians. torch.compile's compile time is the warm-up time less
W steps at the median rate, reported apart, never in steps/s.

Both sides use the same resolved config (`megabatch train --print-config`): hyperparameters,
shapes, the lr schedule (warm-up + cosine, computed per step in Python as megabatch does),
AdamW with weight decay on parameters of dim >= 2 only, grad clip, bf16 autocast with fp32
master weights, TF32 and cudnn.benchmark on. Parameter counts of both sides are checked equal.

--quick shrinks every shape so the script can be checked end to end on a CPU in minutes.
"""
import argparse
import datetime
import gc
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
import test_parity as reference  # noqa: E402  (the modules megabatch matches to 1e-5)

LSTM_CONFIG = os.path.join(ROOT, "configs", "bench-lstm-seed.yaml")
GPT_CONFIG = os.path.join(ROOT, "configs", "gpt2-small.yaml")
SECTIONS = ("lstm", "gpt", "data", "nccl")

# bf16 dense (no sparsity) tensor-core peak in TFLOP/s, from each card's datasheet, matched
# against torch.cuda.get_device_name in order (the first key the name contains). MFU's
# denominator, as in PaLM's and nanoGPT's MFU; a card not listed gets MFU against the measured
# matmul rate only.
CARD_BF16_PEAK_TFLOPS = [("H200", 989.4), ("GH200", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0),
                         ("H100", 989.4), ("H800", 989.4), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.1),
                         ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0), ("B200", 2250.0)]

# Sizes. Full: estimated at 5-6 minutes on one H100 (not run yet; docs/benchmarks.md, "GPU benchmarks").
# Quick: tiny shapes, about 1-2 minutes on a 2-core CPU.
FULL = {
    "lstm": {"window": 360, "features": 167, "hidden": 256, "batches": [128, 1024], "steps": {128: 40, 1024: 15},
             "megabatch": []},
    "gpt": {"global_batch": 32, "micro_batch": 16, "steps": 10, "data_vocab": 50257, "megabatch": []},
    "data_gb": 2.0,
    "matmul": 8192,
}
QUICK = {
    "lstm": {"window": 24, "features": 167, "hidden": 32, "batches": [16, 64], "steps": {16: 10, 64: 6},
             "megabatch": ["data.streams=[{name: m1, window: 24}]", "model.hidden=32"]},
    "gpt": {"global_batch": 8, "micro_batch": 4, "steps": 6, "data_vocab": 500,
            "megabatch": ["model.hidden=64", "model.layers=2", "model.heads=4", "data.context=64",
                          "model.vocab_size=512", "data.canonical_shards=16"]},
    "data_gb": 0.02,
    "matmul": 512,
}


# --- plumbing ---------------------------------------------------------------------------

class Bench:
    """Run-wide state: arguments, sizes, the results document, the clock and the log."""

    def __init__(self, args):
        self.args = args
        self.sizes = QUICK if args.quick else FULL
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.start = time.monotonic()
        self.deadline = self.start + args.budget_s if args.budget_s > 0 else float("inf")
        os.makedirs(args.out, exist_ok=True)
        self.log_file = open(os.path.join(args.out, "gpu_bench.log"), "w")
        self.work = args.workdir or tempfile.mkdtemp(prefix="gpu-bench-")
        os.makedirs(self.work, exist_ok=True)
        self.results = {"command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
                        "started": datetime.datetime.now().isoformat(timespec="seconds"),
                        "quick": args.quick, "device": args.device, "repeats": args.repeats,
                        "sections": {}, "megabatch_commands": []}
        self.megabatch_runs = {}  # key -> run record

    def say(self, text):
        line = "[%6.1f s] %s" % (time.monotonic() - self.start, text)
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left(self):
        return self.deadline - time.monotonic()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def free_memory(self):
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def save(self):
        self.results["elapsed_s"] = time.monotonic() - self.start
        path = os.path.join(self.args.out, "gpu_bench.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
        with open(os.path.join(self.args.out, "gpu_bench.md"), "w") as f:
            f.write(render_markdown(self.results))


class Skipped(Exception):
    pass


def median(values):
    return statistics.median(values) if values else float("nan")


def parse_yaml_scalars(text):
    """The scalars of `megabatch train --print-config` as {"optim.lr": "0.0006", ...}."""
    out, stack = {}, []
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("-") or line.strip() == "[]":
            continue
        indent = (len(line) - len(line.lstrip(" "))) // 2
        key, _, value = line.strip().partition(":")
        stack = stack[:indent] + [key]
        if value.strip():
            out[".".join(stack)] = value.strip()
    return out


def learning_rate(cfg, step, total):
    """megabatch's train/loop/Optimizer.cpp learningRate(): linear warm-up, then cosine/linear/constant."""
    peak, warmup = float(cfg["optim.lr"]), int(cfg["optim.warmup_steps"])
    if step < warmup:
        return peak * (step + 1) / warmup
    schedule = cfg["optim.schedule"]
    if schedule == "constant":
        return peak
    floor = peak * float(cfg["optim.min_lr_ratio"])
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return peak - (peak - floor) * progress
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_adamw(bench, model, cfg):
    """torch.optim.AdamW as megabatch configures it: decay on dim >= 2 only; fused on CUDA."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": float(cfg["optim.weight_decay"])},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kwargs = {"lr": float(cfg["optim.lr"]), "betas": (float(cfg["optim.beta1"]), float(cfg["optim.beta2"])),
              "eps": float(cfg["optim.eps"])}
    if bench.cuda:
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs), "AdamW(fused=True)"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs), "AdamW(foreach=True)"


def clip_gradients(params, max_norm):
    try:
        torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    except TypeError:  # torch < 2.0
        torch.nn.utils.clip_grad_norm_(params, max_norm)


def optimizer_step(opt, params, clip, cfg, state, total):
    """Clip, set the scheduled lr, step, zero: megabatch's order within a step."""
    if clip > 0:
        clip_gradients(params, clip)
    lr = learning_rate(cfg, state["step"], total)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    state["step"] += 1


def autocast(bench, precision):
    if precision != "bf16":
        return torch.autocast(bench.device.type, enabled=False)
    return torch.autocast(bench.device.type, dtype=torch.bfloat16)


def compile_available():
    return hasattr(torch, "compile")


def time_steps(bench, step, warmup, window, samples_per_step):
    """Warm-up window of `warmup` steps (the first timed alone), then --repeats windows."""
    bench.sync()
    start = time.perf_counter()
    step()
    bench.sync()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        step()
    bench.sync()
    warm = time.perf_counter() - start
    step_s = []
    for _ in range(bench.args.repeats):
        begin = time.perf_counter()
        for _ in range(window):
            step()
        bench.sync()
        step_s.append((time.perf_counter() - begin) / window)
    med = median(step_s)
    return {"first_step_s": first, "warmup_s": warm, "warmup_steps": warmup, "window_steps": window,
            "step_s": step_s, "samples_per_s": [samples_per_step / s for s in step_s],
            "median_samples_per_s": samples_per_step / med, "median_step_s": med,
            "warmup_overhead_s": warm - warmup * med}


# --- megabatch --------------------------------------------------------------------------

LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\]")


def log_time(line):
    m = LOG_TIME.match(line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()


def megabatch_env(bench):
    env = dict(os.environ)
    if bench.args.threads > 0:
        env["OMP_NUM_THREADS"] = str(bench.args.threads)
    return env


def common_overrides(bench, backend="single"):
    out = ["run.resume=never", "run.progress=lines", "run.checkpoint_every=0", "train.eval_every=0",
           "train.eval_batches=1", "data.split.embargo=0", "train.device=" + bench.args.device,
           "train.precision=" + bench.args.precision,
           "dist.backend=" + backend]
    if bench.args.threads > 0:
        out.append("train.threads=%d" % bench.args.threads)
    return out


def print_config(bench, config, overrides):
    cmd = [bench.args.bin, "train", "--config", config, "--print-config"] + overrides
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                         env=megabatch_env(bench), timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), out.returncode, out.stdout[-3000:]))
    return parse_yaml_scalars(out.stdout)


def run_megabatch(bench, args, run_dir, label):
    """Runs megabatch; returns the command, wall time, log (with timestamps) and metrics records."""
    if bench.left() < 20:
        raise Skipped("out of --budget-s")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [bench.args.bin] + args
    bench.results["megabatch_commands"].append(" ".join(shlex.quote(a) for a in cmd))
    bench.free_memory()  # the Python side's cached GPU blocks would crowd megabatch out
    launched = time.time()
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                             env=megabatch_env(bench), timeout=max(15, min(bench.args.timeout_s, bench.left())))
    except subprocess.TimeoutExpired as e:
        raise RuntimeError("%s: megabatch timed out after %.0f s" % (label, e.timeout))
    wall = time.time() - launched
    lines = out.stdout.splitlines()
    if out.returncode != 0:
        bench.log_file.write("--- %s: megabatch exit %d\n%s\n" % (label, out.returncode, "\n".join(lines[-60:])))
        raise RuntimeError("%s: megabatch exit %d: %s" % (label, out.returncode, " | ".join(lines[-4:])))
    metrics = []
    path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
    record = {"command": " ".join(shlex.quote(a) for a in cmd), "wall_s": wall, "launched": launched,
              "metrics": metrics, "log_tail": lines[-12:]}
    m = re.search(r"model \w+: (\d+) parameters", out.stdout)
    record["parameters"] = int(m.group(1)) if m else None
    m = re.search(r"gradient reducer: .* over (\w+)", out.stdout)
    record["reducer_backend"] = m.group(1) if m else None
    m = re.search(r"rank 0 loaded (.*?) in ([\d.]+) s", out.stdout)
    record["load_line"] = m.group(0) if m else None
    events = {}
    for line in lines:
        t = log_time(line)
        if t is None:
            continue
        events.setdefault("first_log_line", t)
        if "rank 0 loaded" in line:
            events.setdefault("data_loaded", t)
        elif "] info: training " in line:
            events.setdefault("training_starts", t)
        elif re.search(r"\] info: step 1/", line):
            events.setdefault("step_1_done", t)
    record["since_launch_s"] = {k: v - launched for k, v in events.items()}
    return record


def megabatch_windows(record, window):
    """Per-window rates from metrics.jsonl, the first (warm-up) window dropped."""
    train = [r for r in record["metrics"] if r.get("event") == "train"]
    previous, step_s, sps, tps, data_s, comm_s = 0, [], [], [], [], []
    for r in train:
        covered = r["step"] - previous
        if previous > 0:  # not the warm-up window
            if covered != window:
                raise RuntimeError("a log window of %d steps (expected %d): an epoch ended inside the run"
                                   % (covered, window))
            step_s.append(r["step_time_s"])
            sps.append(r["samples_per_s"])
            data_s.append(r.get("data_time_s", 0.0))
            comm_s.append(r.get("comm_time_s", 0.0))
            if "tokens_per_s" in r:
                tps.append(r["tokens_per_s"])
        previous = r["step"]
    out = {"step_s": step_s, "samples_per_s": sps, "median_samples_per_s": median(sps),
           "median_step_s": median(step_s), "window_steps": window, "warmup_steps": window,
           "median_data_s": median(data_s), "median_comm_s": median(comm_s)}
    if tps:
        out["tokens_per_s"] = tps
        out["median_tokens_per_s"] = median(tps)
    if train:
        out["warmup_overhead_s"] = train[0]["step_time_s"] * window - window * out["median_step_s"]
    return out


def megabatch_train(bench, key, config, overrides, window):
    """One `megabatch train` run of 1 + repeats windows; cached by key."""
    if key in bench.megabatch_runs:
        return bench.megabatch_runs[key]
    run_dir = os.path.join(bench.work, "run-" + key)
    steps = window * (1 + bench.args.repeats)
    args = (["train", "--config", config] + overrides +
            ["run.dir=" + run_dir, "train.max_steps=%d" % steps, "run.log_every=%d" % window])
    record = run_megabatch(bench, args, run_dir, key)
    shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)  # GPT-2: 1.5 GB each
    record.update(megabatch_windows(record, window))
    bench.megabatch_runs[key] = record
    return record


# --- environment ------------------------------------------------------------------------

def environment(bench):
    env = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
           "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version, "host_cores": os.cpu_count(),
           "torch_compile": compile_available(),
           "sdpa": hasattr(F, "scaled_dot_product_attention")}
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        env["cpu"] = names[0] if names else platform.processor()
    except OSError:
        env["cpu"] = platform.processor()
    out = subprocess.run([bench.args.bin, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    env["megabatch"] = out.stdout.splitlines()[0] if out.stdout else "?"
    try:
        env["git_commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, universal_newlines=True).stdout.strip()
    except OSError:
        env["git_commit"] = "?"
    if bench.cuda:
        props = torch.cuda.get_device_properties(bench.device)
        env.update({"gpu": torch.cuda.get_device_name(bench.device), "gpu_memory_gib": props.total_memory / 2**30,
                    "sm_count": props.multi_processor_count, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version()})
        try:
            nccl = torch.cuda.nccl.version()
            env["nccl"] = ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception as e:  # noqa: BLE001
            env["nccl"] = "? (%s)" % e
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 universal_newlines=True, timeout=30).stdout.strip().splitlines()
            if smi:
                driver, clock, power = [v.strip() for v in smi[0].split(",")]
                env.update({"driver": driver, "max_sm_clock": clock, "power_limit": power})
        except (OSError, subprocess.TimeoutExpired, ValueError):
            env["driver"] = "? (nvidia-smi not usable)"
    return env


def measure_matmul_peak(bench):
    """bf16 (fp32 when --precision fp32) n^3 matmul: TFLOP/s, median of 5 timed batches."""
    n = bench.sizes["matmul"]
    dtype = torch.bfloat16 if bench.args.precision == "bf16" else torch.float32
    a = torch.randn(n, n, device=bench.device, dtype=dtype)
    b = torch.randn(n, n, device=bench.device, dtype=dtype)
    c = torch.empty(n, n, device=bench.device, dtype=dtype)
    reps = 20 if bench.cuda else 3
    for _ in range(5):
        torch.matmul(a, b, out=c)
    bench.sync()
    rates = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        bench.sync()
        rates.append(2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12)
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "tflops": rates, "median_tflops": median(rates)}


# --- data files ---------------------------------------------------------------------------

def write_series(path, rows, features, window):
    """One series stream m1 [rows, features] float32, contiguous; a sample ends at every row that
    has a full window and a next row; random targets. Random blocks of 2^16 rows, each offset
    by its block number, so writing GBs costs little."""
    rng = np.random.default_rng(0)
    ends = np.arange(window - 1, rows - 1, dtype=np.int64)
    block = rng.standard_normal((min(rows, 1 << 16), features), dtype=np.float32)
    with h5py.File(path, "w") as f:
        values = f.create_dataset("series/m1/values", shape=(rows, features), dtype="f4")
        for i, start in enumerate(range(0, rows, len(block))):
            n = min(len(block), rows - start)
            values[start:start + n] = block[:n] + np.float32(0.001 * i)
        f["samples/end/m1"] = ends
        f["targets"] = rng.standard_normal(len(ends), dtype=np.float32)
        f["timestamps"] = 1_700_000_000 + 60 * ends


def write_tokens(path, count, vocab):
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("tokens", data=rng.integers(0, vocab, count, dtype=np.uint16))
        d.attrs["vocab_size"] = vocab


def series_file(bench):
    """The LSTM section's and the data section's file: --data-gb of float32 rows."""
    if "series" in bench.results.get("files", {}):
        return bench.results["files"]["series"]
    lstm = bench.sizes["lstm"]
    rows = int(bench.args.data_gb * 1e9 / (lstm["features"] * 4))
    needed = max(b * s * (1 + bench.args.repeats) for b, s in lstm["steps"].items())
    rows = max(rows, int(needed / 0.9 * 1.5) + lstm["window"] + 2)  # no epoch may end inside a run
    path = os.path.join(bench.work, "series.h5")
    start = time.perf_counter()
    write_series(path, rows, lstm["features"], lstm["window"])
    info = {"path": path, "rows": rows, "features": lstm["features"], "bytes": os.path.getsize(path),
            "write_s": time.perf_counter() - start}
    bench.results.setdefault("files", {})["series"] = info
    bench.say("wrote %s: %d rows x %d float32 = %.2f GB in %.1f s" % (path, rows, lstm["features"],
                                                                       info["bytes"] / 1e9, info["write_s"]))
    return info


# --- section 1: LSTM ----------------------------------------------------------------------

class LstmTask(nn.Module):
    """megabatch's lstm (src/model/kinds/Lstm.cpp) for one stream: the reference module of
    tests/model/test_parity.py (state_dict names and outputs match megabatch to 1e-5): LSTM,
    the last layer's final hidden state, Linear-GELU-Dropout-Linear head; MSE in fp32."""

    def __init__(self, features, hidden, layers, head_hidden, dropout):
        super().__init__()
        self.net = reference.MultiStreamLstm(["m1"], [features], hidden, layers, head_hidden, 1)
        if layers > 1 and dropout > 0:
            self.net.encoders["m1"].dropout = dropout

    def forward(self, x, y):
        return F.mse_loss(self.net([x]).squeeze(1).float(), y)


class SeriesWindows(torch.utils.data.Dataset):
    """The seed's "before": one h5py window read per sample (a handle per worker)."""

    def __init__(self, path, window, count):
        self.path, self.window, self.file = path, window, None
        with h5py.File(path, "r") as f:
            self.ends = f["samples/end/m1"][:count]
            self.targets = f["targets"][:count]

    def __len__(self):
        return len(self.ends)

    def __getitem__(self, i):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
            self.values = self.file["series/m1/values"]
        e = int(self.ends[i])
        return torch.from_numpy(self.values[e - self.window + 1:e + 1]), torch.tensor(self.targets[i])


def loader_settings(bench, batch_bytes):
    """Workers and prefetch as a competent user sets them (8 workers, prefetch 4, as the seed
    notes), fewer when /dev/shm could not hold the batches in flight."""
    workers = bench.args.workers if bench.args.workers >= 0 else min(8, os.cpu_count() or 1)
    prefetch = 4
    try:
        shm = shutil.disk_usage("/dev/shm").free
    except OSError:
        shm = None
    if shm is not None:
        while workers > 0 and workers * prefetch * batch_bytes * 1.5 > shm / 2:
            if prefetch > 2:
                prefetch = 2
            else:
                workers -= 1
    return workers, prefetch, shm


def lstm_python(bench, variant, cfg, batch, window, data):
    """One Python variant: 'h5py' (a), 'resident' (b), 'compile' (c)."""
    lstm = bench.sizes["lstm"]
    torch.manual_seed(0)
    task = LstmTask(lstm["features"], int(cfg["model.hidden"]), int(cfg["model.layers"]),
                    int(cfg["model.head_hidden"]), float(cfg["model.dropout"])).to(bench.device)
    params = list(task.parameters())
    count = sum(p.numel() for p in params)
    opt, opt_name = make_adamw(bench, task, cfg)
    precision, clip = cfg["train.precision"], float(cfg["train.grad_clip"])
    total = window * (1 + bench.args.repeats)
    state = {"step": 0}
    info = {"parameters": count, "optimizer": opt_name, "precision": precision}
    model = task
    if variant == "compile":
        torch._dynamo.reset()
        model = torch.compile(task)
        info["compile"] = "torch.compile(model), default mode; nn.LSTM runs eagerly (dynamo graph-breaks on RNNs)"

    def update(loss):
        loss.backward()
        optimizer_step(opt, params, clip, cfg, state, total)

    if variant == "h5py":
        n = data["train_samples"]
        dataset = SeriesWindows(data["path"], lstm["window"], n)
        workers, prefetch, shm = loader_settings(bench, batch * lstm["window"] * lstm["features"] * 4)
        kwargs = {"batch_size": batch, "shuffle": True, "drop_last": True, "num_workers": workers,
                  "pin_memory": bench.cuda, "generator": torch.Generator().manual_seed(0)}
        if workers > 0:
            kwargs.update(persistent_workers=True, prefetch_factor=prefetch, timeout=120)
        loader = torch.utils.data.DataLoader(dataset, **kwargs)
        info["loader"] = {"num_workers": workers, "prefetch_factor": prefetch if workers else None,
                          "pin_memory": bench.cuda, "dev_shm_free_bytes": shm}
        iterator = [iter(loader)]

        def step():
            try:
                x, y = next(iterator[0])
            except StopIteration:
                iterator[0] = iter(loader)
                x, y = next(iterator[0])
            x = x.to(bench.device, non_blocking=True)
            y = y.to(bench.device, non_blocking=True)
            with autocast(bench, precision):
                loss = model(x, y)
            update(loss)
    else:
        values, ends, targets = data["values"], data["ends"], data["targets"]
        n = len(ends)
        offsets = torch.arange(-lstm["window"] + 1, 1, device=bench.device)
        order = {"perm": torch.randperm(n, device=bench.device), "pos": 0}

        def step():
            if order["pos"] + batch > n:
                order["perm"], order["pos"] = torch.randperm(n, device=bench.device), 0
            idx = order["perm"][order["pos"]:order["pos"] + batch]
            order["pos"] += batch
            x = values[ends[idx].unsqueeze(1) + offsets]  # [B, window, features], gathered on the device
            with autocast(bench, precision):
                loss = model(x, targets[idx])
            update(loss)

    info.update(time_steps(bench, step, window, window, batch))
    return info


def section_lstm(bench):
    lstm = bench.sizes["lstm"]
    series = series_file(bench)
    out = {"shape": {k: lstm[k] for k in ("window", "features", "hidden")}, "cases": {}}
    bench.results["sections"]["lstm"] = out
    base = common_overrides(bench) + lstm["megabatch"] + ["data.path=" + series["path"]]
    cfg = print_config(bench, LSTM_CONFIG, base)
    out["config"] = {k: v for k, v in cfg.items() if k.startswith(("model.", "train.", "optim."))}
    # The GPU-resident copy of the series for variants (b) and (c): read with h5py, moved once.
    start = time.perf_counter()
    with h5py.File(series["path"], "r") as f:
        values = f["series/m1/values"][()]
        ends = f["samples/end/m1"][()]
        targets = f["targets"][()]
    read_s = time.perf_counter() - start
    train = int(len(ends) * float(cfg["data.split.train_fraction"]))
    resident = {"values": torch.from_numpy(values).to(bench.device),
                "ends": torch.from_numpy(ends[:train]).to(bench.device),
                "targets": torch.from_numpy(targets[:train]).to(bench.device),
                "path": series["path"], "train_samples": train}
    bench.sync()
    out["h5py_read_to_device"] = {"bytes": values.nbytes, "read_s": read_s,
                                  "read_and_copy_s": time.perf_counter() - start}
    del values
    for batch in lstm["batches"]:
        window = lstm["steps"][batch]
        case = {"batch": batch, "window_steps": window, "variants": {}}
        out["cases"][str(batch)] = case
        overrides = base + ["train.global_batch=%d" % batch]
        try:
            bench.say("lstm batch %d: megabatch" % batch)
            case["variants"]["megabatch"] = megabatch_train(bench, "lstm-%d-single" % batch, LSTM_CONFIG,
                                                            overrides, window)
        except (RuntimeError, Skipped) as e:
            case["variants"]["megabatch"] = {"error": str(e)}
        for variant in ("h5py", "resident", "compile"):
            if variant == "compile" and not compile_available():
                case["variants"][variant] = {"error": "n/a (torch < 2.0)"}
                continue
            if bench.left() < 30:
                case["variants"][variant] = {"error": "skipped: out of --budget-s"}
                continue
            bench.say("lstm batch %d: python %s" % (batch, variant))
            try:
                case["variants"][variant] = lstm_python(bench, variant, cfg, batch, window, resident)
            except Exception as e:  # noqa: BLE001  (one failing variant must not lose the rest)
                case["variants"][variant] = {"error": "%s: %s" % (type(e).__name__, e)}
            bench.free_memory()
        summarise_case(case, "samples")
        report_case(bench, "lstm batch %d" % batch, case, "samples")
        bench.save()
    del resident
    bench.free_memory()


def summarise_case(case, unit):
    """Ratios of medians: megabatch / each Python variant, and / the best of them."""
    key = "median_%s_per_s" % unit
    mb = case["variants"].get("megabatch", {}).get(key)
    ratios, best = {}, None
    for name, v in case["variants"].items():
        if name == "megabatch" or key not in v:
            continue
        if mb:
            ratios[name] = mb / v[key]
        if best is None or v[key] > case["variants"][best][key]:
            best = name
    case["ratios"] = ratios
    case["best_python"] = best
    if mb and best:
        case["ratio_vs_best"] = mb / case["variants"][best][key]


def report_case(bench, title, case, unit):
    key = "median_%s_per_s" % unit
    parts = []
    for name, v in case["variants"].items():
        parts.append("%s %s" % (name, "%.0f" % v[key] if key in v else v.get("error", "?")))
    bench.say("%s: %s %s/s; ratios %s" % (title, ", ".join(parts), unit,
                                           {k: round(r, 2) for k, r in case.get("ratios", {}).items()}))


# --- section 2: GPT-2 small -------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, bias):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width, bias=bias)
        self.c_proj = nn.Linear(width, width, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention on CUDA
        else:  # torch < 2.0
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads, bias):
        super().__init__()
        self.ln_1 = reference.LayerNorm(width, bias)
        self.attn = CausalSelfAttention(width, heads, bias)
        self.ln_2 = reference.LayerNorm(width, bias)
        self.mlp = reference.GptMlp(width, bias)  # c_fc, exact GELU, c_proj

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """megabatch's gpt (src/model/kinds/Gpt.cpp): GPT-2 with learned positions, pre-LN blocks, biases
    as configured, lm_head tied to wte, GPT-2 initialisation; the loss is cross entropy of the
    fp32 logits, inside forward as nanoGPT does (so torch.compile sees it)."""

    def __init__(self, vocab, context, width, layers, heads, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width), wpe=nn.Embedding(context, width),
            h=nn.ModuleList([Block(width, heads, bias) for _ in range(layers)]),
            ln_f=reference.LayerNorm(width, bias)))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def card_bf16_peak(name):
    """(TFLOP/s, the table's key) of CARD_BF16_PEAK_TFLOPS for a device name; (None, None) if absent."""
    for key, tflops in CARD_BF16_PEAK_TFLOPS:
        if key in name:
            return tflops, key
    return None, None


def gpt_micro_batch(bench):
    """--gpt-micro, else 16 sequences of 1024 tokens where the card has 70 GiB or more (gpt2-small
    in bf16 at micro-batch 16 peaks near 40 GiB with PyTorch's eager side), else 8; quick: its size."""
    if bench.args.gpt_micro > 0:
        return bench.args.gpt_micro
    if not bench.cuda or bench.args.quick:
        return bench.sizes["gpt"]["micro_batch"]
    return 16 if torch.cuda.get_device_properties(bench.device).total_memory >= 70 * 2**30 else 8


def gpt_flops_per_token(cfg, parameters):
    """nanoGPT's estimate_mfu count: 6 N + 12 L C T, N without the position embedding (wte is
    tied to lm_head, so it counts as the output matmul); attention as if not causal."""
    width, layers, context = int(cfg["model.hidden"]), int(cfg["model.layers"]), int(cfg["data.context"])
    return 6 * (parameters - context * width) + 12 * layers * width * context


def gpt_python(bench, variant, cfg, tokens):
    gpt = bench.sizes["gpt"]
    torch.manual_seed(0)
    context = int(cfg["data.context"])
    model = Gpt(int(cfg["model.vocab_size"]), context, int(cfg["model.hidden"]), int(cfg["model.layers"]),
                int(cfg["model.heads"]), cfg["model.bias"] == "true").to(bench.device)
    params = list(model.parameters())
    opt, opt_name = make_adamw(bench, model, cfg)
    precision, clip = cfg["train.precision"], float(cfg["train.grad_clip"])
    global_batch, micro = gpt["global_batch"], gpt_micro_batch(bench)
    window = gpt["steps"]
    total = window * (1 + bench.args.repeats)
    info = {"parameters": sum(p.numel() for p in params), "optimizer": opt_name, "precision": precision,
            "attention": "F.scaled_dot_product_attention(is_causal=True)"
            if hasattr(F, "scaled_dot_product_attention") else "math (torch < 2.0: no SDPA)",
            "global_batch": global_batch, "micro_batch": micro}
    forward = model
    if variant == "compile":
        torch._dynamo.reset()
        forward = torch.compile(model)
        info["compile"] = "torch.compile(model), default mode"
    items = (len(tokens) - 1) // context
    n = int(items * float(cfg["data.split.train_fraction"]))
    span = torch.arange(context + 1, device=bench.device)
    state = {"step": 0, "perm": torch.randperm(n, device=bench.device), "pos": 0}

    def step():
        for _ in range(global_batch // micro):
            if state["pos"] + micro > n:
                state["perm"], state["pos"] = torch.randperm(n, device=bench.device), 0
            idx = state["perm"][state["pos"]:state["pos"] + micro]
            state["pos"] += micro
            rows = tokens[(idx * context).unsqueeze(1) + span]  # [micro, context + 1]
            with autocast(bench, precision):
                loss = forward(rows[:, :-1], rows[:, 1:]) / (global_batch // micro)
            loss.backward()
        optimizer_step(opt, params, clip, cfg, state, total)

    info.update(time_steps(bench, step, window, window, global_batch))
    info["tokens_per_s"] = [s * context for s in info["samples_per_s"]]
    info["median_tokens_per_s"] = info["median_samples_per_s"] * context
    if bench.cuda:
        info["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated(bench.device) / 2**30
        torch.cuda.reset_peak_memory_stats(bench.device)
    return info


def section_gpt(bench):
    gpt = bench.sizes["gpt"]
    out = {"cases": {}}
    bench.results["sections"]["gpt"] = out
    bench.say("gpt: measuring the matmul rate")
    out["matmul_peak"] = peak = measure_matmul_peak(bench)
    bench.say("gpt: %s %d^3 matmul: %.4g TFLOP/s (median of %s)" % (peak["dtype"], peak["n"], peak["median_tflops"],
                                                                     ", ".join("%.4g" % r for r in peak["tflops"])))
    card = torch.cuda.get_device_name(bench.device) if bench.cuda else ""
    out["card_peak_tflops"], out["card_peak_key"] = card_bf16_peak(card)
    bench.say("gpt: %s: bf16 dense peak %s TFLOP/s (datasheet)" % (card or "CPU", out["card_peak_tflops"]))
    path = os.path.join(bench.work, "tokens.h5")
    micro = gpt_micro_batch(bench)
    base = common_overrides(bench) + gpt["megabatch"] + [
        "data.path=" + path, "train.global_batch=%d" % gpt["global_batch"], "train.micro_batch=%d" % micro]
    cfg = print_config(bench, GPT_CONFIG, base)
    out["config"] = {k: v for k, v in cfg.items() if k.startswith(("model.", "train.", "optim.", "data.context"))}
    context = int(cfg["data.context"])
    window = gpt["steps"]
    items = int(gpt["global_batch"] * window * (1 + bench.args.repeats) / 0.99 * 1.5) + 64
    write_tokens(path, items * context + 1, gpt["data_vocab"])
    bench.results.setdefault("files", {})["tokens"] = {"path": path, "tokens": items * context + 1,
                                                       "vocab": gpt["data_vocab"], "bytes": os.path.getsize(path)}
    case = {"global_batch": gpt["global_batch"], "micro_batch": micro, "context": context,
            "window_steps": window, "variants": {}}
    out["cases"]["gpt2"] = case
    try:
        bench.say("gpt: megabatch")
        case["variants"]["megabatch"] = megabatch_train(bench, "gpt-single", GPT_CONFIG, base, window)
    except (RuntimeError, Skipped) as e:
        case["variants"]["megabatch"] = {"error": str(e)}
    with h5py.File(path, "r") as f:
        tokens = torch.from_numpy(f["tokens"][()].astype(np.int64)).to(bench.device)
    for variant in ("eager", "compile"):
        if variant == "compile" and not compile_available():
            case["variants"][variant] = {"error": "n/a (torch < 2.0)"}
            continue
        if bench.left() < 45:
            case["variants"][variant] = {"error": "skipped: out of --budget-s"}
            continue
        bench.say("gpt: python %s" % variant)
        try:
            case["variants"][variant] = gpt_python(bench, variant, cfg, tokens)
        except Exception as e:  # noqa: BLE001
            case["variants"][variant] = {"error": "%s: %s" % (type(e).__name__, e)}
        bench.free_memory()
    del tokens
    parameters = next((v["parameters"] for v in case["variants"].values() if v.get("parameters")), None)
    if parameters:
        flops = gpt_flops_per_token(cfg, parameters)
        out["flops_per_token"] = flops
        out["flops_formula"] = "6 * (N - context * width) + 12 * layers * width * context (nanoGPT estimate_mfu)"
        for v in case["variants"].values():
            if "median_tokens_per_s" in v:
                v["model_tflops"] = v["median_tokens_per_s"] * flops / 1e12
                v["mfu_measured"] = v["model_tflops"] / peak["median_tflops"]
                if out["card_peak_tflops"]:
                    v["mfu"] = v["model_tflops"] / out["card_peak_tflops"]
    summarise_case(case, "tokens")
    report_case(bench, "gpt", case, "tokens")
    bench.save()


# --- section 3: data --------------------------------------------------------------------

def evict_from_page_cache(path):
    """posix_fadvise(DONTNEED): drops the file's clean pages (no root needed; best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return True
    except (OSError, AttributeError):
        return False


def read_file_rate(path):
    """Reading the file into one reused 64 MiB buffer (what `cat > /dev/null` does): GB/s."""
    buffer = bytearray(64 << 20)
    view = memoryview(buffer)
    start = time.perf_counter()
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            total += n
    return total / (time.perf_counter() - start) / 1e9


def data_check(bench, cfg_overrides, label, cold):
    series = bench.results["files"]["series"]
    report = os.path.join(bench.work, "report-%s.json" % label)
    evicted = evict_from_page_cache(series["path"]) if cold else None
    args = ["data", "check", "--config", LSTM_CONFIG, "--report", report] + cfg_overrides
    record = run_megabatch(bench, args, os.path.join(bench.work, "unused"), label)
    with open(report) as f:
        rank = json.load(f)["ranks"][0]
    loaded = rank["bytes_read"] + rank["bytes_mapped"]
    load_s = rank["read_seconds"]
    check_s = rank["check_seconds"]
    return {"cold": cold, "evicted": evicted, "wall_s": record["wall_s"], "load_s": load_s, "check_s": check_s,
            "validate_s": rank["validate_seconds"], "bytes_loaded": loaded, "bytes_read": rank["bytes_read"],
            "bytes_mapped": rank["bytes_mapped"], "resident_bytes": rank["resident_bytes"],
            "gbps_loaded": loaded / load_s / 1e9 if load_s > 0 else None,
            "gbps_file": series["bytes"] / load_s / 1e9 if load_s > 0 else None,
            "gbps_file_with_check": series["bytes"] / (load_s + check_s) / 1e9 if load_s + check_s > 0 else None,
            "load_line": record["load_line"], "command": record["command"]}


def section_data(bench):
    lstm = bench.sizes["lstm"]
    series = series_file(bench)
    out = {"file_bytes": series["bytes"], "file": series}
    bench.results["sections"]["data"] = out
    base = common_overrides(bench) + lstm["megabatch"] + ["data.path=" + series["path"]]
    out["file_read_gbps"] = [read_file_rate(series["path"]) for _ in range(bench.args.repeats)]
    bench.say("data: reading the %.2f GB file (64 MiB buffer, warm): %s GB/s" % (
        series["bytes"] / 1e9, ", ".join("%.2f" % r for r in out["file_read_gbps"])))
    out["check_warm"], out["check_cold"], out["first_step"] = [], [], []
    try:
        out["check_cold"].append(data_check(bench, base, "cold", True))
        read_file_rate(series["path"])  # warm again
        for r in range(bench.args.repeats):
            out["check_warm"].append(data_check(bench, base, "warm-%d" % r, False))
        bench.say("data: megabatch load, GB/s of the file: warm %s, after eviction %s" % (
            ", ".join("%.2f" % c["gbps_file"] for c in out["check_warm"]),
            ", ".join("%.2f" % c["gbps_file"] for c in out["check_cold"])))
        batch = lstm["batches"][-1]
        for r in range(bench.args.repeats):
            run_dir = os.path.join(bench.work, "run-first-step-%d" % r)
            args = (["train", "--config", LSTM_CONFIG] + base +
                    ["run.dir=" + run_dir, "train.global_batch=%d" % batch, "train.max_steps=1", "run.log_every=1"])
            rec = run_megabatch(bench, args, run_dir, "first-step-%d" % r)
            out["first_step"].append({"since_launch_s": rec["since_launch_s"], "wall_s": rec["wall_s"],
                                      "batch": batch, "command": rec["command"], "load_line": rec["load_line"]})
        bench.say("data: launch to end of step 1: %s s" % ", ".join(
            "%.2f" % f["since_launch_s"].get("step_1_done", float("nan")) for f in out["first_step"]))
    except (RuntimeError, Skipped) as e:
        out["error"] = str(e)
    for key, values in (("check_warm", out["check_warm"]), ("check_cold", out["check_cold"])):
        if values:
            out[key + "_median"] = {k: median([v[k] for v in values if v.get(k) is not None])
                                    for k in ("load_s", "check_s", "gbps_file", "gbps_loaded", "gbps_file_with_check",
                                              "wall_s")}
    if out["first_step"]:
        events = sorted({k for f in out["first_step"] for k in f["since_launch_s"]})
        out["first_step_median"] = {k: median([f["since_launch_s"][k] for f in out["first_step"]
                                               if k in f["since_launch_s"]]) for k in events}
    out["file_read_gbps_median"] = median(out["file_read_gbps"])
    lstm_section = bench.results["sections"].get("lstm", {})
    if "h5py_read_to_device" in lstm_section:
        h = lstm_section["h5py_read_to_device"]
        out["h5py_read_to_device_gbps"] = h["bytes"] / h["read_and_copy_s"] / 1e9
    bench.save()


# --- section 4: NCCL world of one -----------------------------------------------------------

def section_nccl(bench):
    out = {"cases": {}}
    bench.results["sections"]["nccl"] = out
    backend = "nccl" if bench.cuda else "mpi"
    out["backend"] = backend
    out["baseline_backend"] = "single"
    if not bench.cuda:
        out["note"] = ("CPU run: NCCL needs CUDA, so dist.backend=mpi stands in; at a world of one megabatch "
                       "makes it the identity too, so this checks the plumbing only")
    lstm, gpt = bench.sizes["lstm"], bench.sizes["gpt"]
    series = series_file(bench)
    batch = lstm["batches"][0]
    tokens = os.path.join(bench.work, "tokens.h5")
    cases = [("lstm-%d" % batch, LSTM_CONFIG, lstm["megabatch"] + ["data.path=" + series["path"],
                                                                 "train.global_batch=%d" % batch],
              lstm["steps"][batch])]
    if os.path.exists(tokens):
        cases.append(("gpt", GPT_CONFIG, gpt["megabatch"] + [
            "data.path=" + tokens, "train.global_batch=%d" % gpt["global_batch"],
            "train.micro_batch=%d" % gpt_micro_batch(bench)], gpt["steps"]))
    else:
        out["gpt"] = "not run: the gpt section makes its tokens file (use --only gpt,nccl)"
    for name, config, extra, window in cases:
        case = {}
        out["cases"][name] = case
        for side in ("single", backend):
            # A fresh pair, run back to back: a 2% question needs both sides at the same moment.
            key = "%s-%s-pair" % (name, side)
            bench.say("nccl: %s, dist.backend=%s" % (name, side))
            try:
                rec = megabatch_train(bench, key, config, common_overrides(bench, side) + extra, window)
                case[side] = {k: rec[k] for k in ("median_samples_per_s", "samples_per_s", "median_step_s", "step_s",
                                                  "reducer_backend", "command", "wall_s") if k in rec}
            except (RuntimeError, Skipped) as e:
                case[side] = {"error": str(e)}
        if "median_step_s" in case.get("single", {}) and "median_step_s" in case.get(backend, {}):
            case["overhead"] = case[backend]["median_step_s"] / case["single"]["median_step_s"] - 1
            bench.say("nccl: %s: %s step %.3f ms vs single %.3f ms: overhead %+.2f%%" % (
                name, backend, 1e3 * case[backend]["median_step_s"], 1e3 * case["single"]["median_step_s"],
                100 * case["overhead"]))
    bench.save()


# --- markdown -------------------------------------------------------------------------------

def fmt(value, spec="%.0f"):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return spec % value


def render_markdown(res):
    env = res.get("environment", {})
    sec = res.get("sections", {})
    lines = ["## GPU: megabatch against PyTorch on the same GPU (issue 8)", ""]
    if res.get("quick"):
        lines += ["**--quick run: tiny shapes, for checking the script only; not results.**", ""]
    lines += ["Produced by `bench/gpu/gpu_bench.py` in one call (%s, %.0f s in all):" % (res.get("started", "?"),
                                                                                           res.get("elapsed_s", 0)),
              "", "```", res.get("command", "?"), "```", ""]
    if env:
        lines += ["Machine: %s; %s GiB; driver %s; CUDA %s, cuDNN %s, NCCL %s; torch %s (Python %s); %s (%s cores); "
                  "megabatch `%s` at %s."
                  % (env.get("gpu", "CPU only"), fmt(env.get("gpu_memory_gib"), "%.0f"), env.get("driver", "-"),
                     env.get("cuda", "-"), env.get("cudnn", "-"), env.get("nccl", "-"), env.get("torch"),
                     env.get("python"), env.get("cpu"), env.get("host_cores"), env.get("megabatch"),
                     env.get("git_commit")), ""]
    lines += ["Every side runs a warm-up window of W steps, then %d windows of W steps, each ending with a device "
              "sync; the tables give medians over the windows (per-window values in gpu_bench.json). Ratios are "
              "megabatch / the variant (> 1: megabatch is faster)." % res.get("repeats", 0), ""]
    lstm = sec.get("lstm")
    if lstm:
        shape = lstm.get("shape", {})
        lines += ["### LSTM, the seed's shape", "",
                  "One series stream of %s float32 features, window %s, LSTM hidden %s, %s layers, head %s, MSE, "
                  "AdamW, clip %s, precision %s (configs/bench-lstm-seed.yaml). Python: the same model "
                  "(tests/model/test_parity.py's module), optimiser, schedule and clip."
                  % (shape.get("features"), shape.get("window"), shape.get("hidden"),
                     lstm.get("config", {}).get("model.layers"), lstm.get("config", {}).get("model.head_hidden"),
                     lstm.get("config", {}).get("train.grad_clip"), lstm.get("config", {}).get("train.precision")), "",
                  "| batch | side | samples/s (median) | per window | megabatch / side | params | notes |",
                  "|---|---|---|---|---|---|---|"]
        names = {"megabatch": "megabatch", "h5py": "(a) PyTorch eager, h5py + DataLoader",
                 "resident": "(b) PyTorch eager, data on the device",
                 "compile": "(c) PyTorch torch.compile, data on the device"}
        for batch, case in lstm.get("cases", {}).items():
            for name, v in case["variants"].items():
                note = v.get("error", "")
                if "loader" in v:
                    note = "%d workers, prefetch %s, pin_memory %s" % (v["loader"]["num_workers"],
                                                                       v["loader"]["prefetch_factor"],
                                                                       v["loader"]["pin_memory"])
                if name == "compile" and "warmup_overhead_s" in v:
                    note = "compile %.1f s (not in samples/s)" % v["warmup_overhead_s"]
                if name == "megabatch" and "median_data_s" in v:
                    note = megabatch_note(v)
                ratio = case.get("ratios", {}).get(name)
                lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    batch, names.get(name, name), fmt(v.get("median_samples_per_s")),
                    ", ".join("%.0f" % s for s in v.get("samples_per_s", [])),
                    "**%.2f**" % ratio if ratio else "-", fmt(v.get("parameters"), "%d"), note))
        lines.append("")
        for batch, case in lstm.get("cases", {}).items():
            a = case.get("ratios", {}).get("h5py")
            best = case.get("ratio_vs_best")
            lines.append("- batch %s: **%s x** the h5py pipeline (target >= 5: %s); **%s x** the best Python variant "
                         "(%s; target >= 1.0: %s)." % (
                             batch, fmt(a, "%.2f"), verdict(a, 5.0), fmt(best, "%.2f"), case.get("best_python"),
                             verdict(best, 1.0)))
        lines.append("")
    gpt = sec.get("gpt")
    if gpt:
        peak = gpt.get("matmul_peak", {})
        case = gpt.get("cases", {}).get("gpt2", {})
        cfg = gpt.get("config", {})
        eager = case.get("variants", {}).get("eager", {})
        lines += ["### GPT-2 small", "",
                  "configs/gpt2-small.yaml: width %s, %s layers, %s heads, context %s, vocabulary %s, tied embeddings, "
                  "biases %s, precision %s, clip %s; global batch %s (micro-batch %s, %s micro-steps) x %s tokens; "
                  "random tokens. Python: the same model and initialisation, attention %s, %s, the same lr schedule."
                  % (cfg.get("model.hidden"), cfg.get("model.layers"), cfg.get("model.heads"), cfg.get("data.context"),
                     cfg.get("model.vocab_size"), cfg.get("model.bias"), cfg.get("train.precision"),
                     cfg.get("train.grad_clip"), case.get("global_batch"), case.get("micro_batch"),
                     (case.get("global_batch") or 0) // max(1, case.get("micro_batch") or 1), case.get("context"),
                     eager.get("attention", "-"), eager.get("optimizer", "-")), "",
                  "MFU = tokens/s x %s FLOP per token (%s) / the card's bf16 dense peak, %s TFLOP/s (datasheet, "
                  "entry %s). MFU (measured) divides by the matmul rate measured on this card instead: %s^3 %s "
                  "matmul, **%s TFLOP/s** (median of %s)."
                  % (fmt(gpt.get("flops_per_token"), "%d"), gpt.get("flops_formula", "-"),
                     fmt(gpt.get("card_peak_tflops"), "%.1f"), gpt.get("card_peak_key") or "none: card not listed",
                     peak.get("n"), peak.get("dtype"), fmt(peak.get("median_tflops"), "%.4g"),
                     ", ".join("%.4g" % r for r in peak.get("tflops", []))), "",
                  "| side | tokens/s (median) | per window | step ms | model TFLOP/s | MFU | MFU (measured) | "
                  "megabatch / side | params | notes |", "|---|---|---|---|---|---|---|---|---|---|"]
        names = {"megabatch": "megabatch", "eager": "PyTorch eager",
                 "compile": "PyTorch torch.compile"}
        for name, v in case.get("variants", {}).items():
            note = v.get("error", "")
            if name == "compile" and "warmup_overhead_s" in v:
                note = "compile %.1f s (not in tokens/s)" % v["warmup_overhead_s"]
            if name == "megabatch" and "median_data_s" in v:
                note = megabatch_note(v)
            if "max_memory_allocated_gib" in v:
                note += "; peak %.1f GiB" % v["max_memory_allocated_gib"]
            ratio = case.get("ratios", {}).get(name)
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                names.get(name, name), fmt(v.get("median_tokens_per_s")),
                ", ".join("%.0f" % s for s in v.get("tokens_per_s", [])),
                fmt(1e3 * v["median_step_s"] if "median_step_s" in v else None, "%.1f"),
                fmt(v.get("model_tflops"), "%.4g"), fmt(100 * v["mfu"] if "mfu" in v else None, "%.1f%%"),
                fmt(100 * v["mfu_measured"] if "mfu_measured" in v else None, "%.1f%%"),
                "**%.2f**" % ratio if ratio else "-", fmt(v.get("parameters"), "%d"), note))
        mb = case.get("variants", {}).get("megabatch", {})
        rc = case.get("ratios", {}).get("compile")
        lines += ["", "- megabatch MFU **%s** (target >= 40%%: %s); **%s x** torch.compile (target >= 0.9: %s)." % (
            fmt(100 * mb["mfu"] if "mfu" in mb else None, "%.1f%%"), verdict(mb.get("mfu"), 0.40),
            fmt(rc, "%.2f"), verdict(rc, 0.9)), ""]
    data = sec.get("data")
    if data:
        warm, cold, first = data.get("check_warm_median", {}), data.get("check_cold_median", {}), data.get(
            "first_step_median", {})
        lines += ["### Data: load and time to the first step", "",
                  "The LSTM section's series file, %s GB. `megabatch data check --report` (residency: device on a GPU): "
                  "*load* is the time to make the rows resident, *check* the scan of every value for NaN/inf."
                  % fmt(data.get("file_bytes", 0) / 1e9, "%.2f"), "",
                  "| what | seconds | GB/s of the file |", "|---|---|---|",
                  "| reading the file into a 64 MiB buffer (`cat`), warm page cache | - | %s |"
                  % fmt(data.get("file_read_gbps_median"), "%.2f"),
                  "| megabatch load, warm page cache | %s | **%s** |" % (fmt(warm.get("load_s"), "%.3f"),
                                                                       fmt(warm.get("gbps_file"), "%.2f")),
                  "| megabatch load + value check, warm | %s | %s |" % (
                      fmt(warm.get("load_s", 0) + warm.get("check_s", 0) if warm else None, "%.3f"),
                      fmt(warm.get("gbps_file_with_check"), "%.2f")),
                  "| megabatch load after posix_fadvise(DONTNEED) of the file (cold, best effort) | %s | %s |" % (
                      fmt(cold.get("load_s"), "%.3f"), fmt(cold.get("gbps_file"), "%.2f")),
                  "| reference: h5py read of the values + copy to the device (Python, LSTM section) | - | %s |"
                  % fmt(data.get("h5py_read_to_device_gbps"), "%.2f"), "",
                  "Time from launch of `megabatch train` (batch %s, warm cache) to ... (median of %d; from its log "
                  "timestamps): first log line %s s, data resident %s s, training loop starts %s s, **end of step 1 "
                  "%s s**; whole process (1 step, an eval batch, a checkpoint) %s s." % (
                      (data.get("first_step") or [{}])[0].get("batch", "-"), len(data.get("first_step", [])),
                      fmt(first.get("first_log_line"), "%.2f"), fmt(first.get("data_loaded"), "%.2f"),
                      fmt(first.get("training_starts"), "%.2f"), fmt(first.get("step_1_done"), "%.2f"),
                      fmt(median([f["wall_s"] for f in data.get("first_step", [])]), "%.2f")), ""]
        if data.get("error"):
            lines += ["Error: %s" % data["error"], ""]
    nccl = sec.get("nccl")
    if nccl:
        lines += ["### NCCL with a world of one", "",
                  "`megabatch train` on one GPU, two runs back to back: dist.backend=%s against dist.backend=single (no communicator; "
                  "every collective is the identity). %s" % (nccl.get("backend"), nccl.get("note", "")), "",
                  "| case | single: step ms (per window) | %s: step ms (per window) | gradients reduced over | "
                  "overhead (target <= 2%%) |" % nccl.get("backend"), "|---|---|---|---|---|"]
        for name, case in nccl.get("cases", {}).items():
            s, n = case.get("single", {}), case.get(nccl.get("backend"), {})
            over = case.get("overhead")
            per_window = lambda side: ", ".join("%.2f" % (1e3 * t) for t in side.get("step_s", []))  # noqa: E731
            lines.append("| %s | %s (%s) | %s (%s) | %s / %s | **%s** %s |" % (
                name, fmt(1e3 * s["median_step_s"] if "median_step_s" in s else None, "%.2f"), per_window(s),
                fmt(1e3 * n["median_step_s"] if "median_step_s" in n else None, "%.2f"), per_window(n),
                s.get("reducer_backend", "-"), n.get("reducer_backend", "-"),
                fmt(100 * over if over is not None else None, "%+.2f%%"),
                "(%s)" % verdict(-over if over is not None else None, -0.02) if over is not None else
                n.get("error", s.get("error", ""))))
        if nccl.get("gpt"):
            lines.append("\ngpt: %s" % nccl["gpt"])
        lines.append("")
    lines += ["Commands megabatch ran (temporary paths):", "", "```"] + res.get("megabatch_commands", []) + ["```", ""]
    return "\n".join(lines)


def megabatch_note(v):
    """Its own per-step split, from metrics.jsonl: batch gather and gradient wait."""
    return "per step: data %.2f ms, comm wait %.2f ms (its metrics)" % (1e3 * v["median_data_s"],
                                                                        1e3 * v["median_comm_s"])


def verdict(value, target):
    if value is None:
        return "not measured"
    return "met" if value >= target else "**missed**"


# --- main -----------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the megabatch binary (a CUDA build for --device cuda)")
    p.add_argument("--out", required=True, help="output directory: gpu_bench.json, gpu_bench.md, gpu_bench.log")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny shapes: checks the script end to end (CPU)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma list of " + ",".join(SECTIONS))
    p.add_argument("--repeats", type=int, default=3, help="timed windows per side (after one warm-up window)")
    p.add_argument("--gpt-micro", type=int, default=0, help="gpt: the micro-batch (0: by the card's memory)")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--data-gb", type=float, default=None, help="size of the series file (default 2.0, quick 0.02)")
    p.add_argument("--workers", type=int, default=-1, help="DataLoader workers of variant (a); default min(8, cores)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads of both sides; 0 = their defaults")
    p.add_argument("--budget-s", type=float, default=540, help="skip what would start after this many seconds")
    p.add_argument("--timeout-s", type=float, default=300, help="limit of one megabatch run")
    p.add_argument("--workdir", default="", help="where data files and runs go (default: a new temporary dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    args.bin = os.path.abspath(args.bin)
    if args.data_gb is None:
        args.data_gb = QUICK["data_gb"] if args.quick else FULL["data_gb"]
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        p.error("unknown section(s) %s; choose from %s" % (", ".join(sorted(unknown)), ",".join(SECTIONS)))
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch.cuda.is_available() is False")
    if not os.access(args.bin, os.X_OK):
        p.error("--bin %s is not an executable" % args.bin)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    bench = Bench(args)
    if bench.cuda:
        # What megabatch's enableFastCudaMath() sets (src/train/precision/Precision.cpp).
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    bench.results["environment"] = environment(bench)
    bench.say("environment: %s" % json.dumps(bench.results["environment"]))
    bench.say("work directory %s; sections %s" % (bench.work, ",".join(only)))
    bench.save()
    try:
        runs = {"lstm": section_lstm, "gpt": section_gpt, "data": section_data, "nccl": section_nccl}
        for name in only:  # in the order given: what matters most first, in case time runs out
            run = runs[name]
            if bench.left() < 20:
                bench.results["sections"][name] = {"error": "skipped: out of --budget-s"}
                bench.say("%s: skipped (out of --budget-s)" % name)
                continue
            started = time.monotonic()
            bench.say("=== %s" % name)
            try:
                run(bench)
            except Exception as e:  # noqa: BLE001  (report it, keep the other sections)
                bench.results["sections"].setdefault(name, {})["error"] = "%s: %s" % (type(e).__name__, e)
                bench.say("%s failed: %s: %s" % (name, type(e).__name__, e))
            bench.results["sections"][name]["section_s"] = time.monotonic() - started
            bench.save()
    finally:
        bench.save()
        if not args.keep and not args.workdir:
            shutil.rmtree(bench.work, ignore_errors=True)
    check_parameters(bench)
    bench.save()
    bench.say("wrote %s and %s" % (os.path.join(args.out, "gpu_bench.json"), os.path.join(args.out, "gpu_bench.md")))
    print(render_markdown(bench.results), flush=True)


def check_parameters(bench):
    """Both sides of every case must build models with the same parameter count."""
    problems = []
    for name in ("lstm", "gpt"):
        for case_name, case in bench.results["sections"].get(name, {}).get("cases", {}).items():
            counts = {side: v["parameters"] for side, v in case["variants"].items() if v.get("parameters")}
            case["parameters_equal"] = len(set(counts.values())) <= 1
            if not case["parameters_equal"]:
                problems.append("%s %s: %s" % (name, case_name, counts))
    bench.results["parameter_mismatches"] = problems
    for line in problems:
        bench.say("PARAMETER COUNT MISMATCH: " + line)


if __name__ == "__main__":
    main()
