"""Time per batch gather, host-resident on CPU, for the LSTM seed shape (window 360, 167
features, batch 128) from a series file: megabatch's device-side window gather (here the
"device" is the CPU) next to a Python h5py + torch DataLoader reading the same windows, side by
side in one run. Also the floor: one memcpy of a batch's bytes.

    /usr/bin/python3 bench/data/gather_bench.py [--rows 200000] [--batches 200] [--repeats 5]

Medians over batches; each repeat runs every variant once (interleaved, so a busy moment of the
host hits them alike), and the ratio is the median of the per-repeat ratios. megabatch is timed
with one thread (OMP_NUM_THREADS=1) and with every core (its default); the DataLoader with
num_workers=0 (one process: h5py reads are serial) with one thread and with every core for its
collate, and with 2 workers; the ratio takes the baseline's faster setting in each repeat. The
floor is one copy_ of a batch's bytes, with one thread and with every core.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import h5py
import numpy as np
import torch

WINDOW, FEATURES, BATCH = 360, 167, 128


def write_series(path, rows):
    rng = np.random.default_rng(0)
    t = np.arange(WINDOW - 1, rows)
    with h5py.File(path, "w") as f:
        f.create_dataset("series/m1/values", data=rng.standard_normal((rows, FEATURES), dtype="float32"))
        f["samples/end/m1"] = t
        f["targets"] = rng.standard_normal(len(t)).astype("float32")
        f["timestamps"] = 1_700_000_000 + 60 * t


def ours(binary, config, batches, report, threads=1):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([binary, "data", "check", "--config", config, "--batches", str(batches), "--report", report],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if out.returncode != 0:
        raise SystemExit(out.stdout)
    with open(report) as f:
        return json.load(f)["ranks"][0]["gather_ms_median"]


class Windows(torch.utils.data.Dataset):
    """The usual PyTorch way: one h5py slice per sample, the DataLoader collates."""

    def __init__(self, path):
        self.path = path
        self.file = None
        with h5py.File(path, "r") as f:
            self.ends = f["samples/end/m1"][()]
            self.targets = f["targets"][()]

    def __len__(self):
        return len(self.ends)

    def __getitem__(self, i):
        if self.file is None:  # one handle per worker process
            self.file = h5py.File(self.path, "r")
            self.values = self.file["series/m1/values"]
        e = self.ends[i]
        return torch.from_numpy(self.values[e - WINDOW + 1:e + 1]), torch.tensor(self.targets[i])


def baseline(path, batches, workers, threads=1):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the collate's torch.stack may use them
    loader = torch.utils.data.DataLoader(Windows(path), batch_size=BATCH, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    next(it)  # start-up (workers, file open) is not a batch
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        x, y = next(it)
        times.append(time.perf_counter() - start)
    assert x.shape == (BATCH, WINDOW, FEATURES)
    torch.set_num_threads(previous)
    return 1e3 * statistics.median(times)


def floor_ms(threads, repeats=50):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    src = torch.randn(BATCH * WINDOW, FEATURES)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    torch.set_num_threads(previous)
    return 1e3 * statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick-workers", action="store_true",
                   help="time the num_workers=2 DataLoader in the first repeat only (it is the slowest)")
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "megabatch"))
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mb-gather-") as tmp:
        path = os.path.join(tmp, "seed.h5")
        write_series(path, args.rows)
        config = os.path.join(tmp, "c.yaml")
        with open(config, "w") as f:
            f.write("data:\n  path: %s\n  layout: series\n  streams: [{name: m1, window: %d}]\n"
                    "  canonical_shards: 16\n  residency: host\ntrain: {global_batch: %d}\n" % (path, WINDOW, BATCH))
        subprocess.run("cat '%s' > /dev/null" % path, shell=True, check=True)
        cores = os.cpu_count()
        report = os.path.join(tmp, "r.json")
        # Interleaved: each repeat runs every variant once, so a busy moment of the host hits
        # all of them alike, and the ratios are taken within a repeat.
        rows = {"mine1": [], "mine_all": [], "base0": [], "base0_all": [], "base2": []}
        for r in range(args.repeats):
            rows["mine1"].append(ours(args.bin, config, args.batches, report))
            rows["mine_all"].append(ours(args.bin, config, args.batches, report, cores))
            rows["base0"].append(baseline(path, min(args.batches, 100), 0))
            rows["base0_all"].append(baseline(path, min(args.batches, 100), 0, cores))
            if r == 0 or not args.quick_workers:
                rows["base2"].append(baseline(path, min(args.batches, 100), 2))
            print("repeat %d: megabatch %.2f ms (1 thread) %.2f ms (%d threads); DataLoader %.2f ms (0 workers, 1 thread) %.2f ms (0 workers, %d threads)"
                  % (r + 1, rows["mine1"][-1], rows["mine_all"][-1], cores, rows["base0"][-1], rows["base0_all"][-1],
                     cores), flush=True)
        floor1 = floor_ms(1)
        floor_all = floor_ms(cores)
        med = {k: statistics.median(v) for k, v in rows.items()}
        # The baseline's best setting in each repeat: one thread or every core for its collate.
        best = [min(a, b) for a, b in zip(rows["base0"], rows["base0_all"])]
        ratio1 = statistics.median(b / m for b, m in zip(best, rows["mine1"]))
        ratio_all = statistics.median(b / m for b, m in zip(best, rows["mine_all"]))
        batch_mb = BATCH * WINDOW * FEATURES * 4 / 2 ** 20
        print("file: %d rows x %d float32 (%.0f MiB); batch %d x window %d x %d features = %.1f MiB"
              % (args.rows, FEATURES, args.rows * FEATURES * 4 / 2 ** 20, BATCH, WINDOW, FEATURES, batch_mb))
        print("| loader | ms per batch (median of %d repeats) |" % args.repeats)
        print("|---|---|")
        print("| megabatch window gather (host resident, 1 thread) | %.2f |" % med["mine1"])
        print("| megabatch window gather (host resident, %d threads) | %.2f |" % (cores, med["mine_all"]))
        print("| h5py + DataLoader, num_workers=0, 1 thread | %.2f |" % med["base0"])
        print("| h5py + DataLoader, num_workers=0, %d threads | %.2f |" % (cores, med["base0_all"]))
        print("| h5py + DataLoader, num_workers=2 | %.2f |" % med["base2"])
        print("| floor: one copy of the batch's bytes (torch copy_, 1 thread) | %.2f |" % floor1)
        print("| floor: one copy of the batch's bytes (torch copy_, %d threads) | %.2f |" % (cores, floor_all))
        print("ratio DataLoader (num_workers=0, the faster of 1 thread and all cores in each repeat) / megabatch, median of per-repeat ratios:"
              " %.2fx with 1 thread, %.2fx with %d threads" % (ratio1, ratio_all, cores))
        print("gather / floor: %.2f (1 thread), %.2f (%d threads)" % (med["mine1"] / floor1, med["mine_all"] / floor_all,
                                                                     cores))

if __name__ == "__main__":
    main()
