"""Shard load throughput of `megabatch data check` under mpirun -np 1, 2, 4, next to
`cat FILE > /dev/null` on the same file, warm page cache, in one run. Medians of repeats.

    /usr/bin/python3 bench/data/load_throughput.py [--gb 2] [--repeats 3] [--bin build/megabatch] [--dir /tmp]

Two ways to make a rank's rows resident, both measured:
  - mapped (data.host_mmap=true, the default for host residency): the rank maps its rows of the
    file from the page cache (mmap + populate + mlock), zero copy;
  - read (data.host_mmap=false): collective MPI-IO reads (sec2 for one rank) into fresh memory.
Throughput = bytes all ranks made resident / slowest rank's load phase. Process start-up,
validation, and the value checks (non-finite scan of every loaded byte) are reported separately.
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
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")


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


def megabatch(binary, np_, config, report, mmap):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", binary, "data", "check", "--config", config,
           "--report", report, "data.host_mmap=%s" % ("true" if mmap else "false")]
    if np_ == 1:
        cmd = cmd[4:]
    # Intra-op threads (the value scan) = cores per rank, as training uses.
    env = dict(ENV, OMP_NUM_THREADS=str(max(1, os.cpu_count() // np_)))
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if out.returncode != 0:
        raise SystemExit(out.stdout)
    with open(report) as f:
        ranks = json.load(f)["ranks"]
    read = max(r["read_seconds"] for r in ranks)
    total_bytes = sum(r["bytes_read"] + r["bytes_mapped"] for r in ranks)
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
        print("| how | ranks | GB | load s (median) | GB/s | vs cat | value check s | load + check GB/s | vs cat | validate s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for mmap in (True, False):
            for np_ in (1, 2, 4):
                runs = [megabatch(args.bin, np_, config, os.path.join(tmp, "r.json"), mmap)
                        for _ in range(args.repeats)]
                total = runs[0][0]
                load = statistics.median(r[1] for r in runs)
                check = statistics.median(r[3] for r in runs)
                both = statistics.median(r[1] + r[3] for r in runs)
                print("| %s | %d | %.2f | %.3f | %.2f | %.0f%% | %.3f | %.2f | %.0f%% | %.3f |" % (
                    "mapped" if mmap else "read (MPI-IO)" if np_ > 1 else "read (sec2)", np_, total / 1e9,
                    load, total / load / 1e9, 100 * total / load / 1e9 / cat_gbs, check,
                    total / both / 1e9, 100 * total / both / 1e9 / cat_gbs,
                    statistics.median(r[2] for r in runs)), flush=True)


if __name__ == "__main__":
    main()
