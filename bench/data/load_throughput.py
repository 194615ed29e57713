"""Shard load throughput of `megabatch data check` under mpirun -np 1, 2, 4, next to
`cat FILE > /dev/null` on the same file, warm page cache, in one run. Medians of repeats.

    /usr/bin/python3 bench/data/load_throughput.py [--gb 2] [--repeats 3] [--bin build/megabatch] [--dir /tmp]

Throughput = bytes all ranks read / slowest rank's read phase (the collective MPI-IO reads
into resident memory, including first-touch page faults of that memory). Process start-up,
validation, and value checks are reported separately.
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

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMP_NUM_THREADS="1")


def write_file(path, gigabytes, features=256):
    n = int(gigabytes * 1e9 / (features * 4))
    with h5py.File(path, "w") as f:
        x = f.create_dataset("features", (n, features), dtype="float32")
        step = 1 << 16
        rng = np.random.default_rng(0)
        block = rng.standard_normal((step, features)).astype("float32")
        for i in range(0, n, step):
            m = min(step, n - i)
            x[i:i + m] = block[:m] + i
        f["targets"] = np.zeros(n, "float32")
    return n


def cat_seconds(path):
    start = time.perf_counter()
    subprocess.run("cat '%s' > /dev/null" % path, shell=True, check=True)
    return time.perf_counter() - start


def megabatch(binary, np_, config, report):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", binary, "data", "check", "--config", config,
           "--report", report]
    if np_ == 1:
        cmd = cmd[4:]
    out = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if out.returncode != 0:
        raise SystemExit(out.stdout)
    with open(report) as f:
        ranks = json.load(f)["ranks"]
    read = max(r["read_seconds"] for r in ranks)
    total_bytes = sum(r["bytes_read"] for r in ranks)
    return total_bytes, read, max(r["validate_seconds"] for r in ranks), max(r["check_seconds"] for r in ranks)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gb", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "megabatch"))
    p.add_argument("--dir", default=tempfile.gettempdir())
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="mb-load-") as tmp:
        path = os.path.join(tmp, "load.h5")
        n = write_file(path, args.gb)
        size = os.path.getsize(path)
        config = os.path.join(tmp, "c.yaml")
        with open(config, "w") as f:
            f.write("data: {path: %s, layout: samples, canonical_shards: 16}\n" % path)
        cat_seconds(path)  # warm the page cache
        cats = [cat_seconds(path) for _ in range(args.repeats)]
        cat_gbs = size / statistics.median(cats) / 1e9
        print("file: %s, %d rows x 256 float32, %.2f GB, %d cores" % (path, n, size / 1e9, os.cpu_count()))
        print("cat FILE > /dev/null (warm): median %.3f s = %.2f GB/s" % (statistics.median(cats), cat_gbs))
        print("| ranks | read GB | read s (median) | GB/s | vs cat | validate s | value check s |")
        print("|---|---|---|---|---|---|---|")
        for np_ in (1, 2, 4):
            runs = [megabatch(args.bin, np_, config, os.path.join(tmp, "r.json")) for _ in range(args.repeats)]
            total = runs[0][0]
            read = statistics.median(r[1] for r in runs)
            print("| %d | %.2f | %.3f | %.2f | %.0f%% | %.3f | %.3f |" % (
                np_, total / 1e9, read, total / read / 1e9, 100 * total / read / 1e9 / cat_gbs,
                statistics.median(r[2] for r in runs), statistics.median(r[3] for r in runs)), flush=True)


if __name__ == "__main__":
    main()
