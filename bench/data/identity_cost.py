"""What the data identity costs a load (Note [Data continuity], Note [Content hash]).

`megabatch data check` records the identity as training does, and reports each rank's phases:
validate, read, value checks (the load without the identity) and identify (hashing every row it
holds, and reading and hashing its share of the rows no rank holds). Runs under mpirun -np 1 and
2, warm page cache, on the demo's file (configs/demo.yaml) and on a file of about 1 GB
(synth-series, 8M rows, 24 features; the demo's streams m1, m5, h1), resident on the host and,
for the large file, streamed (the train split is then read once more, only to be hashed).
Per run: the slowest rank's seconds per phase, the process's wall time, and the load average
just before it (other work may share the machine). Medians of repeats.

    /usr/bin/python3 bench/data/identity_cost.py [--repeats 5] [--bin build/megabatch]
        [--dir /tmp/mb-identity-bench] [--out bench/results/identity-2026-12-07]
"""
import argparse
import json
import os
import statistics
import subprocess
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_SYNTH = ["--rows", "100000", "--features", "4", "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"]
LARGE_SYNTH = ["--rows", "8000000", "--features", "24", "--streams", "m1:1,m5:5,h1:60"]
PHASES = ["validate_seconds", "read_seconds", "check_seconds", "identify_seconds"]


def synth(binary, path, args):
    if not os.path.exists(path):
        subprocess.run([binary, "data", "synth-series", "--out", path] + args, env=ENV, check=True,
                       stdout=subprocess.DEVNULL)


def check(binary, np_, config, data, report, overrides):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", binary, "data", "check", "--config", config,
           "--report", report, "data.path=" + data] + overrides
    if np_ == 1:
        cmd = cmd[4:]
    env = dict(ENV, OMP_NUM_THREADS=str(max(1, os.cpu_count() // np_)))  # cores per rank
    load = os.getloadavg()[0]
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(out.stdout)
    with open(report) as f:
        ranks = json.load(f)["ranks"]
    result = {phase: max(r[phase] for r in ranks) for phase in PHASES}
    result["load_without_identity_seconds"] = sum(
        max(r[p] for r in ranks) for p in PHASES[:3])
    result.update(wall_seconds=wall, loadavg_1min_before=load)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bin", default=os.path.join(SOURCE, "build", "megabatch"))
    parser.add_argument("--dir", default="/tmp/mb-identity-bench")
    parser.add_argument("--out", default=os.path.join(SOURCE, "bench", "results", "identity-2026-12-07"))
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    demo, large = os.path.join(args.dir, "demo.h5"), os.path.join(args.dir, "large.h5")
    synth(args.bin, demo, DEMO_SYNTH)
    synth(args.bin, large, LARGE_SYNTH)
    config = os.path.join(SOURCE, "configs", "demo.yaml")
    report = os.path.join(args.dir, "report.json")
    cases = [("demo", demo, 1, []), ("demo", demo, 2, []),
             ("large", large, 1, []), ("large", large, 2, []),
             ("large-stream", large, 1, ["data.residency=stream"]),
             ("large-stream", large, 2, ["data.residency=stream"])]
    results = {"uptime_before": subprocess.run(["uptime"], stdout=subprocess.PIPE,
                                               universal_newlines=True).stdout.strip(),
               "cpus": os.cpu_count(), "bytes": {"demo": os.path.getsize(demo),
                                                 "large": os.path.getsize(large)},
               "runs": {}}
    for name, data, np_, overrides in cases:
        check(args.bin, np_, config, data, report, overrides)  # warm the page cache
        runs = [check(args.bin, np_, config, data, report, overrides) for _ in range(args.repeats)]
        key = "%s np%d" % (name, np_)
        results["runs"][key] = runs
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print("%-18s load %.3f s, identity %.3f s (+%.0f%%), wall %.2f s, load average %.2f" % (
            key, median["load_without_identity_seconds"], median["identify_seconds"],
            100 * median["identify_seconds"] / max(1e-9, median["load_without_identity_seconds"]),
            median["wall_seconds"], median["loadavg_1min_before"]), flush=True)
        results.setdefault("medians", {})[key] = median
    results["uptime_after"] = subprocess.run(["uptime"], stdout=subprocess.PIPE,
                                             universal_newlines=True).stdout.strip()
    with open(os.path.join(args.out, "identity_cost.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
