"""Resident memory of a series file with 5 streams and 10^6 rows in its finest stream, loaded
under mpirun -np 4: the bytes each rank holds next to the size of the series and next to what
materialised windows would take (samples x sum of window x features).

    /usr/bin/python3 bench/data/resident_memory.py [--rows 1000000] [--np 4]
"""
import argparse
import json
import os
import subprocess
import tempfile

import h5py

WINDOWS = {"m1": 360, "m5": 96, "m15": 48, "h1": 24, "h4": 12}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMP_NUM_THREADS="1")


def mib(b):
    return "%.1f MiB" % (b / 2 ** 20)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "megabatch"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mb-resident-") as tmp:
        path = os.path.join(tmp, "series.h5")
        subprocess.run([args.bin, "data", "synth-series", "--out", path, "--rows", str(args.rows)], check=True,
                       stdout=subprocess.DEVNULL)
        with h5py.File(path, "r") as f:
            series = sum(f["series/%s/values" % k].size * 4 for k in WINDOWS)
            features = {k: f["series/%s/values" % k].shape[1] for k in WINDOWS}
            samples = f["targets"].shape[0]
        windows = samples * sum(WINDOWS[k] * features[k] for k in WINDOWS) * 4
        config = os.path.join(tmp, "c.yaml")
        with open(config, "w") as f:
            f.write("data:\n  path: %s\n  layout: series\n  canonical_shards: 16\n  streams:\n" % path)
            for k, w in WINDOWS.items():
                f.write("    - {name: %s, window: %d}\n" % (k, w))
        print("file: %s, %d samples, 5 streams, windows %s" % (mib(os.path.getsize(path)), samples, WINDOWS))
        print("series values (all streams, float32): %s; as materialised windows: %s (%.0fx)"
              % (mib(series), mib(windows), windows / series))
        print("| data.host_mmap | rank | resident (values + int32 end rows + targets) | peak RSS of the process |")
        print("|---|---|---|---|")
        for mmap in ("true", "false"):
            report = os.path.join(tmp, "r.json")
            out = subprocess.run(["mpirun", "-np", str(args.np), "--oversubscribe", args.bin, "data", "check",
                                  "--config", config, "--report", report, "data.host_mmap=" + mmap],
                                 env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
            if out.returncode != 0:
                raise SystemExit(out.stdout)
            ranks = json.load(open(report))["ranks"]
            for r, s in enumerate(ranks):
                print("| %s | %d | %s | %s |" % (mmap, r, mib(s["resident_bytes"]), mib(s["peak_rss_bytes"])))
            print("| %s | all | %s | %s |" % (mmap, mib(sum(s["resident_bytes"] for s in ranks)),
                                             mib(sum(s["peak_rss_bytes"] for s in ranks))))


if __name__ == "__main__":
    main()
