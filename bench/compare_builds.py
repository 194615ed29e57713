"""Two builds of megabatch side by side, for a change that must not cost speed (a refactor):
the host-resident window gather of the LSTM seed shape (bench/data/gather_bench.py's file and
`megabatch data check`) and CPU training throughput of the demo LSTM and the tiny GPT
(bench/models/cpu_throughput.py's runs), one thread each.

    /usr/bin/python3 bench/compare_builds.py NEW_BUILD OLD_BUILD [--repeats 7]

Every repeat runs the new and the old build back to back, in alternating order, so that load
on the host hits both alike; the ratio reported is the median of the per-repeat ratios
old / new (> 1: the new build is faster). Training is compared on wall time per step and on
CPU time per step (less sensitive to other load on the machine).

    /usr/bin/python3 bench/compare_builds.py NEW_BUILD OLD_BUILD --instructions

counts instructions instead (valgrind's callgrind, one thread): per gathered batch and per
training step, as the difference between a long and a short run (start-up and loading cancel).
Instruction counts do not move with load on the host, so they settle "no regression" on a busy
machine where times cannot; they do not see memory stalls, which the timed mode does.
Counting is slow (the tiny GPT's row takes about 40 minutes a build), so a build can be counted
alone, before the change is built over it, and compared later:

    /usr/bin/python3 bench/compare_builds.py OLD_BUILD --instructions --out old.json
    /usr/bin/python3 bench/compare_builds.py NEW_BUILD --instructions --old-counts old.json
    # or join two one-build files without counting: NEW --instructions --old-counts A --new-counts B
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "data"))
sys.path.insert(0, os.path.join(HERE, "models"))
import benchlib  # noqa: E402
import cpu_throughput  # noqa: E402
import gather_bench  # noqa: E402

ROOT = os.path.dirname(HERE)


def gather_config(workdir, path):
    config = os.path.join(workdir, "gather.yaml")
    with open(config, "w") as f:
        f.write("data:\n  path: %s\n  layout: series\n  streams: [{name: m1, window: %d}]\n"
                "  canonical_shards: 16\n  residency: host\ntrain: {global_batch: %d}\n"
                % (path, gather_bench.WINDOW, gather_bench.BATCH))
    return config


def paired(repeats, run_new, run_old):
    """[(new, old)] per repeat, alternating which runs first."""
    pairs = []
    for r in range(repeats):
        if r % 2 == 0:
            new, old = run_new(r), run_old(r)
        else:
            old, new = run_old(r), run_new(r)
        pairs.append((new, old))
    return pairs


def summarise(name, unit, pairs):
    new = statistics.median(p[0] for p in pairs)
    old = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(p[1] / p[0] for p in pairs)
    spread = "%.2f..%.2f" % (min(p[1] / p[0] for p in pairs), max(p[1] / p[0] for p in pairs))
    print("| %s | %.3f %s | %.3f %s | **%.3f** | %s |" % (name, new, unit, old, unit, ratio, spread), flush=True)


# Debian's LibTorch loads OpenCV, which loads libjxl and so libhwy (Highway). libhwy's load-time
# initialiser probes the timer with an instruction valgrind 3.19 does not emulate on AMD EPYC, and
# valgrind stops with SIGILL before main(). libhwy calls that probe through its PLT, so a
# preloaded definition replaces it. megabatch never uses Highway's timers; both builds get the
# same shim, so it cancels in the ratio (and in each long - short difference).
HWY_SHIM_SOURCE = "#include <cstdint>\nnamespace hwy { namespace platform {\n" \
                  "uint64_t TimerResolution() { return 1; }\n} }\n"


def valgrind_env(binary, workdir):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    libs = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, universal_newlines=True).stdout
    if "libhwy" not in libs:
        return env
    source, shim = os.path.join(workdir, "hwy_shim.cpp"), os.path.join(workdir, "libhwy_shim.so")
    with open(source, "w") as f:
        f.write(HWY_SHIM_SOURCE)
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", source, "-o", shim], check=True)
    env["LD_PRELOAD"] = shim
    return env


def instructions(cmd, env):
    """Instructions the command executes (callgrind, one thread; `env` from valgrind_env)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True)
    if out.returncode != 0:
        raise SystemExit("%s failed:\n%s" % (" ".join(cmd), out.stderr[-3000:]))
    return int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def per_unit(make_cmd, short, long, env):
    """Instructions per unit (batch or step): (I(long) - I(short)) / (long - short)."""
    return (instructions(make_cmd(long), env) - instructions(make_cmd(short), env)) / (long - short)


