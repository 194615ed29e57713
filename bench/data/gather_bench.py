"""Time per batch gather, host-resident on CPU, for the LSTM seed shape (window 360, 167
features, batch 128) from a series file: megabatch's device-side window gather (here the
"device" is the CPU) next to a Python h5py + torch DataLoader reading the same windows, side by
side in one run. Also the floor: one memcpy of a batch's bytes.

    /usr/bin/python3 bench/data/gather_bench.py [--rows 200000] [--batches 200] [--repeats 3]

Medians over batches, then the median over repeated runs. Both sides use one thread
(OMP_NUM_THREADS=1, torch.set_num_threads(1)); megabatch is also timed with every core, the
DataLoader with 2 worker processes.
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


def baseline(path, batches, workers):
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
    return 1e3 * statistics.median(times)


def floor_ms(repeats=50):
    src = torch.randn(BATCH * WINDOW, FEATURES)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
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
        mine = [ours(args.bin, config, args.batches, os.path.join(tmp, "r.json")) for _ in range(args.repeats)]
        cores = os.cpu_count()
        mine_all = [ours(args.bin, config, args.batches, os.path.join(tmp, "r.json"), cores) for _ in range(args.repeats)]
        base0 = [baseline(path, min(args.batches, 100), 0) for _ in range(args.repeats)]
        base2 = [baseline(path, min(args.batches, 100), 2) for _ in range(args.repeats)]
        floor = floor_ms()
        batch_mb = BATCH * WINDOW * FEATURES * 4 / 2 ** 20
        ours_ms = statistics.median(mine)
        print("file: %d rows x %d float32 (%.0f MiB); batch %d x window %d x %d features = %.1f MiB"
              % (args.rows, FEATURES, args.rows * FEATURES * 4 / 2 ** 20, BATCH, WINDOW, FEATURES, batch_mb))
        print("| loader | ms per batch (median) | vs megabatch |")
        print("|---|---|---|")
        print("| megabatch window gather (host resident, 1 thread) | %.2f | 1.0x |" % ours_ms)
        print("| megabatch window gather (host resident, %d threads) | %.2f | |" % (cores, statistics.median(mine_all)))
        print("| h5py + DataLoader, num_workers=0 | %.2f | %.1fx slower |" % (statistics.median(base0),
                                                                            statistics.median(base0) / ours_ms))
        print("| h5py + DataLoader, num_workers=2 | %.2f | %.1fx slower |" % (statistics.median(base2),
                                                                            statistics.median(base2) / ours_ms))
        print("| floor: one memcpy of the batch (torch copy_, 1 thread) | %.2f | |" % floor)
        print("ratio to the DataLoader (num_workers=0): %.1fx with 1 thread, %.1fx with %d threads"
              % (statistics.median(base0) / ours_ms, statistics.median(base0) / statistics.median(mine_all), cores))


if __name__ == "__main__":
    main()
