"""Training throughput of kind: gat on a panel, megabatch against the PyTorch way of document 002
(the ATFT-GAT-FAN report), side by side in one run:

  before   a DataLoader over dates (num_workers=0) whose batches carry each date's windows, and
           the training loop builds the batch's kNN-by-correlation graph on the host for every
           batch (the report's 0% GPU utilisation: ~0.2 s of graph building per batch);
  after    the same with each date's graph built once and kept in a dict (the report's fix);
  megabatch  `megabatch train` on the same file and model: windows gathered from the resident
           panel, graphs built on the device and cached per date.

Same data (a `megabatch data synth-panel` file), same model (LSTM encoder, GAT layers, head, as
kind: gat: the baseline's GAT is the same edge-list computation), same optimizer, same batch of
dates, same torch threads, same device. The graph builder of the baselines is the same
vectorised algorithm (float64 batched matmuls + topk, Note [Panel graph] in
src/model/parts/PanelGraph.h), run with torch on the host: a strong "before", not a Python loop.

Throughput is dates (samples) per second of training steps, steady state: megabatch's from the
metrics.jsonl windows of its second epoch (graphs cached; the first window after the epoch
boundary, which holds the evaluation, is dropped), the baselines' from the median of --steps
timed steps after --warmup untimed ones, each step from the end of the previous one, so the
DataLoader's collate is counted as megabatch's gather is ("after" builds every train date's
graph before it is timed). Each repeat
runs all three, interleaved; the table gives medians over repeats and the ratios are medians of
the per-repeat ratios.

--precision auto runs megabatch with train.precision=auto against the baselines in fp32 (PyTorch's
default); --precision bf16 runs megabatch in bf16 against the baselines with the model's forward
and the loss under torch.autocast(device, torch.bfloat16) (docs/operations.md, "Precision on the
CPU"); the graph building stays fp64 on both sides.
    /usr/bin/python3 bench/models/panel_gat_bench.py --binary build/megabatch [--repeats 5]
        [--instruments 1000] [--dates 330] [--batch 4] [--threads 2] [--device cpu|cuda]
        [--precision fp32|auto|bf16]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402

CONFIG = """
run: {{dir: {run_dir}, log_every: {log_every}, resume: never, checkpoint_every: 100000}}
data:
  path: {data}
  layout: panel
  canonical_shards: 1
  residency: {residency}
  split: {{train_fraction: 0.96, val_fraction: 0.02, test_fraction: 0.02, embargo: 0}}
  panel: {{window: {window}, normalize: zscore, normalize_target: zscore}}
model:
  kind: gat
  hidden: {hidden}
  layers: 1
  heads: {heads}
  head_hidden: {hidden}
  dropout: 0.0
  graph: {{layers: {gat_layers}, k: {k}, lookback: {lookback}, min_periods: {min_periods}}}
train:
  global_batch: {batch}
  epochs: 2
  threads: {threads}
  device: {device}
  precision: {precision}
  eval_batches: 1
