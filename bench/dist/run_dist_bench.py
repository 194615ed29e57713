#!/usr/bin/env python3
"""Distributed-core benchmarks (docs/benchmarks.md, section "Distributed"), side by side in one run.

1. MPI all-reduce bandwidth against message size, 2 ranks (megabatch_bench_allreduce).
2. DDP step overhead on CPU, LSTM demo shape (LSTM over 60 steps, hidden 32, batch 64 per rank):
   W=1 plain LibTorch (baseline), W=1 through the GradientReducer (single-process backend), and
   W=2 as two independent plain processes (no communication: the cost of sharing the machine),
   and W=2 through the GradientReducer over MPI, each with 1 intra-op thread per rank. They run
   interleaved, `--repeats` times; each run reports its median step time; the table shows the
   median over runs and the ratios to W=1 plain (the issue's target: <= 1.15) and to W=2
   independent (the DDP cost proper).

Usage: /usr/bin/python3 bench/dist/run_dist_bench.py --build build [--repeats 7]
Build first: cmake --build build --target megabatch_benches
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_pml": "ob1", "OMPI_MCA_osc": "^ucx",
    "OMP_NUM_THREADS": "1",
}


def run(cmd):
    env = dict(os.environ)
    env.update(MPI_ENV)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          universal_newlines=True, timeout=600)
    if proc.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), proc.stdout, proc.stderr))
    return proc.stdout


def step_ms(output):
    match = re.search(r"median_step_ms=([\d.]+)", output)
    if not match:
        sys.exit("no median_step_ms in:\n" + output)
    return float(match.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip-allreduce", action="store_true")
    args = parser.parse_args()
    allreduce = os.path.join(args.build, "bench", "megabatch_bench_allreduce")
    ddp = os.path.join(args.build, "bench", "megabatch_bench_ddp_step")

    if not args.skip_allreduce:
        print(run(["mpirun", "-np", "2", allreduce, "--max-mib", "64"]))

    # "W=2 independent" runs two plain processes without any communication: the step time that
    # W=2 would have if DDP cost nothing, given how the ranks share this machine's cores.
    variants = [
        ("W=1 plain LibTorch (baseline)", 1, ["--plain"]),
        ("W=1 GradientReducer (single)", 1, []),
        ("W=2 independent, no communication", 2, ["--plain"]),
        ("W=2 GradientReducer (MPI)", 2, []),
    ]
    times = {name: [] for name, _, _ in variants}
    for repeat in range(args.repeats):
        order = variants if repeat % 2 == 0 else list(reversed(variants))
        for name, np, extra in order:
            out = run(["mpirun", "-np", str(np), ddp, "--steps", str(args.steps)] + extra)
            times[name].append(step_ms(out))
    base = statistics.median(times[variants[0][0]])
    independent = statistics.median(times[variants[2][0]])
    print("| variant | median step (ms) | runs (ms) | ratio to W=1 plain | ratio to W=2 independent |")
    print("|---|---|---|---|---|")
    for name, _, _ in variants:
        med = statistics.median(times[name])
        runs = ", ".join("%.1f" % t for t in times[name])
        print("| %s | %.2f | %s | %.3f | %.3f |" % (name, med, runs, med / base, med / independent))
    print("\nload average at the end: %s" % open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
