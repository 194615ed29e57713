"""Step time against the bandwidth of the link between two hosts (issue 39 item 3;
docs/benchmarks.md, "A slow link between hosts"), checked against the ring all-reduce cost model.

The two hosts are the test bed of tests/launch/test_multihost.py: two network namespaces joined
by a veth pair, one rank on each, launched by launch/train-multinode.sh over TCP. Each rate is a
token bucket (tc tbf) on both ends' egress. For every model, every rate trains --steps steps in
each of --repeats rounds (the rates take turns within a round, in reversed order every other
round), and reports the medians over the steps after the first --warmup:
  - step_time_s and comm_time_s, the wait for the gradient all-reduce after the backward pass,
    from the run's metrics.jsonl;
  - the cost model's gradient wait and step time (see predict()).
Then MPI_Allreduce alone (bench/dist/AllreduceBench.cpp) at one rate, under Open MPI's TCP
defaults and with every message sent eagerly. Needs root, `ip` and `tc`; netem (delay) is left
out: this kernel has none.

    cmake --build build --target megabatch megabatch_bench_allreduce
    /usr/bin/python3 bench/dist/slow_link_bench.py --bin build/megabatch --repeats 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "launch"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import benchlib  # noqa: E402
import mbtest  # noqa: E402

MSS = 1448  # TCP payload per frame on a 1500-byte MTU with timestamps
FRAME = 1514  # what tbf counts per full frame: payload + TCP 32 + IP 20 + Ethernet 14
BURST_S = 0.004  # the bucket holds 4 ms of traffic (at least two frames)

# name -> (config, data tool arguments, overrides)
MODELS = {
    "demo": ("demo.yaml", ["synth-series", "--rows", "20000", "--streams", "m1:1,m5:5,h1:60"], []),
    "arith-gpt": ("arith-gpt.yaml", ["arith", "--digits", "2", "--ops", "+-", "--problems", "20000",
                                     "--heldout", "100"], []),
}


def burst_bytes(rate_kbit):
    return max(2 * FRAME, int(rate_kbit * 1000 / 8 * BURST_S))


def predict(grad_bytes, world, rate_kbit, compute_s, refilled=True):
    """The ring all-reduce cost model: each rank sends (and receives) 2 (W-1)/W of the gradient
    bytes, in frames of MSS payload; at rate R the wait is those frames' bytes / R, less the
    token bucket's burst, which passes at line rate when the bucket refilled while the rank
    computed (not between back-to-back all-reduces). Latency is left out: the veth's is tens of
    microseconds. Returns (gradient wait, step time)."""
    if rate_kbit == 0:
        return 0.0, compute_s
    payload = 2 * (world - 1) / world * grad_bytes
    wire = payload / MSS * FRAME
    wait = max(0.0, wire - (burst_bytes(rate_kbit) if refilled else 0)) * 8 / (rate_kbit * 1000)
    return wait, compute_s + wait


def make_data(binary, work, name):
    path = os.path.join(work, name + ".h5")
    subprocess.run([binary, "data"] + [MODELS[name][1][0], "--out", path] + MODELS[name][1][1:], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def train(hosts, binary, work, name, data, steps, tag, mpirun_args=""):
    run = os.path.join(work, "%s-%s" % (name, tag))
    config, _, extra = MODELS[name]
    args = ["data.path=" + data, "run.dir=" + run, "train.max_steps=%d" % steps, "run.log_every=1",
            "train.eval_every=100000", "run.checkpoint_every=0", "run.progress=lines"] + extra
    # One thread a rank, unbound: the two "hosts" share this machine's cores, and each would
    # otherwise bind its rank to the same ones.
    options = ["--cpus-per-rank", "1", "--bind", "none", "--cpu"]
    r = hosts.run_on_first(hosts.launcher(work, os.path.join(ROOT, "configs", config), args, options),
                           hosts.environment(mpirun_args, MEGABATCH_BIN=binary), timeout=1200)
    if r.returncode != 0:
        raise RuntimeError("%s at %s failed (exit %d):\n%s" % (name, tag, r.returncode, r.output[-3000:]))
    found = re.search(r"(\d+) parameters in \d+ tensors, (\d+) gradient buckets", r.output)
    records = [rec for rec in mbtest.read_metrics(run) if rec["event"] == "train"]
    return records, int(found.group(1)), int(found.group(2))


def measure_model(args, host, hosts, work, name):
    data = make_data(args.bin, work, name)
    rates = [int(x) for x in args.rates.split(",")]
    samples = {rate: {"step_time_s": [], "comm_time_s": []} for rate in rates}
    params = buckets = None
    for repeat in range(args.repeats):
        for rate in (rates if repeat % 2 == 0 else rates[::-1]):
            if rate:
                hosts.limit(rate, burst_bytes(rate))
            else:
                hosts.unlimit()
            records, params, buckets = train(hosts, args.bin, work, name, data, args.steps,
                                             "%dkbit-%d" % (rate, repeat), args.mpirun_args)
            timed = [rec for rec in records if rec["step"] > args.warmup]
            for key in samples[rate]:
                samples[rate][key].append(statistics.median(rec[key] for rec in timed))
            print("%-10s %9s  repeat %d: step %.1f ms, gradient wait %.1f ms (load %.2f)"
                  % (name, "%d kbit/s" % rate if rate else "full", repeat + 1,
                     1000 * samples[rate]["step_time_s"][-1], 1000 * samples[rate]["comm_time_s"][-1],
                     host.sample_load()), flush=True)
    hosts.unlimit()
    grad_bytes = 4 * params  # dist.grad_dtype: fp32
    full = rates.index(0) if 0 in rates else None
    compute = None
    if full is not None:
        compute = statistics.median(s - c for s, c in zip(samples[0]["step_time_s"], samples[0]["comm_time_s"]))
    table = []
    for rate in rates:
        step = statistics.median(samples[rate]["step_time_s"])
        wait = statistics.median(samples[rate]["comm_time_s"])
        row = {"rate_kbit": rate, "burst_bytes": burst_bytes(rate) if rate else None, "step_time_s": step,
               "comm_time_s": wait, "comm_share": wait / step, "runs": samples[rate]}
        if compute is not None:
            row["model_comm_time_s"], row["model_step_time_s"] = predict(grad_bytes, 2, rate, compute)
            row["step_vs_model"] = step / row["model_step_time_s"]
            if rate:
                row["wait_vs_model"] = wait / row["model_comm_time_s"]
        table.append(row)
    return {"parameters": params, "gradient_bytes": grad_bytes, "buckets": buckets, "compute_s": compute,
            "rates": table}


EAGER_ARGS = ("--mca btl_tcp_eager_limit 1048576 --mca btl_tcp_rndv_eager_limit 1048576 "
              "--mca btl_tcp_max_send_size 1048576")
UNITS = {"B": 1, "KiB": 1024, "MiB": 1 << 20}


def measure_allreduce(args, hosts, work, rate_kbit):
    """MPI_Allreduce alone (bench/dist/AllreduceBench.cpp: megabatch's MPI communicator, fp32) at
    rate_kbit, under Open MPI's TCP defaults and with every message sent eagerly (EAGER_ARGS):
    {variant: [{bytes, time_s, model_s}]}."""
    from test_multihost import IFNAME  # noqa: E402
    hostfile = hosts.hostfile(work)
    hosts.limit(rate_kbit, burst_bytes(rate_kbit))
    found = {}
    try:
        for variant, extra in (("defaults", ""), ("eager", EAGER_ARGS)):
            cmd = ("mpirun -np 2 --hostfile %s --allow-run-as-root --bind-to none --mca plm_rsh_agent %s "
                   "--mca pml ob1 --mca btl self,tcp --mca oob_tcp_if_include %s --mca btl_tcp_if_include %s %s "
                   "%s --max-mib 1 --seconds 2" % (hostfile, hosts.agent, IFNAME, IFNAME, extra, args.allreduce_bin))
            r = subprocess.run(["ip", "netns", "exec", hosts.ns[0], "sh", "-c", cmd], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
            if r.returncode != 0:
                raise RuntimeError("the all-reduce bench failed (exit %d):\n%s" % (r.returncode, r.stdout[-3000:]))
            rows = []
            for size, unit, micros in re.findall(r"^fp32\s+([\d.]+) (B|KiB|MiB)\s+([\d.]+)", r.stdout, re.M):
                nbytes = int(float(size) * UNITS[unit])
                if nbytes >= 4096:
                    rows.append({"bytes": nbytes, "time_s": float(micros) / 1e6,
                                 "model_s": predict(nbytes, 2, rate_kbit, 0.0, refilled=False)[0]})
            found[variant] = rows
            for row in rows:
                print("MPI_Allreduce %-8s %8.0f KiB at %d kbit/s: %.1f ms, model %.1f ms"
                      % (variant, row["bytes"] / 1024, rate_kbit, 1000 * row["time_s"], 1000 * row["model_s"]))
    finally:
        hosts.unlimit()
    return found


def print_table(name, result):
    print("\n%s: %d parameters, %.1f KiB of fp32 gradients in %d bucket(s); compute %.1f ms a step"
          % (name, result["parameters"], result["gradient_bytes"] / 1024, result["buckets"],
             1000 * (result["compute_s"] or 0)))
    print("| link | step (ms) | gradient wait (ms) | wait share | model wait (ms) | model step (ms) | "
          "wait / model | step / model |")
    print("|---|---|---|---|---|---|---|---|")
    for row in result["rates"]:
        print("| %s | %.1f | %.1f | %.0f%% | %.1f | %.1f | %.2f | %.2f |" % (
            "%g Mbit/s" % (row["rate_kbit"] / 1000) if row["rate_kbit"] else "veth, unlimited",
            1000 * row["step_time_s"], 1000 * row["comm_time_s"], 100 * row["comm_share"],
            1000 * row.get("model_comm_time_s", float("nan")), 1000 * row.get("model_step_time_s", float("nan")),
            row.get("wait_vs_model", float("nan")), row.get("step_vs_model", float("nan"))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "megabatch"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rates", default="0,100000,30000,10000,3000",
                        help="link rates in kbit/s, 0 = the veth at full speed (needed for the model)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--allreduce-bin", default=os.path.join(ROOT, "build", "bench", "megabatch_bench_allreduce"),
                        help="cmake --build build --target megabatch_bench_allreduce; '' leaves that part out")
    parser.add_argument("--allreduce-kbit", type=int, default=3000)
    parser.add_argument("--mpirun-args", default="", help="more mpirun options, e.g. Open MPI MCA settings")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.bin = os.path.abspath(args.bin)
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    benchlib.check_repeats(args.repeats)
    from test_multihost import TwoHosts  # noqa: E402
    netem, answer = TwoHosts.has_netem()
    host = benchlib.Host(threads=2, binaries={"megabatch": args.bin})
    result = {"world": 2, "mpirun_args": args.mpirun_args, "netem": netem, "netem_answer": answer, "steps": args.steps, "warmup": args.warmup,
              "repeats": args.repeats, "mss": MSS, "frame": FRAME, "burst_s": BURST_S, "models": {}}
    with tempfile.TemporaryDirectory(prefix="mb-slowlink-") as work:
        hosts = TwoHosts(work)
        try:
            for name in args.models.split(","):
                result["models"][name] = measure_model(args, host, hosts, work, name)
            if args.allreduce_bin:
                result["allreduce"] = {"rate_kbit": args.allreduce_kbit, "eager_args": EAGER_ARGS,
                                       "variants": measure_allreduce(args, hosts, work, args.allreduce_kbit)}
        finally:
            hosts.close()
    for name, model in result["models"].items():
        print_table(name, model)
    if "allreduce" in result:
        print("\nMPI_Allreduce alone at %d kbit/s" % result["allreduce"]["rate_kbit"])
        print("| size | model (ms) | Open MPI defaults (ms) | / model | all eager (ms) | / model |")
        print("|---|---|---|---|---|---|")
        variants = result["allreduce"]["variants"]
        for plain, eager in zip(variants["defaults"], variants["eager"]):
            print("| %.0f KiB | %.1f | %.1f | %.2f | %.1f | %.2f |" % (
                plain["bytes"] / 1024, 1000 * plain["model_s"], 1000 * plain["time_s"],
                plain["time_s"] / plain["model_s"], 1000 * eager["time_s"], eager["time_s"] / eager["model_s"]))
    benchlib.finish("slow_link_bench", result, host, out=args.out)


if __name__ == "__main__":
    main()
