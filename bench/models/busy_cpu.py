"""Step time of one process on a busy CPU: the demo LSTM and the tiny GPT trained as 1 rank x all
cores (under each OpenMP wait policy), as 1 rank x 1 thread, and as ranks x 1 thread, first on an
idle machine and then while one CPU burner per core (started by this bench) competes for every
core. Variants alternate their order from one repeat to the next.

Variants (OMP_WAIT_POLICY, GOMP_SPINCOUNT and KMP_BLOCKTIME are removed from the environment
first, so that each variant sets only its own):
  chosen   1 rank, no train.threads and no OpenMP variable: what megabatch chooses by itself
           (threads from the CPUs it may use and the load at start, and its wait policy)
  spin     1 x cores, GOMP_SPINCOUNT=300000: libgomp's own default spin, on every core: what
           megabatch 0.1.0 did by default
  passive  1 x cores, OMP_WAIT_POLICY=passive
  short    1 x cores, GOMP_SPINCOUNT=--short-spin
  1thread  1 x 1 (train.threads=1)
  ranks    cores x 1 (mpirun -np cores, train.threads=1)

Step time is the median over megabatch's log windows (metrics.jsonl `step_time_s`, the first
window dropped as warm-up). Ratios are medians of per-repeat ratios: on the idle machine each
variant against `spin` (today's default), under load each against `1thread`.

    /usr/bin/python3 bench/models/busy_cpu.py build [--models lstm,gpt] [--repeats 5]
        [--steps 80] [--loaded-steps 24] [--variants chosen,spin,passive,short,1thread,ranks] [--short-spin 10000]
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
from cores_split import MODELS, ROOT  # noqa: E402,F401

POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")
BURNER = "while True: pass"


def variants(cores, short_spin):
    """name -> (ranks, train.threads or None for the default, extra environment)"""
    return {
        "chosen": (1, None, {}),
        "spin": (1, cores, {"GOMP_SPINCOUNT": "300000"}),
        "passive": (1, cores, {"OMP_WAIT_POLICY": "passive"}),
        "short": (1, cores, {"GOMP_SPINCOUNT": str(short_spin)}),
        "1thread": (1, 1, {}),
        "ranks": (cores, 1, {}),
    }


def step_ms(binary, model, data, variant, steps, log_every, run_dir):
    ranks, threads, extra = variant
    config = os.path.join(ROOT, "configs", MODELS[model][0])
    args = [binary, "train", "--config", config, "data.path=" + data, "run.dir=" + run_dir,
            "run.resume=never", "train.max_steps=%d" % steps, "train.eval_every=0",
            "run.log_every=%d" % log_every, "run.checkpoint_every=0", "train.eval_batches=1",
            "run.progress=lines"]
    if threads is not None:
        args.append("train.threads=%d" % threads)
    if ranks > 1:
        args = [os.environ.get("MEGABATCH_MPIEXEC", "mpirun"), "-np", str(ranks), "--oversubscribe",
                "--bind-to", "none"] + args
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARIABLES}
    env.update(extra, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=env, universal_newlines=True)
    threads_line = [line for line in proc.stdout.splitlines() if "CPU thread(s) per rank" in line]
    threads_used = int(threads_line[0].split("] info: ")[1].split()[0]) if threads_line else 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    windows = [r for r in records if r["event"] == "train"][1:]
    return statistics.median(1000.0 * r["step_time_s"] for r in windows), threads_used


def start_burners(count):
    return [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(count)]


def stop_burners(burners):
    for p in burners:
        p.kill()
    for p in burners:
        p.wait()


def run_phase(name, binary, model, data, chosen, args, workdir):
    steps, log_every = (args.loaded_steps, args.loaded_log_every) if name == "loaded" else (
        args.steps, args.log_every)
    times = {v: [] for v in chosen}
    threads = {v: [] for v in chosen}
    names = list(chosen)
    for r in range(args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for v in order:
            run_dir = os.path.join(workdir, "%s-%s-%s-%d" % (model, name, v, r))
            ms, used = step_ms(binary, model, data, chosen[v], steps, log_every, run_dir)
            times[v].append(ms)
            threads[v].append(used)
        print("%-4s %-6s repeat %d: %s; load %s" % (
            model, name, r, ", ".join("%s %.1f (%dt)" % (v, times[v][-1], threads[v][-1]) for v in names),
            "/".join(str(x) for x in benchlib.load_average())), flush=True)
    return times, threads


def summarise(model, phase, times, reference):
    ratios = {v: benchlib.median_ratio(times[v], times[reference]) for v in times}
    print("%-4s %-6s median step (ms) and ratio to %s: %s" % (model, phase, reference, ", ".join(
        "%s %.1f (%.2fx)" % (v, statistics.median(times[v]), ratios[v]) for v in times)), flush=True)
    return {"step_ms": times, "reference": reference, "ratio": ratios}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("--models", default="lstm,gpt")
    parser.add_argument("--variants", default="chosen,spin,passive,short,1thread,ranks")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--loaded-steps", type=int, default=24,
                        help="steps under load, where the runtime's default spin takes seconds a step")
    parser.add_argument("--loaded-log-every", type=int, default=6)
    parser.add_argument("--short-spin", type=int, default=10000)
    parser.add_argument("--phases", default="idle,loaded")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    cores = len(os.sched_getaffinity(0))
    every = variants(cores, args.short_spin)
    chosen = {v: every[v] for v in args.variants.split(",")}
    host = benchlib.Host(cores, binaries={"megabatch": binary})
    benchlib.check_repeats(args.repeats)
    workdir = tempfile.mkdtemp(prefix="mb-busy-")
    result = {"cores": cores, "short_spin": args.short_spin, "steps": args.steps,
              "loaded_steps": args.loaded_steps, "burners": cores,
              "models": {}}
    data = {}
    for model in args.models.split(","):
        data[model] = os.path.join(workdir, model + ".h5")
        subprocess.run([binary, "data"] + MODELS[model][1] + ["--out", data[model]], check=True,
                       stdout=subprocess.DEVNULL)
        result["models"][model] = {}
    # Every idle phase first: the load average lags, and after a loaded phase it would mark the
    # idle figures as loaded for a minute although the burners have stopped.
    for phase in args.phases.split(","):
        for model in data:
            burners = start_burners(cores) if phase == "loaded" else []
            try:
                times, threads = run_phase(phase, binary, model, data[model], chosen, args, workdir)
            finally:
                stop_burners(burners)
            if phase == "idle":
                host.sample_load()
            reference = "spin" if phase == "idle" else "1thread"
            if reference in times:
                result["models"][model][phase] = summarise(model, phase, times, reference)
                result["models"][model][phase]["threads"] = threads
    # The loaded phase's own load: the burners and the training, each on every core.
    host.threads = 2 * cores if "loaded" in args.phases else cores
    benchlib.finish("busy_cpu", result, host, args.out)


if __name__ == "__main__":
    main()
