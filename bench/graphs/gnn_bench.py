"""Graph classification on the CPU: megabatch (1 rank) against a plain PyTorch loop.

Side by side in one run, alternating, on the same synthetic graphs file (`megabatch data
synth-graphs`), the same model (GIN: node encoder + type embedding, 3 GIN layers of width 64,
sum pooling, head 64), the same batch, AdamW, fp32 and thread count.

The PyTorch baseline is written the way a user without PyTorch Geometric writes it: the file is
read once with h5py into one (x, node types, edge_index, label) tuple of tensors per graph; a
torch.utils.data.DataLoader (shuffle, num_workers=0) calls a collate function per batch that
concatenates the graphs, shifts each graph's edge ids by its first node and builds the batch
vector; the GIN layers aggregate with index_add_. megabatch gathers the batch on the device from
the resident CSR arrays (Note [Graph gather] in src/data/layouts/GraphsLayout.h).

Both time the same number of steps after warm-up, in an order that alternates from repeat to
repeat; the ratio reported is the median of the per-repeat ratios (> 1: megabatch is faster).
The run prints and records the load average, thread settings and versions, is marked LOADED when
the load average went above 1.5, and writes its raw JSON to bench/results/ (bench/benchlib.py). Then the time from launch to the first finished step on a file
of --first-step-graphs graphs (default 100000), each side in a fresh process.

--precision auto runs megabatch with train.precision=auto against the same PyTorch loop (fp32,
PyTorch's default); --precision bf16 runs megabatch in bf16 against the loop with its forward and
loss under torch.autocast("cpu", torch.bfloat16) (docs/operations.md, "Precision on the CPU").

usage: /usr/bin/python3 bench/graphs/gnn_bench.py BUILD_DIR [--repeats 5] [--steps 200]
           [--batch 8,32] [--threads 1] [--first-step-graphs 100000] [--precision fp32|auto|bf16]
           [--out results.json]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HIDDEN, LAYERS = 64, 3


# --- the PyTorch baseline ------------------------------------------------------------------

class GinLayer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.nn = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x, edge_index):
        summed = torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]])
        return self.nn(x + summed)


class Gin(nn.Module):
    def __init__(self, features, vocab, classes):
        super().__init__()
        self.node_encoder = nn.Linear(features, HIDDEN)
        self.type_embedding = nn.Embedding(vocab, HIDDEN)
        self.convs = nn.ModuleList([GinLayer(HIDDEN) for _ in range(LAYERS)])
        self.head = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Dropout(0.0),
                                  nn.Linear(HIDDEN, classes))

    def forward(self, x, types, edge_index, batch, graphs):
        h = self.node_encoder(x) + self.type_embedding(types)
        for conv in self.convs:
            h = F.relu(conv(h, edge_index))
        pooled = torch.zeros(graphs, h.shape[1], dtype=h.dtype).index_add_(0, batch, h)  # bf16 under autocast
        return self.head(pooled)


def load_graphs(path):
    """One (x, types, edge_index, label) per graph, as a user's Dataset holds them."""
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(f["node_features"][()])
        types = torch.from_numpy(f["node_type"][()].astype("i8"))
        edges = torch.from_numpy(f["edge_index"][()].astype("i8"))
        nodes, edge_offsets = f["node_offsets"][()], f["edge_offsets"][()]
        labels = torch.from_numpy(f["label"][()].astype("i8"))
        vocab = int(f["node_type"].attrs["vocab_size"])
    graphs = [(x[nodes[g]:nodes[g + 1]], types[nodes[g]:nodes[g + 1]],
               edges[:, edge_offsets[g]:edge_offsets[g + 1]], labels[g])
              for g in range(len(labels))]
    return graphs, x.shape[1], vocab, int(labels.max()) + 1


def collate(graphs):
    xs, types, edges, batch, ys = [], [], [], [], []
    base = 0
    for i, (x, t, e, y) in enumerate(graphs):
        xs.append(x)
        types.append(t)
        edges.append(e + base)
        batch.append(torch.full((x.shape[0],), i, dtype=torch.long))
        ys.append(y)
        base += x.shape[0]
    return torch.cat(xs), torch.cat(types), torch.cat(edges, 1), torch.cat(batch), torch.stack(ys)


