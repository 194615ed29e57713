"""Operator profiles of the CPU models whose speed targets issue 27 missed, megabatch against its
PyTorch baseline, each side's Chrome trace fed to bench/profile_ops.py:

    /usr/bin/python3 bench/models/profile_missed.py build OUT_DIR [--models gin,gat,lstm,gpt]

gin: the GIN of bench/graphs/gnn_bench.py at batch 32 (steps 21..40 of megabatch, 20 steps of
     the baseline after its warm-up);
gat: the panel GAT of bench/models/panel_gat_bench.py with cached graphs (megabatch's epoch 2,
     the baseline's "after");
lstm, gpt: the models of bench/models/cpu_throughput.py on LibTorch 1.13.
Writes OUT_DIR/<model>-megabatch.json, <model>-pytorch.json and <model>-ops.txt (the table).
Profiled steps are slower than timed ones: compare operator counts first, self times second.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "graphs"))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))


def run_megabatch(cmd, trace, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1", MEGABATCH_PROFILE=trace, MEGABATCH_PROFILE_STEPS=steps)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def with_trace(trace, fn):
    os.environ["MEGABATCH_PROFILE"] = trace
    try:
        fn()
    finally:
        del os.environ["MEGABATCH_PROFILE"]


def profile_gin(binary, tmp, out):
    import gnn_bench
    data = os.path.join(tmp, "graphs.h5")
    subprocess.run([binary, "data", "synth-graphs", "--out", data, "--graphs", "3000"], check=True,
                   stdout=subprocess.DEVNULL)
    run_megabatch(gnn_bench.megabatch_command(binary, data, os.path.join(tmp, "gin"), 1, 32, 60, 20),
                  os.path.join(out, "gin-megabatch.json"), "21:40")
    with_trace(os.path.join(out, "gin-pytorch.json"), lambda: gnn_bench.time_python(data, 32, 1, 40, 20))
    return 20


def profile_gat(binary, tmp, out):
    import panel_gat_bench as gat
    import torch
    data = os.path.join(tmp, "panel.h5")
    subprocess.run([binary, "data", "synth-panel", "--out", data, "--dates", "330", "--instruments", "1000",
                    "--features", "8"], check=True, stdout=subprocess.DEVNULL)
    args = argparse.Namespace(binary=binary, window=20, hidden=32, heads=4, gat_layers=2, k=10, lookback=60,
                              min_periods=20, batch=4, threads=1, device="cpu", log_every=16, steps=10,
                              warmup=3)
    # The bench's own megabatch run; 76 steps per epoch, so steps 80..84 are in epoch 2, every
    # graph cached.
    os.environ.update(MEGABATCH_PROFILE=os.path.join(out, "gat-megabatch.json"), MEGABATCH_PROFILE_STEPS="80:84")
    try:
        gat.megabatch(args, data, tmp, 0)
    finally:
        del os.environ["MEGABATCH_PROFILE"], os.environ["MEGABATCH_PROFILE_STEPS"]
    dates = list(range(59, 59 + int((330 - 59) * 0.96)))
    with_trace(os.path.join(out, "gat-pytorch.json"),
               lambda: gat.baseline(args, data, dates, cached=True, device=torch.device("cpu")))
    return 5


def profile_series(model, binary, tmp, out):
    import cpu_throughput as ct
    data = ct.make_data(binary, tmp)[model]
    config = os.path.join(ROOT, "configs", ct.MODELS[model][0])
    run_megabatch([binary, "train", "--config", config, "data.path=" + data, "run.dir=" + os.path.join(tmp, model),
                   "run.resume=never", "train.max_steps=60", "train.eval_every=0", "run.log_every=20",
                   "run.checkpoint_every=0", "train.threads=1", "train.precision=fp32", "train.grad_clip=1.0",
                   "run.progress=lines"], os.path.join(out, model + "-megabatch.json"), "21:40")
    with_trace(os.path.join(out, model + "-pytorch.json"),
               lambda: ct.time_python(model, data, 1, 20, 20, False))
    return 20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--models", default="gin,gat")
    args = parser.parse_args()
    binary = os.path.join(os.path.abspath(args.build), "megabatch")
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mbprofile-") as tmp:
        for model in args.models.split(","):
            steps = {"gin": profile_gin, "gat": profile_gat}.get(model)
            steps = steps(binary, tmp, args.out) if steps else profile_series(model, binary, tmp, args.out)
            table = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "profile_ops.py"),
                                    os.path.join(args.out, model + "-megabatch.json"),
                                    os.path.join(args.out, model + "-pytorch.json"), "--steps", str(steps),
                                    "--top", "30"], check=True, stdout=subprocess.PIPE,
                                   universal_newlines=True).stdout
            with open(os.path.join(args.out, model + "-ops.txt"), "w") as f:
                f.write(table)
            print("== %s\n%s" % (model, table), flush=True)


if __name__ == "__main__":
    main()
