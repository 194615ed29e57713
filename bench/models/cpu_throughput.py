"""CPU training throughput: megabatch (1 rank) against the same model in PyTorch (Python).

Side by side in one run, alternating, on the same data files, model, batch, optimiser and
thread count:
  - demo LSTM   (configs/demo.yaml: streams m1:60, m5:24, h1:12, hidden 32, batch 128)
  - tiny GPT    (configs/arith-gpt.yaml: width 64, 2 layers, 4 heads, context 32, batch 128)
  - multi-TF LSTM (configs/lstm-multitf.yaml's shape: 5 streams of 128 features, windows
                480/288/192/96/48, hidden 128, 2 layers, head 256, batch 16; dropout 0 and MSE
                on both sides; --only multitf, it is not in the default set: about 1 s a step)
--precision sets what both sides run in (docs/operations.md, "Precision on the CPU"):
  fp32 (default)  megabatch train.precision=fp32 against PyTorch fp32 eager;
  auto            megabatch train.precision=auto (bf16 where this CPU measures it faster)
                  against PyTorch's default, fp32 eager;
  bf16            megabatch train.precision=bf16 against PyTorch eager under
                  torch.autocast("cpu", torch.bfloat16), the forward and loss inside it.
Sides (each repeat runs every side once, as its own process, in a rotating order):
  mb-1.13       megabatch built against Debian 12's LibTorch 1.13 (BUILD_DIR)
  eager-1.13    PyTorch 1.13 eager (/usr/bin/python3 of this machine)
and with --torch2 BUILD_TORCH2_DIR, inside the Debian 13 root of scripts/trixie-root.sh:
  mb-2.6        megabatch built against LibTorch 2.6 (scripts/build-torch2.sh)
  eager-2.6     PyTorch 2.6 eager
  compile-2.6   PyTorch 2.6 with torch.compile (inductor, default mode): the forward and loss,
                and the gradient clipping + AdamW update, each compiled
The Python baseline is written the way a competent PyTorch user would: the data already in
memory as tensors, windows gathered by index arithmetic (no DataLoader, no disk in the loop),
the reference modules of tests/model/test_parity.py (the very modules whose outputs and
gradients megabatch matches to 1e-5), AdamW with its multi-tensor kernel, fp32, and
torch.set_num_threads(threads). On PyTorch >= 2.0 the GPT's attention is the fused
F.scaled_dot_product_attention (as in nanoGPT), as megabatch uses on LibTorch 2.x. Every side
times the same number of steps after warm-up (which includes compilation); medians of the
repeats are reported, and ratios as medians of the per-repeat ratios (> 1 means megabatch is
faster). The run prints and records the load average, thread settings and versions, is marked
LOADED when the load average went above 1.5, and writes its raw JSON to bench/results/
(bench/benchlib.py). The Python sides run with
the glibc malloc policy megabatch sets for itself (keep freed memory: PYTHON_MALLOC_ENV; about
4,000 page faults per step less; --default-malloc leaves glibc's defaults), and the compile
side with Debian's libsleef preloaded, without which inductor's vectorised kernels do not load
(see child_environment); it refuses to run when inductor would emit scalar code.

usage: /usr/bin/python3 bench/models/cpu_throughput.py BUILD_DIR [--torch2 BUILD_TORCH2_DIR]
           [--repeats 5] [--steps 200] [--warmup 20] [--threads 1] [--only lstm|gpt]
           [--sides mb-2.6,compile-2.6,...] [--precision fp32|auto|bf16] [--default-malloc]
           [--out results.json]
"""
import argparse
import ctypes.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LSTM_STREAMS = {"m1": 60, "m5": 24, "h1": 12}
MULTITF_STREAMS = {"m1": 480, "m5": 288, "m15": 192, "h1": 96, "h4": 48}
BATCHES = {"lstm": 128, "gpt": 128, "multitf": 16}
MODELS = {  # name: (config, data file name)
    "lstm": ("demo.yaml", "demo.h5"),
    "gpt": ("arith-gpt.yaml", "arith.h5"),
    "multitf": ("lstm-multitf.yaml", "multitf.h5"),
}
DEFAULT_MODELS = ["lstm", "gpt"]
# What the megabatch side changes in the config so that both sides run the same model.
MB_OVERRIDES = {"multitf": ["model.dropout=0", "model.loss=mse", "train.global_batch=16",
                            "train.eval_batches=1"]}