optim: {{name: adamw, lr: 0.001, schedule: constant}}
"""


# --- the PyTorch baseline -------------------------------------------------------------------

def normalise(values, present):
    """Per-date z-score across present instruments, 0 where absent (as data.panel.normalize)."""
    p = present[..., None]
    v = np.where(p, values, 0.0)
    count = np.maximum(p.sum(1, keepdims=True), 1)
    centred = (v - v.sum(1, keepdims=True) / count) * p
    std = np.sqrt((centred ** 2).sum(1, keepdims=True) / count)
    return np.where(std > 1e-12, centred / np.maximum(std, 1e-12), 0.0).astype("float32")


class Dates(torch.utils.data.Dataset):
    """One item per date: the windows of every instrument, the mask, the return lookback, the
    target; the normalised panel is held in memory (the baseline never waits for disk)."""

    def __init__(self, path, dates, window, lookback):
        with h5py.File(path, "r") as f:
            present = f["mask"][()].astype(bool)
            values = normalise(f["values"][()].astype("float64"), present)
            target = np.nan_to_num(f["target"][()].astype("float64"))
        self.values, self.present, self.window, self.lookback = values, present, window, lookback
        self.target = normalise(target[..., None], present)[..., 0]
        self.dates = dates

    def __len__(self):
        return len(self.dates)

    def __getitem__(self, i):
        t = self.dates[i]
        windows = self.values[t - self.window + 1:t + 1].transpose(1, 0, 2)  # [N, W, F]
        past = np.where(self.present[t - self.lookback + 1:t + 1], self.values[t - self.lookback + 1:t + 1, :, 0],
                        np.nan).T  # [N, L]
        return (torch.from_numpy(np.ascontiguousarray(windows)), torch.from_numpy(self.present[t]),
                torch.from_numpy(np.ascontiguousarray(past)), torch.from_numpy(self.target[t]), t)


def build_graphs(returns, present, k, min_periods):
    """The kNN-by-correlation graph of each date (Note [Panel graph]), float64 batched matmuls
    and topk on the host: [2, E] (src, dst) per date."""
    r = returns.double()
    seen = torch.isfinite(r)
    m = seen.double()
    x = torch.where(seen, r, torch.zeros((), dtype=r.dtype))
    mt = m.transpose(1, 2)
    shared = m @ mt
    sx, sxx, sxy = x @ mt, (x * x) @ mt, x @ x.transpose(1, 2)
    sy, syy = sx.transpose(1, 2), sxx.transpose(1, 2)
    n = shared.clamp_min(1)
    cov = sxy - sx * sy / n
    vi, vj = sxx - sx * sx / n, syy - sy * sy / n
    nodes = r.shape[1]
    valid = (present.unsqueeze(2) & present.unsqueeze(1) & (shared >= min_periods) & (vi > 1e-10 * sxx)
             & (vj > 1e-10 * syy) & ~torch.eye(nodes, dtype=torch.bool))
    corr = torch.where(valid, cov / (vi * vj).clamp_min(1e-300).sqrt(), torch.tensor(-np.inf, dtype=torch.float64))
    best, idx = corr.topk(min(k, nodes - 1), dim=2)
    adjacent = torch.zeros(corr.shape, dtype=torch.bool).scatter_(2, idx, torch.isfinite(best))
    adjacent |= torch.eye(nodes, dtype=torch.bool).unsqueeze(0) & present.unsqueeze(2)
    return [torch.stack([a.nonzero()[:, 1], a.nonzero()[:, 0]]) for a in adjacent]


class GatConv(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.channels = heads, width // heads
        self.lin = nn.Linear(width, width, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, self.channels) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(1, heads, self.channels) * 0.1)
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, h, src, dst):
        m = h.shape[0]
        x = self.lin(h).view(m, self.heads, self.channels)
        score = F.leaky_relu((x * self.att_src).sum(-1)[src] + (x * self.att_dst).sum(-1)[dst], 0.2)
        peak = torch.zeros(m, self.heads, device=h.device).scatter_reduce(
            0, dst.unsqueeze(1).expand_as(score), score.detach(), "amax", include_self=False)
        weight = (score - peak[dst]).exp()
        total = torch.zeros(m, self.heads, device=h.device).index_add(0, dst, weight)
        alpha = weight / (total[dst] + 1e-16)
        out = torch.zeros(m, self.heads, self.channels, device=h.device).index_add(0, dst, x[src] * alpha.unsqueeze(-1))
        return out.reshape(m, -1) + self.bias


class Gat(nn.Module):
    def __init__(self, features, hidden, heads, gat_layers):
        super().__init__()
        self.encoder = nn.LSTM(features, hidden, 1, batch_first=True)
        self.gat = nn.ModuleList([GatConv(hidden, heads) for _ in range(gat_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(gat_layers)])
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(0.0), nn.Linear(hidden, 1))

    def forward(self, windows, src, dst):
        b, n, w, f = windows.shape
        h = self.encoder(windows.reshape(b * n, w, f))[1][0][-1]
        for conv, norm in zip(self.gat, self.norms):
            h = norm(h + F.elu(conv(h, src, dst)))
        return self.head(h).view(b, n)


def batch_graph(graphs, nodes, device):
    src = torch.cat([g[0] + b * nodes for b, g in enumerate(graphs)]).to(device)
    dst = torch.cat([g[1] + b * nodes for b, g in enumerate(graphs)]).to(device)
    return src, dst


def baseline(args, data, dates, cached, device):
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    dataset = Dates(data, dates, args.window, args.lookback)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=0,
                                         generator=torch.Generator().manual_seed(0), drop_last=True)
    model = Gat(dataset.values.shape[2], args.hidden, args.heads, args.gat_layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    cache = {}
    if cached:  # the report's fix: every date's graph once, before training
        for i in range(0, len(dataset), args.batch):  # a batch's worth at a time bounds the memory
            items = [dataset[j] for j in range(i, min(len(dataset), i + args.batch))]
            graphs = build_graphs(torch.stack([it[2] for it in items]), torch.stack([it[1] for it in items]),
                                  args.k, args.min_periods)
            cache.update({it[4]: g for it, g in zip(items, graphs)})
    def train_step(windows, present, past, target, t):
        if cached:
            graphs = [cache[int(d)] for d in t]
        else:
            graphs = build_graphs(past, present, args.k, args.min_periods)
        src, dst = batch_graph(graphs, present.shape[1], device)
        windows, present, target = windows.to(device), present.to(device), target.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(windows, src, dst).float()
            weight = present.float()
            loss = (((out - target) ** 2 * weight).sum(1) / weight.sum(1).clamp_min(1)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    times = []
    step = 0
    while len(times) < args.steps:
        last = time.perf_counter()
        for batch in loader:  # the collate counts: it is a step's cost
            train_step(*batch)
            now = time.perf_counter()
            step += 1
            if step > args.warmup:
                times.append(now - last)
            last = now
            if len(times) >= args.steps:
                break
    if cached:  # MEGABATCH_PROFILE: the operators of a few more steps (bench/profile_ops.py)
        batches = iter(loader)
        benchlib.profile_steps(lambda: train_step(*next(batches)), steps=min(5, len(loader)))
    return args.batch / statistics.median(times)


# --- megabatch ----------------------------------------------------------------------------------

def megabatch(args, data, tmp, repeat):
    run_dir = os.path.join(tmp, "run-%d" % repeat)
    config = os.path.join(tmp, "panel-%d.yaml" % repeat)
    with open(config, "w") as f:
        f.write(CONFIG.format(run_dir=run_dir, data=data, window=args.window, hidden=args.hidden,
                              heads=args.heads, gat_layers=args.gat_layers, k=args.k, lookback=args.lookback,
                              min_periods=args.min_periods, batch=args.batch, threads=args.threads,
                              device=args.device, log_every=args.log_every, precision=args.precision,
                              residency="device" if args.device == "cuda" else "host"))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run([args.binary, "train", "--config", config], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    if out.returncode != 0:
        raise SystemExit(out.stdout[-4000:])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if r["event"] == "train"]
    second = [r for r in train if r["epoch"] == 1][1:]  # epoch 2 minus the window holding the eval
    first = [r for r in train if r["epoch"] == 0][1:]  # epoch 1 (builds the graphs) minus warm-up
    if not second:
        raise SystemExit("megabatch: too few log windows in epoch 2; lower --log-every")
    with open(os.path.join(run_dir, "train.log")) as f:
        chosen = [line.split("info: ", 1)[1].strip() for line in f if "info: train.precision = " in line]
    if chosen:
        print("megabatch: " + chosen[-1], flush=True)
    return (statistics.median(r["samples_per_s"] for r in second),
            statistics.median(r["samples_per_s"] for r in first) if first else float("nan"),
            second[-1])


def main():
    warnings.filterwarnings("ignore", message="scatter_reduce")  # torch 1.13: "in beta"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/megabatch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dates", type=int, default=330)
    parser.add_argument("--instruments", type=int, default=1000)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--lookback", type=int, default=60)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--min-periods", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--gat-layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4, help="dates per step")
    parser.add_argument("--steps", type=int, default=20, help="timed baseline steps per repeat")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of both sides (1: OpenMP threads that spin-wait make "
                             "timings erratic on a busy host)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "auto", "bf16"])
    parser.add_argument("--out", default="", help="raw JSON (default: bench/results/panel_gat_bench-DATE.json)")
    args = parser.parse_args()
    device = torch.device(args.device)
    host = benchlib.Host(args.threads, binaries={"megabatch": args.binary})
    benchlib.check_repeats(args.repeats)

    with tempfile.TemporaryDirectory(prefix="mbgatbench-") as tmp:
        data = os.path.join(tmp, "panel.h5")
        subprocess.run([args.binary, "data", "synth-panel", "--out", data, "--dates", str(args.dates),
                        "--instruments", str(args.instruments), "--features", str(args.features)],
                       check=True, stdout=subprocess.DEVNULL)
        first = args.lookback - 1  # the train dates megabatch uses (train_fraction 0.96)
        dates = list(range(first, first + int((args.dates - first) * 0.96)))
        rows = {"before": [], "after": [], "mine": [], "mine_build": []}
        for repeat in range(args.repeats):
            def run_megabatch():
                mine, build, last = megabatch(args, data, tmp, repeat)
                rows["mine"].append(mine)
                rows["mine_build"].append(build)
                rows["last"] = last
            sides = [lambda: rows["before"].append(baseline(args, data, dates, cached=False, device=device)),
                     lambda: rows["after"].append(baseline(args, data, dates, cached=True, device=device)),
                     run_megabatch]
            for side in sides[repeat % 3:] + sides[:repeat % 3]:  # rotate which goes first
                side()
            host.sample_load()
            print("repeat %d: before %.2f, after %.2f, megabatch %.2f dates/s (first epoch %.2f), load %.2f" % (
                repeat, rows["before"][-1], rows["after"][-1], rows["mine"][-1], rows["mine_build"][-1],
                benchlib.load_average()[0]), flush=True)
        last = rows.pop("last")
        med = {k: statistics.median(v) for k, v in rows.items()}
        print()
        print("device %s, %d torch threads, %d dates x %d instruments x %d features, window %d, "
              "lookback %d, k %d, batch %d dates (%d windows), LSTM hidden %d + %d GAT layers" % (
                  args.device, args.threads, args.dates, args.instruments, args.features, args.window,
                  args.lookback, args.k, args.batch, args.batch * args.instruments, args.hidden,
                  args.gat_layers))
        print()
        print("| variant | dates/s (median of %d repeats) | instrument-windows/s |" % args.repeats)
        print("|---|---|---|")
        for name, label in (("before", "PyTorch: kNN graph built on the host for every batch (\"before\")"),
                            ("after", "PyTorch: graphs built once and cached (\"after\")"),
                            ("mine", "megabatch: graphs built on the device, cached (epoch 2)"),
                            ("mine_build", "megabatch: epoch 1, building each date's graph")):
            print("| %s | %.2f | %.0f |" % (label, med[name], med[name] * args.instruments))
        print()
        before = benchlib.median_ratio(rows["mine"], rows["before"])
        after = benchlib.median_ratio(rows["mine"], rows["after"])
        print("megabatch / before: %.2fx (target >= 3x); megabatch / after: %.2fx (target >= 1.15x); "
              "medians of per-repeat ratios" % (before, after))
        print("last megabatch window: step split data %.1f ms, fwd-bwd %.1f ms, comm %.1f ms, optimizer %.1f ms" % (
            1e3 * last["data_time_s"], 1e3 * last["fwd_bwd_time_s"], 1e3 * last["comm_time_s"],
            1e3 * last["optimizer_time_s"]))
        result = {"settings": vars(args), "dates_per_s": rows, "medians": med, "ratio_before": before,
                  "ratio_after": after, "last_window": last}
        benchlib.finish("panel_gat_bench", result, host, args.out)


if __name__ == "__main__":
    main()