def train_cmd(binary, config, path, run_dir):
    def make(steps):
        return [binary, "train", "--config", config, "data.path=" + path, "run.dir=%s-%d" % (run_dir, steps),
                "run.resume=never", "train.max_steps=%d" % steps, "train.eval_every=0", "run.log_every=%d" % steps,
                "run.checkpoint_every=0", "train.eval_batches=1", "train.threads=1", "train.precision=fp32",
                "run.progress=lines"]
    return make


def count_instructions(binaries, workdir, config, args):
    """{row: {side: instructions}}. Sides already counted (--old-counts, --new-counts) are not
    counted again; with both given nothing runs, and the table joins the two files."""
    print("\n| measure | new | old | old / new |")
    print("|---|---|---|---|")
    counted = {}
    for path in (args.old_counts, args.new_counts):
        for name, counts in (load_counts(path) if path else {}).items():
            counted.setdefault(name, {}).update(counts)
    if not binaries:
        for name, counts in counted.items():
            print_row(name, counts)
        return counted
    env = valgrind_env(next(iter(binaries.values())), workdir)
    rows = {}

    def row(name, counts):
        counts = dict(counted.get(name, {}), **counts)
        rows[name] = counts
        print_row(name, counts)

    report = os.path.join(workdir, "report.json")
    if not args.skip_gather:
        row("gather, instructions per batch (LSTM seed shape)",
            {side: per_unit(lambda n, b=b: [b, "data", "check", "--config", config, "--batches", str(n), "--report",
                                            report], 10, 10 + args.batches, env) for side, b in binaries.items()
             if side not in counted.get("gather, instructions per batch (LSTM seed shape)", {})})
    demo, arith = os.path.join(workdir, "demo-small.h5"), os.path.join(workdir, "arith-small.h5")
    # Small files: loading and value checks cancel in the difference, but run ~50x slower here.
    for tool, out, extra in (("synth-series", demo, ["--rows", "20000"]),
                             ("arith", arith, ["--problems", "5000", "--heldout", "100"])):
        subprocess.run([next(iter(binaries.values())), "data", tool, "--out", out] + extra, check=True, stdout=subprocess.DEVNULL)
    models = {"lstm": ("demo LSTM", "demo.yaml", demo), "gpt": ("tiny GPT", "arith-gpt.yaml", arith)}
    for name, cfg, path in (models[m] for m in args.models):
        counts, label = {}, "%s, instructions per train step" % name
        for side, b in binaries.items():
            if side in counted.get(label, {}):
                continue
            make = train_cmd(b, os.path.join(ROOT, "configs", cfg), path, os.path.join(workdir, side + name[-3:]))
            counts[side] = per_unit(make, 5, 5 + args.steps, env)
        row(label, counts)
    return rows


def relabel_as_old(path):
    """A copy of a one-build JSON whose "new" counts are labelled "old"."""
    import json
    with open(path) as f:
        data = json.load(f)
    data["counts"] = {row: {"old": counts["new"]} for row, counts in data["counts"].items()}
    copy = os.path.join(tempfile.mkdtemp(prefix="mb-old-counts-"), "old.json")
    with open(copy, "w") as f:
        json.dump(data, f)
    return copy


def print_row(name, counts):
    new, old = counts.get("new", float("nan")), counts.get("old", float("nan"))
    print("| %s | %.6g | %.6g | **%.4f** |" % (name, new, old, old / new), flush=True)


