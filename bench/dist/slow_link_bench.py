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
Needs root, `ip` and `tc`; netem (delay) is left out: this kernel has none.

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


def predict(grad_bytes, world, rate_kbit, compute_s):
    """The ring all-reduce cost model: each rank sends (and receives) 2 (W-1)/W of the gradient
    bytes, in frames of MSS payload; at rate R the wait is those frames' bytes / R, less the
    bucket's burst, which passes at line rate (it refills while the rank computes). Latency is
    left out: the veth's is tens of microseconds. Returns (gradient wait, step time)."""
    if rate_kbit == 0:
        return 0.0, compute_s
    payload = 2 * (world - 1) / world * grad_bytes
    wire = payload / MSS * FRAME
    wait = max(0.0, wire - burst_bytes(rate_kbit)) * 8 / (rate_kbit * 1000)
    return wait, compute_s + wait


def make_data(binary, work, name):
    path = os.path.join(work, name + ".h5")
    subprocess.run([binary, "data"] + [MODELS[name][1][0], "--out", path] + MODELS[name][1][1:], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def train(hosts, binary, work, name, data, steps, tag, mpirun_args=""):
    from test_multihost import IFNAME  # noqa: E402
    run = os.path.join(work, "%s-%s" % (name, tag))
    hostfile = os.path.join(work, "hosts")
    with open(hostfile, "w") as f:
        f.write("%s slots=1\n%s slots=1\n" % tuple(hosts.addr))
    config, _, extra = MODELS[name]
    # One thread a rank, unbound: the two "hosts" share this machine's cores, and each would
    # otherwise bind its rank to the same ones.
    cmd = [os.path.join(ROOT, "launch", "train-multinode.sh"), "--hostfile", hostfile, "--net", "tcp",
           "--ifname", IFNAME, "--cpus-per-rank", "1", "--bind", "none", "--cpu", os.path.join(ROOT, "configs", config), "data.path=" + data, "run.dir=" + run,
           "train.max_steps=%d" % steps, "run.log_every=1", "train.eval_every=100000",
           "run.checkpoint_every=0", "run.progress=lines"] + extra
    inner = "hostname %s; exec %s" % (hosts.names[0], " ".join("'%s'" % c.replace("'", "'\\''") for c in cmd))
    env = dict(os.environ, MEGABATCH_BIN=binary, MB_MPIRUN_ARGS="--mca plm_rsh_agent %s %s" % (hosts.agent, mpirun_args))
    r = subprocess.run(["ip", "netns", "exec", hosts.ns[0], "unshare", "--uts", "/bin/sh", "-c", inner],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
                       timeout=1200)
    if r.returncode != 0:
        raise RuntimeError("%s at %s failed (exit %d):\n%s" % (name, tag, r.returncode, r.stdout[-3000:]))
    import json
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    found = re.search(r"(\d+) parameters in \d+ tensors, (\d+) gradient buckets", r.stdout)
    return [rec for rec in records if rec.get("event") == "train"], int(found.group(1)), int(found.group(2))


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
        finally:
            hosts.close()
    for name, model in result["models"].items():
        print_table(name, model)
    benchlib.finish("slow_link_bench", result, host, out=args.out)


if __name__ == "__main__":
    main()
