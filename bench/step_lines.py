"""How the step lines account for their time: the demo (2 ranks, CPU) with an evaluation every 100
steps, several rounds. For every step line: the sum of its parts (data, fwd-bwd, comm, opt,
other), and for the lines that follow an evaluation, their samples/s against the median of the
lines that do not. Before evaluations were left out of the step time, the line after one
showed about half the others' samples/s on this data (the evaluation took as long as the 20
steps of a window); a second set of rounds slows every evaluation batch by 40 ms
(MEGABATCH_FAULT_EVAL_BATCH_MS) so that an evaluation counted in would show at a fraction.

    /usr/bin/python3 bench/step_lines.py --bin build/megabatch [--rounds 3] [--out FILE.json]

Prints the load average with the results (nothing else should run).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

LINE = re.compile(r"step (\d+)/\d+ .*\| (\d+) samples/s \| step ([0-9.]+) ms \(data (\d+)% fwd-bwd (\d+)% "
                  r"comm (\d+)% opt (\d+)% other (\d+)%\)(.*)")
HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_round(binary, data, slow_eval_ms):
    with tempfile.TemporaryDirectory(prefix="mbsteplines-") as run_dir:
        env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if slow_eval_ms:
            env["MEGABATCH_FAULT_EVAL_BATCH_MS"] = str(slow_eval_ms)
        cmd = ["mpirun", "-np", "2", "--oversubscribe", binary, "train", "--config",
               os.path.join(HERE, "..", "configs", "demo.yaml"), "data.path=" + data, "run.dir=" + run_dir,
               "train.eval_every=100", "run.progress=lines"]
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, check=True).stdout
    lines = [m for m in map(LINE.search, out.splitlines()) if m]
    sums = [sum(int(m.group(i)) for i in range(4, 9)) for m in lines]
    after = [m for m in lines if "besides: eval" in m.group(9)]
    others = [int(m.group(2)) for m in lines[1:] if m not in after]  # the first holds the warm-up
    median = statistics.median(others)
    ratios = [int(m.group(2)) / median for m in after]
    return {"slow_eval_ms": slow_eval_ms, "lines": len(lines), "part_sum_min": min(sums), "part_sum_max": max(sums),
            "median_samples_per_s": median,
            "spread_of_other_lines": [min(others) / median, max(others) / median],
            "after_eval_ratios": ratios, "after_eval_median_ratio": statistics.median(ratios),
            "eval_seconds": [float(re.search(r"eval ([0-9.e+-]+) s", m.group(9)).group(1)) for m in after]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build/megabatch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    with tempfile.TemporaryDirectory(prefix="mbsteplines-data-") as work:
        data = os.path.join(work, "demo.h5")
        subprocess.run([binary, "data", "synth-series", "--out", data], check=True, stdout=subprocess.DEVNULL)
        results = {"load_at_start": load(), "rounds": []}
        for slow in (0, 40):
            for _ in range(args.rounds):
                r = one_round(binary, data, slow)
                results["rounds"].append(r)
                print("slow eval %2d ms: %d lines, parts sum %d-%d%%; other lines %.2f-%.2fx their median %.0f "
                      "samples/s; after an eval (%.2f-%.2f s): %s, median %.3f" % (
                          slow, r["lines"], r["part_sum_min"], r["part_sum_max"], r["spread_of_other_lines"][0],
                          r["spread_of_other_lines"][1], r["median_samples_per_s"], min(r["eval_seconds"]),
                          max(r["eval_seconds"]), " ".join("%.3f" % x for x in r["after_eval_ratios"]),
                          r["after_eval_median_ratio"]), flush=True)
        results["load_at_end"] = load()
    print("load average: at start %s, at end %s" % (results["load_at_start"], results["load_at_end"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
