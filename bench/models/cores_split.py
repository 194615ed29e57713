"""How megabatch best uses a machine's cores on the CPU: R ranks x T threads per rank for the
same R x T, e.g. 2 ranks x 1 thread against 1 rank x 2 threads on a 2-core machine, training the
same config (the demo LSTM, the tiny GPT, the GIN) side by side, alternating, 5 repeats.

Throughput is the global samples per second of megabatch's own log windows (metrics.jsonl,
`samples_per_s`), the first window (warm-up) dropped. The ratio is the median of the per-repeat
ratios of the first layout to the second (> 1: the first is faster).

    /usr/bin/python3 bench/models/cores_split.py build [--layouts 2x1,1x2] [--repeats 5]
        [--steps 200] [--models lstm,gpt,gin]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import benchlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODELS = {  # config, data tool and its arguments
    "lstm": ("demo.yaml", ["synth-series"]),
    "gpt": ("arith-gpt.yaml", ["arith"]),
    "gin": ("graphs-gin.yaml", ["synth-graphs"]),
}


def run_layout(binary, model, data, ranks, threads, steps, log_every, run_dir):
    config = os.path.join(ROOT, "configs", MODELS[model][0])
    args = [binary, "train", "--config", config, "data.path=" + data, "run.dir=" + run_dir,
            "run.resume=never", "train.max_steps=%d" % steps, "train.eval_every=0",
            "run.log_every=%d" % log_every, "run.checkpoint_every=0", "train.eval_batches=1",
            "train.threads=%d" % threads, "run.progress=lines"]
    if ranks > 1:
        args = [os.environ.get("MEGABATCH_MPIEXEC", "mpirun"), "-np", str(ranks), "--oversubscribe",
                "--bind-to", "none"] + args
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    windows = [r["samples_per_s"] for r in records if r["event"] == "train"][1:]
    return statistics.median(windows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("--layouts", default="2x1,1x2", help="RANKSxTHREADS, comma-separated")
    parser.add_argument("--models", default="lstm,gpt,gin")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    layouts = [tuple(int(x) for x in layout.split("x")) for layout in args.layouts.split(",")]
    host = benchlib.Host(max(r * t for r, t in layouts), binaries={"megabatch": binary})
    benchlib.check_repeats(args.repeats)
    workdir = tempfile.mkdtemp(prefix="mb-cores-")
    result = {"layouts": args.layouts, "steps": args.steps, "models": {}}
    for model in args.models.split(","):
        data = os.path.join(workdir, model + ".h5")
        subprocess.run([binary, "data"] + MODELS[model][1] + ["--out", data], check=True,
                       stdout=subprocess.DEVNULL)
        rates = {layout: [] for layout in layouts}
        for r in range(args.repeats):
            order = layouts[r % len(layouts):] + layouts[:r % len(layouts)]
            for ranks, threads in order:
                run_dir = os.path.join(workdir, "%s-%dx%d-%d" % (model, ranks, threads, r))
                rates[(ranks, threads)].append(run_layout(binary, model, data, ranks, threads, args.steps,
                                                          args.log_every, run_dir))
            host.sample_load()
            print("%-5s repeat %d: %s, load %.2f" % (model, r, ", ".join(
                "%dx%d %.0f samples/s" % (l[0], l[1], rates[l][-1]) for l in layouts), benchlib.load_average()[0]),
                flush=True)
        first, second = layouts[0], layouts[1]
        ratio = benchlib.median_ratio(rates[first], rates[second])
        result["models"][model] = {"%dx%d" % l: rates[l] for l in layouts}
        result["models"][model]["ratio_%dx%d_over_%dx%d" % (first + second)] = ratio
        print("%-5s median samples/s: %s; %dx%d / %dx%d = %.2f (median of per-repeat ratios)" % (
            model, ", ".join("%dx%d %.0f" % (l[0], l[1], statistics.median(rates[l])) for l in layouts),
            first[0], first[1], second[0], second[1], ratio), flush=True)
    benchlib.finish("cores_split", result, host, args.out)


if __name__ == "__main__":
    main()