def python_steps(path, batch_size, threads, precision="fp32", train_fraction=0.8):
    """A generator: one training step per next()."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    graphs, features, vocab, classes = load_graphs(path)
    train = graphs[:int(len(graphs) * train_fraction)]
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True,
                                         collate_fn=collate, num_workers=0, drop_last=True)
    model = Gin(features, vocab, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0, foreach=True)
    while True:
        for x, types, edge_index, batch, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = model(x, types, edge_index, batch, y.shape[0])
                loss = F.cross_entropy(logits.float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            yield loss.item()


def time_python(path, batch, threads, steps, warmup, precision):
    """(wall seconds, CPU seconds) per step."""
    step = python_steps(path, batch, threads, precision)
    for _ in range(warmup):
        next(step)
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        next(step)
    timed = (time.perf_counter() - start) / steps, (time.process_time() - start_cpu) / steps
    benchlib.profile_steps(lambda: next(step))
    return timed


# --- megabatch --------------------------------------------------------------------------

def megabatch_command(binary, path, run_dir, threads, batch, steps, log_every, precision="fp32"):
    return [binary, "train", "--config", os.path.join(ROOT, "configs", "graphs-gin.yaml"),
            "data.path=" + path, "run.dir=" + run_dir, "run.resume=never",
            # No checkpoint before the end and a one-batch evaluation at epoch ends: the baseline
            # does neither, and both would land in the timed log windows.
            "train.max_steps=%d" % steps, "train.eval_every=0", "train.eval_batches=1",
            "run.log_every=%d" % log_every, "run.checkpoint_every=1000000",
            "train.threads=%d" % threads, "train.precision=" + precision,
            "train.global_batch=%d" % batch, "train.grad_clip=1.0", "model.layers=%d" % LAYERS,
            "model.hidden=%d" % HIDDEN, "model.head_hidden=%d" % HIDDEN, "optim.weight_decay=0",
            "run.progress=lines"]


def child_cpu_seconds(cmd, env):
    """Runs cmd; returns the CPU seconds (user + system) it and its threads used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_megabatch(binary, path, run_dir, threads, batch, steps, warmup, precision):
    """(wall, CPU) seconds per step over the steps after warm-up. Wall from metrics.jsonl: log
    windows of `warmup` steps (one host sync per window, as in a real run), the first window
    dropped. CPU = (CPU of this run - CPU of a warm-up-only run) / steps: start-up, loading and
    warm-up cancel, and CPU time is less sensitive than wall time to other load."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = megabatch_command(binary, path, run_dir, threads, batch, warmup + steps, warmup, precision)
    short = megabatch_command(binary, path, run_dir + "-short", threads, batch, warmup, warmup, precision)
    cpu = (child_cpu_seconds(cmd, env) - child_cpu_seconds(short, env)) / steps
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        train = [json.loads(line) for line in f if '"event":"train"' in line]
    seconds, counted, previous = 0.0, 0, 0
    for r in train:
        covered = r["step"] - previous
        if previous >= warmup:
            seconds += r["step_time_s"] * covered
            counted += covered
        previous = r["step"]
    assert counted == steps, (counted, steps)
    with open(os.path.join(run_dir, "train.log")) as f:
        chosen = [line.split("info: ", 1)[1].strip() for line in f if "info: train.precision = " in line]
    if chosen:
        print("megabatch: " + chosen[-1], flush=True)
    return seconds / counted, cpu


# --- launch to first step ----------------------------------------------------------------

def seconds_to_line(cmd, marker, env=None):
    """Wall seconds from launching `cmd` until a line of its output contains `marker`."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, env=env)
    seen = None
    for line in proc.stdout:
        if seen is None and marker in line:
            seen = time.perf_counter() - start
    proc.wait()
    if seen is None or proc.returncode != 0:
        raise RuntimeError("%s: no line with %r (exit %s)" % (" ".join(cmd), marker, proc.returncode))
    return seen


def first_step_child(path, batch, threads):
    step = python_steps(path, batch, threads)
    next(step)
    print("first step done", flush=True)


# --- the run ---------------------------------------------------------------------------