def load_counts(path):
    """The "counts" of an earlier --instructions run's JSON: {row: {side: instructions}}."""
    import json
    with open(path) as f:
        return json.load(f)["counts"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("new")
    parser.add_argument("old", nargs="?", default="",
                        help="with --instructions, may be left out to count the new build alone (its JSON can be "
                             "given as --old-counts later, e.g. counting the old build before rebuilding)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--skip-gather", action="store_true", help="compare training only")
    parser.add_argument("--models", default="lstm,gpt", type=lambda s: s.split(","),
                        help="models to train, of lstm,gpt (e.g. --models gpt --skip-gather for one row)")
    parser.add_argument("--out", default="", help="raw JSON (default: bench/results/compare_builds-DATE.json)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions with callgrind (use small --batches and --steps, e.g. 40 and 10)")
    parser.add_argument("--old-counts", default="",
                        help="with --instructions: the JSON of a one-build run (its \"new\" side) to use as the old "
                             "side instead of counting OLD_BUILD")
    parser.add_argument("--new-counts", default="",
                        help="with --instructions: a one-build run's JSON to use as the new side instead of "
                             "counting NEW_BUILD (with --old-counts too, only joins the two files)")
    args = parser.parse_args()
    if args.old_counts:
        args.old_counts = relabel_as_old(args.old_counts)
    sides = (("new", args.new), ("old", args.old)) if args.old else (("new", args.new),)
    if not args.old and not args.instructions:
        parser.error("OLD_BUILD is needed to time two builds")
    binaries = {side: os.path.join(os.path.abspath(d), "megabatch") for side, d in sides if d}
    if args.old_counts:
        binaries.pop("old", None)
    if args.new_counts:
        binaries.pop("new", None)
    host = benchlib.Host(1, binaries=dict(binaries))
    benchlib.check_repeats(args.repeats)
    workdir = tempfile.mkdtemp(prefix="mb-compare-")
    series = os.path.join(workdir, "series.h5")
    gather_bench.write_series(series, args.rows)
    config = gather_config(workdir, series)
    report = os.path.join(workdir, "report.json")
    if args.instructions:
        counts = count_instructions(binaries, workdir, config, args)
        benchlib.finish("compare_builds_instructions", {"new": args.new, "old": args.old, "counts": counts}, host,
                        args.out)
        return

    def gather(side):
        return lambda r: gather_bench.ours(binaries[side], config, args.batches, report, threads=1)

    rows = [("gather, LSTM seed shape (ms per batch, 1 thread)", "ms", paired(args.repeats, gather("new"), gather("old")))]
    data = cpu_throughput.make_data(binaries["new"], workdir)
    for model in args.models:
        name = cpu_throughput.LABELS[model]

        def train(side, model=model, name=name):
            def run(r):
                run_dir = os.path.join(workdir, "%s-%s-%d" % (model, side, r))
                measured = cpu_throughput.time_megabatch(binaries[side], model, data[model], run_dir, 1,
                                                         args.steps, args.warmup)
                host.sample_load()
                return measured["wall_s"], measured["cpu_s"]
            return run
        pairs = paired(args.repeats, train("new"), train("old"))
        rows.append(("%s train step, wall (ms)" % name, "ms", [(1e3 * n[0], 1e3 * o[0]) for n, o in pairs]))
        rows.append(("%s train step, CPU (ms)" % name, "ms", [(1e3 * n[1], 1e3 * o[1]) for n, o in pairs]))
    print("\n| measure | new (median) | old (median) | old / new (median of per-repeat ratios) | range |")
    print("|---|---|---|---|---|")
    for name, unit, pairs in rows:
        summarise(name, unit, pairs)
    benchlib.finish("compare_builds", {"new": args.new, "old": args.old, "repeats": args.repeats,
                                       "rows": [{"measure": n, "unit": u, "pairs_new_old": p} for n, u, p in rows]},
                    host, args.out)


if __name__ == "__main__":
    main()