LABELS = {"lstm": "demo LSTM", "gpt": "tiny GPT", "multitf": "multi-TF LSTM"}
SIDES = ["mb-1.13", "eager-1.13", "mb-2.6", "eager-2.6", "compile-2.6"]
# megabatch keeps freed host memory for reuse (Note [Keeping freed host memory] in
# src/common/HostAllocator.h); the Python sides get the same glibc policy unless --default-malloc.
PYTHON_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


# --- Python baselines: one training step per call (run by the child process) ----------------

def torch_modules():
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
    import test_parity as reference
    return torch, reference


def make_update(torch, model, opt, compiled):
    """Gradient clipping and the AdamW step; compiled as one function for torch.compile."""
    params = list(model.parameters())

    def update():
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return torch.compile(update) if compiled else update


def autocast_if(torch, precision, fn):
    """`fn` under torch.autocast("cpu", torch.bfloat16) when precision is bf16 (forward and
    loss; backward and the update outside, as PyTorch's AMP recipe has it)."""
    if precision != "bf16":
        return fn

    def wrapped(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return fn(*args)
    return wrapped


def lstm_baseline(path, threads, compiled, precision="fp32", multitf=False):
    import h5py
    import numpy as np
    torch, reference = torch_modules()
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    streams = MULTITF_STREAMS if multitf else LSTM_STREAMS
    batch = BATCHES["multitf" if multitf else "lstm"]
    with h5py.File(path, "r") as f:
        series = {k: torch.from_numpy(f["series/%s/values" % k][()].astype("f4")) for k in streams}
        ends = {k: torch.from_numpy(f["samples/end/%s" % k][()].astype("i8")) for k in streams}
        targets = torch.from_numpy(f["targets"][()].astype("f4"))
    first = max(int(np.searchsorted(ends[k].numpy(), streams[k] - 1)) for k in streams)
    n = int((len(targets) - first) * 0.8)
    offsets = {k: torch.arange(-w + 1, 1) for k, w in streams.items()}
    features = [series[k].shape[1] for k in streams]
    shape = (128, 2, 256) if multitf else (32, 1, 32)  # hidden, layers, head
    model = reference.MultiStreamLstm(list(streams), features, shape[0], shape[1], shape[2], 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=True)

    def forward_loss(xs, y):
        return F.mse_loss(model(xs).squeeze(1).float(), y)
    loss_fn = autocast_if(torch, precision, torch.compile(forward_loss) if compiled else forward_loss)
    update = make_update(torch, model, opt, compiled)
    order = torch.randperm(n) + first
    position = [0]

    def step():
        if position[0] + batch > n:
            position[0] = 0
        idx = order[position[0]:position[0] + batch]
        position[0] += batch
        xs = [series[k][ends[k][idx].unsqueeze(1) + offsets[k]] for k in streams]
        loss = loss_fn(xs, targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()
    return step


def use_fused_attention(torch, reference, model):
    """nanoGPT's attention on PyTorch >= 2.0: F.scaled_dot_product_attention, causal."""
    import torch.nn.functional as F

    class FusedAttention(reference.CausalSelfAttention):
        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    if hasattr(F, "scaled_dot_product_attention"):
        for block in model.transformer.h:
            block.attn.__class__ = FusedAttention  # same parameters, fused forward


def gpt_baseline(path, threads, compiled, precision="fp32"):
    import h5py
    torch, reference = torch_modules()
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    context, width, layers, heads = 32, 64, 2, 4
    with h5py.File(path, "r") as f:
        tokens = torch.from_numpy(f["tokens"][()].astype("i8"))
    n = int(((len(tokens) - 1) // context) * 0.9)
    model = reference.Gpt(128, context, width, layers, heads, True)
    use_fused_attention(torch, reference, model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=5e-3, betas=(0.9, 0.99), foreach=True)

    def forward_loss(items):
        logits = model(items[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), items[:, 1:].reshape(-1))
    loss_fn = autocast_if(torch, precision, torch.compile(forward_loss) if compiled else forward_loss)
    batch = BATCHES["gpt"]
    update = make_update(torch, model, opt, compiled)
    order = torch.randperm(n)
    span = torch.arange(context + 1)
    position = [0]

    def step():
        if position[0] + batch > n:
            position[0] = 0
        items = tokens[(order[position[0]:position[0] + batch] * context).unsqueeze(1) + span]
        position[0] += batch
        loss = loss_fn(items)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()
    return step


def time_python(model, path, threads, steps, warmup, compiled, precision):
    """Seconds per step, wall and CPU, over `steps` steps after `warmup` (which compiles)."""
    import torch
    start = time.perf_counter()
    if model == "gpt":
        step = gpt_baseline(path, threads, compiled, precision)
    else:
        step = lstm_baseline(path, threads, compiled, precision, multitf=model == "multitf")
    for _ in range(warmup):
        step()
    setup = time.perf_counter() - start
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = (time.perf_counter() - start) / steps, (time.process_time() - start_cpu) / steps
    benchlib.profile_steps(step)
    return {"wall_s": wall, "cpu_s": cpu, "setup_s": setup, "torch": torch.__version__}


# --- megabatch --------------------------------------------------------------------------

def child_cpu_seconds(cmd, env):
    """Runs cmd; returns the CPU seconds (user + system) it and its threads used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          universal_newlines=True)
    if done.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s" % (" ".join(cmd), done.returncode, done.stderr[-3000:]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_megabatch(binary, model, path, run_dir, threads, steps, warmup, precision):
    """Seconds per step over the steps after warm-up, from metrics.jsonl: log windows of
    `warmup` steps each (one host sync per window, as in a real run), the first one dropped."""
    config = os.path.join(ROOT, "configs", MODELS[model][0])
    total = warmup + steps
    cmd = [binary, "train", "--config", config, "data.path=" + path, "run.dir=" + run_dir, "run.resume=never",
           "train.max_steps=%d" % total, "train.eval_every=0", "run.log_every=%d" % warmup, "run.checkpoint_every=0",
           "train.threads=%d" % threads, "train.precision=" + precision, "train.grad_clip=1.0",
           "run.progress=lines"] + MB_OVERRIDES.get(model, [])
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
    version = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, universal_newlines=True).stdout
    with open(os.path.join(run_dir, "train.log")) as f:
        chosen = [line.split("info: ", 1)[1].strip() for line in f if "info: train.precision = " in line]
    return {"wall_s": seconds / counted, "cpu_s": cpu, "version": version.strip(),
            "precision_line": chosen[-1] if chosen else ""}


def child_environment(args):
    """What a Python side's process needs before it starts (glibc and the loader read it then)."""
    env = {}
    if not args.default_malloc:
        env.update(PYTHON_MALLOC_ENV)
    if args.measure.startswith("compile-"):
        # Debian's torch links the system libsleef, but inductor does not link it into its
        # kernels, so vectorised kernels fail to load and inductor falls back to scalar code
        # (cpu_vec_isa: INVALID_VEC_ISA). Preloading libsleef makes its symbols global.
        sleef = ctypes.util.find_library("sleef")
        if sleef:
            env["LD_PRELOAD"] = sleef
    return env


def check_vectorised_inductor():
    import torch._inductor.cpu_vec_isa as isa
    if not isa.valid_vec_isa_list():
        raise SystemExit("torch.compile would generate scalar C++ kernels here (no valid vector ISA: "
                         "is libsleef-dev installed, and does g++ compile ATen/cpu/vec?); refusing to time "
                         "a crippled baseline")


def measure(args):
    """Child mode: times one side once and prints its result as one JSON line."""
    if not args.measure.startswith("mb-"):
        env = child_environment(args)
        if any(os.environ.get(k) != v for k, v in env.items()):  # restart with it in place
            os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **env))
    # torch.compile: compile in this process (no worker pool), with a cache the repeats share.
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.path.dirname(args.run_dir), "inductor-cache")
    if args.measure.startswith("compile-"):
        check_vectorised_inductor()
    if args.measure.startswith("mb-"):
        result = time_megabatch(os.path.join(args.build, "megabatch"), args.only, args.data, args.run_dir,
                                args.threads, args.steps, args.warmup, args.precision)
    else:
        result = time_python(args.only, args.data, args.threads, args.steps, args.warmup,
                             args.measure.startswith("compile-"), args.precision)
    print("RESULT " + json.dumps(result), flush=True)


# --- the driver ----------------------------------------------------------------------------

def side_command(side, args, model, data, run_dir):
    in_root = side.endswith("-2.6")
    build = args.torch2 if in_root else args.build
    cmd = [sys.executable if not in_root else "/usr/bin/python3", os.path.abspath(__file__), build,
           "--measure", side, "--only", model, "--data", data, "--run-dir", run_dir,
           "--threads", str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--precision", args.precision]
    if args.default_malloc:
        cmd.append("--default-malloc")
    if in_root:
        cmd = ["bash", os.path.join(ROOT, "scripts", "trixie-root.sh"), "run"] + cmd
    return cmd


def run_side(side, args, model, data, run_dir):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    done = subprocess.run(side_command(side, args, model, data, run_dir), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit("side %s of %s failed (exit %d):\n%s" % (side, model, done.returncode, done.stdout[-4000:]))
    return json.loads(lines[-1][len("RESULT "):])


def make_data(binary, workdir, models):
    paths = {}
    for model in models:
        paths[model] = os.path.join(workdir, MODELS[model][1])
        what = {"lstm": ["synth-series"], "gpt": ["arith"],
                "multitf": ["synth-series", "--rows", "200000", "--features", "128", "--streams",
                            "m1:1,m5:5,m15:15,h1:60,h4:240"]}[model]
        subprocess.run([binary, "data"] + what + ["--out", paths[model]], check=True, stdout=subprocess.DEVNULL)
    return paths


def summarise(model, sides, runs, args):
    row = {"model": LABELS[model], "batch": BATCHES[model], "threads": args.threads, "steps": args.steps,
           "precision": args.precision, "sides": {}}
    for side in sides:
        wall = [1e3 * r["wall_s"] for r in runs[side]]
        cpu = [1e3 * r["cpu_s"] for r in runs[side]]
        row["sides"][side] = {"wall_ms": wall, "cpu_ms": cpu, "median_ms": statistics.median(wall),
                              "median_cpu_ms": statistics.median(cpu),
                              "samples_per_s": 1e3 * BATCHES[model] / statistics.median(wall),
                              "setup_s": [r.get("setup_s") for r in runs[side]],
                              "precision_line": runs[side][0].get("precision_line", ""),
                              "version": runs[side][0].get("torch") or runs[side][0].get("version")}
    # Ratios (> 1: megabatch faster) are medians of the per-repeat ratios: each repeat's
    # megabatch against the Python side(s) of that same repeat, which shared its load.
    wall = {s: row["sides"][s]["wall_ms"] for s in sides}
    cpu = {s: row["sides"][s]["cpu_ms"] for s in sides}
    pairs = [("mb-1.13", ["eager-1.13"]), ("mb-2.6", ["eager-2.6"]), ("mb-2.6", ["compile-2.6"]),
             ("mb-2.6", ["eager-2.6", "compile-2.6"])]
    row["ratios"], row["cpu_ratios"] = {}, {}
    for mine, theirs in pairs:
        if mine not in wall or any(t not in wall for t in theirs):
            continue
        name = "%s / %s" % (mine, theirs[0] if len(theirs) == 1 else "faster of " + ", ".join(theirs))
        for key, times in (("ratios", wall), ("cpu_ratios", cpu)):
            best = [min(times[t][i] for t in theirs) for i in range(len(times[mine]))]
            row[key][name] = benchlib.median_ratio(best, times[mine])
    return row


def print_tables(results, sides):
    print("\n| model | " + " | ".join(sides) + " |")
    print("|---|" + "---|" * len(sides))
    for r in results:
        cells = ["%.0f (%.1f ms, CPU %.1f ms)" % (r["sides"][s]["samples_per_s"], r["sides"][s]["median_ms"],
                                                  r["sides"][s]["median_cpu_ms"]) for s in sides]
        print("| %s | %s |" % (r["model"], " | ".join(cells)))
    print("\nsamples/s (median ms per step, median CPU ms per step); ratios: medians of the "
          "per-repeat ratios, > 1: megabatch faster")
    for r in results:
        for name, value in r["ratios"].items():
            print("%-10s %-46s wall %.2f  CPU %s" % (r["model"], name, value,
                                                     "%.2f" % r["cpu_ratios"][name] if name in r["cpu_ratios"] else "-"))
    for r in results:
        for s in sides:
            setup = [x for x in r["sides"][s]["setup_s"] if x is not None]
            if setup:
                print("%-10s %-12s start-up + warm-up (compilation included) %s s" % (
                    r["model"], s, ", ".join("%.1f" % x for x in setup)))
    for s in sides:
        print("%-12s %s" % (s, results[0]["sides"][s]["version"]))
    for r in results:
        for s in sides:
            if r["sides"][s]["precision_line"]:
                print("%-10s %-12s %s" % (r["model"], s, r["sides"][s]["precision_line"]))


def drive(args):
    sides = args.sides.split(",") if args.sides else [s for s in SIDES if args.torch2 or not s.endswith("-2.6")]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        raise SystemExit("unknown side(s) %s; choose from %s" % (",".join(unknown), ",".join(SIDES)))
    if any(s.endswith("-2.6") for s in sides) and not args.torch2:
        raise SystemExit("the -2.6 sides need --torch2 BUILD_TORCH2_DIR (scripts/build-torch2.sh)")
    args.build = os.path.abspath(args.build)
    args.torch2 = os.path.abspath(args.torch2) if args.torch2 else ""
    # The Debian 13 root sees the checkout, not this machine's /tmp: work under out/.
    os.makedirs(os.path.join(ROOT, "out"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="cpu-throughput-", dir=os.path.join(ROOT, "out"))
    binaries = {"mb-1.13": os.path.join(args.build, "megabatch")}
    host = benchlib.Host(args.threads, binaries=binaries,
                         extra_versions={"mb-2.6": "LibTorch 2.6 build in " + args.torch2} if args.torch2 else {})
    benchlib.check_repeats(args.repeats)
    models = [args.only] if args.only else DEFAULT_MODELS
    data = make_data(os.path.join(args.build, "megabatch"), workdir, models)
    results = []
    for model in models:
        runs = {s: [] for s in sides}
        for r in range(args.repeats):
            order = sides[r % len(sides):] + sides[:r % len(sides)]  # rotate: drift hits every side
            for side in order:
                run_dir = os.path.join(workdir, "run-%s-%s-%d" % (model, side, r))
                runs[side].append(run_side(side, args, model, data[model], run_dir))
            host.sample_load()
            print("%-9s repeat %d: " % (LABELS[model], r) +
                  ", ".join("%s %.2f ms" % (s, 1e3 * runs[s][-1]["wall_s"]) for s in sides) +
                  ", load %.2f" % benchlib.load_average()[0], flush=True)
        results.append(summarise(model, sides, runs, args))
    print_tables(results, sides)
    benchlib.finish("cpu_throughput", {"settings": {k: v for k, v in vars(args).items()}, "models": results},
                    host, args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", help="build folder of megabatch against LibTorch 1.13 (scripts/build.sh)")
    parser.add_argument("--torch2", default="", help="build folder against LibTorch 2.6 (scripts/build-torch2.sh)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="also the log window; divides --steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=list(MODELS), help="time one model only")
    parser.add_argument("--sides", default="", help="comma-separated subset of " + ",".join(SIDES))
    parser.add_argument("--precision", choices=["fp32", "auto", "bf16"], default="fp32",
                        help="what both sides run in (see the top of this file)")
    parser.add_argument("--out", default="")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc defaults to the Python sides (see PYTHON_MALLOC_ENV)")
    parser.add_argument("--measure", choices=SIDES, help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps % args.warmup:
        parser.error("--warmup must divide --steps (it is megabatch's log window)")
    if args.measure:
        measure(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