def compare_at_batch(binary, path, workdir, args, batch, host):
    """Repeats of both sides at one batch size, alternating which goes first."""
    mb, py = [], []
    for r in range(args.repeats):
        run_dir = os.path.join(workdir, "run-%d-%d" % (batch, r))
        sides = [("mb", lambda: time_megabatch(binary, path, run_dir, args.threads, batch, args.steps,
                                                args.warmup, args.precision)),
                 ("py", lambda: time_python(path, batch, args.threads, args.steps, args.warmup,
                                            args.precision))]
        for name, measure in (sides if r % 2 == 0 else sides[::-1]):
            (mb if name == "mb" else py).append(measure())
        host.sample_load()
        print("batch %d repeat %d: megabatch %.2f ms/step (CPU %.2f), PyTorch + DataLoader %.2f ms/step "
              "(CPU %.2f), load %.2f" % (batch, r, 1e3 * mb[-1][0], 1e3 * mb[-1][1], 1e3 * py[-1][0],
                                         1e3 * py[-1][1], benchlib.load_average()[0]), flush=True)
    row = {"batch": batch}
    for side, runs in (("megabatch", mb), ("pytorch", py)):
        row[side + "_wall_ms"] = [1e3 * w for w, _ in runs]
        row[side + "_cpu_ms"] = [1e3 * c for _, c in runs]
        row[side + "_median_ms"] = statistics.median(row[side + "_wall_ms"])
        row[side + "_median_cpu_ms"] = statistics.median(row[side + "_cpu_ms"])
    # Medians of the per-repeat ratios (> 1: megabatch is faster).
    row["ratio"] = benchlib.median_ratio(row["pytorch_wall_ms"], row["megabatch_wall_ms"])
    row["cpu_ratio"] = benchlib.median_ratio(row["pytorch_cpu_ms"], row["megabatch_cpu_ms"])
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="also the log window; divides --steps")
    parser.add_argument("--batch", default="32", help="graphs per step; a comma list runs each (8,32)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--graphs", type=int, default=3000)
    parser.add_argument("--first-step-graphs", type=int, default=100000)
    parser.add_argument("--skip-first-step", action="store_true")
    parser.add_argument("--precision", choices=["fp32", "auto", "bf16"], default="fp32")
    parser.add_argument("--out", default="", help="raw JSON (default: bench/results/gnn_bench-DATE.json)")
    parser.add_argument("--first-step-child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in str(args.batch).split(",")]
    if args.first_step_child:
        return first_step_child(args.first_step_child, batches[0], args.threads)
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    host = benchlib.Host(args.threads, binaries={"megabatch": binary})
    benchlib.check_repeats(args.repeats)
    workdir = tempfile.mkdtemp(prefix="mb-gnn-bench-")
    path = os.path.join(workdir, "graphs.h5")
    subprocess.run([binary, "data", "synth-graphs", "--out", path, "--graphs", str(args.graphs)],
                   check=True, stdout=subprocess.DEVNULL)
    result = {"precision": args.precision, "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "graphs": args.graphs,
              "repeats": args.repeats,
              "rows": [compare_at_batch(binary, path, workdir, args, b, host) for b in batches]}

    if args.skip_first_step:
        args.first_step_graphs = 0
    big = os.path.join(workdir, "big.h5")
    if args.first_step_graphs:
        subprocess.run([binary, "data", "synth-graphs", "--out", big, "--graphs",
                        str(args.first_step_graphs)], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    first_mb, first_py = [], []
    for r in range(max(1, args.repeats // 2) if args.first_step_graphs else 0):
        cmd = megabatch_command(binary, big, os.path.join(workdir, "first-%d" % r), args.threads,
                                batches[0], 1, 1)
        first_mb.append(seconds_to_line(cmd, "step 1/1", env))
        child = [sys.executable, os.path.abspath(__file__), args.build, "--first-step-child", big,
                 "--batch", str(batches[0]), "--threads", str(args.threads)]
        first_py.append(seconds_to_line(child, "first step done", env))
        host.sample_load()
        print("first step on %d graphs: megabatch %.2f s, PyTorch + DataLoader %.2f s"
              % (args.first_step_graphs, first_mb[-1], first_py[-1]), flush=True)
    result["first_step_graphs"] = args.first_step_graphs
    result["megabatch_first_step_s"] = statistics.median(first_mb) if first_mb else None
    result["pytorch_first_step_s"] = statistics.median(first_py) if first_py else None

    print("\n| batch | threads | megabatch ms/step (CPU) | PyTorch + DataLoader ms/step (CPU) "
          "| ratio, wall | ratio, CPU |")
    print("|---|---|---|---|---|---|")
    for row in result["rows"]:
        print("| %d | %d | %.2f (%.2f) | %.2f (%.2f) | **%.2f** | %.2f |" % (
            row["batch"], args.threads, row["megabatch_median_ms"], row["megabatch_median_cpu_ms"],
            row["pytorch_median_ms"], row["pytorch_median_cpu_ms"], row["ratio"], row["cpu_ratio"]))
    print("ratios: medians of the %d per-repeat ratios (> 1: megabatch faster)" % args.repeats)
    if first_mb:
        print("launch to first step, %d graphs: megabatch %.2f s, PyTorch %.2f s"
              % (args.first_step_graphs, result["megabatch_first_step_s"],
                 result["pytorch_first_step_s"]))
    benchlib.finish("gnn_bench", result, host, args.out)


if __name__ == "__main__":
    main()
