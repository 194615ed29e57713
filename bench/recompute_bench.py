"""Activation recomputation, side by side (issue 37 item 4; docs/benchmarks.md "Activation
recomputation"). For two models, four runs take turns in every repeat:
  - megabatch, train.recompute: none and blocks (LSTM: time segments of about sqrt(T) steps;
    GPT: every transformer block);
  - PyTorch, plain and with torch.utils.checkpoint(use_reentrant=False) on the same segments.
Each run is a process of its own that trains a few steps on one rank, fp32, 2 threads. It reports:
  - the step time, the median over the steps after the first, from the time pass (--repeats
    rounds of the four runs, under glibc's default malloc);
  - the activation memory, from one more round (the memory pass, see MEMORY_PASS_ENV): the peak
    RSS over the steps minus the RSS before them (VmHWM, reset through /proc/self/clear_refs
    before the steps: megabatch does it after its memory plan, rss_at_plan_bytes; the PyTorch side
    after one warm-up step, which allocates AdamW's state). It includes each step's batch (both
    sides make a fresh one a step).
Run it in the Debian 13 root, so both sides run LibTorch 2.6 (megabatch built by
scripts/build-cuda.sh, which runs on the CPU):

    scripts/trixie-root.sh run /usr/bin/python3 bench/recompute_bench.py --bin build-cuda/megabatch
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

MIB = 1 << 20

# name -> (config, data tool arguments, megabatch overrides, steps)
MODELS = {
    "lstm-multitf": ("lstm-multitf.yaml",
                     ["synth-series", "--rows", "200000", "--features", "128",
                      "--streams", "m1:1,m5:5,m15:15,h1:60,h4:240"],
                     ["train.global_batch=128", "train.micro_batch=128", "train.grad_clip=0"], 4),
    "gpt-6x384-ctx512": ("arith-gpt.yaml",
                         ["arith", "--digits", "2", "--ops", "+-", "--problems", "200000", "--heldout", "1000"],
                         ["model.hidden=384", "model.layers=6", "model.heads=6", "data.context=512",
                          "train.global_batch=8", "train.micro_batch=8", "train.grad_clip=0"], 5),
}
LSTM_STREAMS = [("m1", 480), ("m5", 288), ("m15", 192), ("h1", 96), ("h4", 48)]


# --- the PyTorch side (a child process) -------------------------------------------------------

def vm_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def torch_lstm(torch, checkpoint):
    nn = torch.nn
    hidden, layers = 128, 2

    class MultiStream(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoders = nn.ModuleDict({s: nn.LSTM(128, hidden, layers, batch_first=True, dropout=0.1)
                                           for s, _ in LSTM_STREAMS})
            self.head = nn.Sequential(nn.Linear(hidden * len(LSTM_STREAMS), 256), nn.GELU(), nn.Dropout(0.1),
                                      nn.Linear(256, 1))

        def encode(self, lstm, x):
            if not checkpoint:
                return lstm(x)[1][0][-1]
            steps = int(math.ceil(math.sqrt(x.shape[1])))
            h = x.new_zeros(layers, x.shape[0], hidden)
            c = x.new_zeros(layers, x.shape[0], hidden)
            for t0 in range(0, x.shape[1], steps):
                def segment(xs, h0, c0):
                    return lstm(xs, (h0, c0))[1]
                h, c = torch.utils.checkpoint.checkpoint(segment, x[:, t0:t0 + steps], h, c, use_reentrant=False)
            return h[-1]

        def forward(self, xs):
            return self.head(torch.cat([self.encode(self.encoders[s], x) for (s, _), x in zip(LSTM_STREAMS, xs)],
                                       1)).squeeze(1)

    model = MultiStream()
    data = [torch.randn(128, window, 128) for _, window in LSTM_STREAMS]
    target = torch.randn(128)
    # A fresh batch each step, as a DataLoader gives (megabatch slices one from its resident data).
    return model, lambda: torch.nn.functional.huber_loss(model([x.clone() for x in data]), target)


def torch_gpt(torch, checkpoint):
    """nanoGPT as a PyTorch 2.x user writes it (scaled_dot_product_attention, as megabatch's GPT
    uses on LibTorch 2.x), with the state_dict layout of tests/model/test_parity.py's Gpt."""
    nn, F = torch.nn, torch.nn.functional
    width, heads, context, vocab = 384, 6, 512, 32

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.c_attn, self.attn_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.h = nn.ModuleList([Block() for _ in range(6)])
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.h:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpoint else block(x)
            return F.linear(self.ln_f(x), self.wte.weight)  # tied head

    model = Gpt()
    tokens = torch.randint(vocab, (8, context))
    targets = torch.randint(vocab, (8, context))
    return model, lambda: F.cross_entropy(model(tokens.clone()).view(-1, vocab), targets.clone().view(-1))


def torch_side(name, checkpoint, steps, threads):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, loss_of = (torch_lstm if name.startswith("lstm") else torch_gpt)(torch, checkpoint)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss_of().backward()
        optimizer.step()

    step()  # allocates AdamW's state
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss = vm_kib("VmRSS") * 1024
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    peak = vm_kib("VmHWM") * 1024
    print(json.dumps({"step_times_s": times, "activation_bytes": peak - rss}))


# --- the driver -------------------------------------------------------------------------------

def run(cmd, env=None, timeout=1800):
    full = dict(os.environ, **(env or {}))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=timeout, env=full)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-3000:]))
    return r.stdout


def megabatch_side(binary, name, recompute, threads, work, env):
    config, tool, overrides, steps = MODELS[name]
    data = os.path.join(work, name + ".h5")
    if not os.path.exists(data):
        run([binary, "data"] + tool[:1] + ["--out", data] + tool[1:])
    run_dir = os.path.join(work, "run-%s-%s" % (name, recompute))
    shutil.rmtree(run_dir, ignore_errors=True)  # the last repeat's
    run([binary, "train", "--config", os.path.join(benchlib.ROOT, "configs", config), "data.path=" + data,
         "run.dir=" + run_dir, "run.resume=never", "train.max_steps=%d" % (steps + 1), "train.eval_every=0",
         "run.checkpoint_every=100000", "run.log_every=1", "run.progress=lines", "train.threads=%d" % threads,
         "train.precision=fp32", "train.recompute=" + recompute] + overrides, env=env)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    plan = [r for r in records if r.get("event") == "memory_plan"][0]
    train = [r for r in records if r.get("event") == "train"]
    peak = max(r["mem_peak_mb"] for r in train) * MIB
    return {"step_times_s": [r["step_time_s"] for r in train[1:]],
            "activation_bytes": peak - plan["rss_at_plan_bytes"],
            "planned_activations_workspace_bytes": plan["activations_bytes"] + plan["workspace_bytes"]}


# The memory pass: with glibc's mmap threshold fixed low, every tensor of 64 KiB or more is mapped
# on its own and unmapped when freed, so the RSS follows what is live (by default glibc raises the
# threshold after a free, up to 32 MiB, and keeps what a step freed: the peak over later steps
# then hides under the RSS before them). Each mapping costs page faults, so the times come from
# the time pass, under glibc's defaults.
MEMORY_PASS_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}
SIDES = ("megabatch none", "megabatch recompute", "pytorch none", "pytorch checkpoint")


def one_run(args, name, side, work, env):
    if side.startswith("megabatch"):
        return megabatch_side(args.bin, name, "none" if side.endswith("none") else "blocks", args.threads, work, env)
    out = run([sys.executable, os.path.abspath(__file__), "--threads", str(args.threads),
               "--torch-side", name, "0" if side.endswith("none") else "1"], env=env)
    return json.loads(out.strip().splitlines()[-1])


def measure_model(args, host, name, work):
    timed = {side: [] for side in SIDES}
    memory = {}
    for repeat in range(args.repeats):
        for side in SIDES:
            sample = one_run(args, name, side, work, None)
            timed[side].append(sample)
            print("%s, %s, time pass %d: %.2f s a step (load %.2f)"
                  % (name, side, repeat + 1, statistics.median(sample["step_times_s"]), host.sample_load()),
                  flush=True)
    for side in SIDES:
        memory[side] = one_run(args, name, side, work, MEMORY_PASS_ENV)
        print("%s, %s, memory pass: %.0f MiB of activations (load %.2f)"
              % (name, side, memory[side]["activation_bytes"] / MIB, host.sample_load()), flush=True)
    medians = {side: {"step_time_s": statistics.median(t for s in timed[side] for t in s["step_times_s"]),
                      "activation_bytes": memory[side]["activation_bytes"]} for side in SIDES}
    mb_none, mb_re = medians["megabatch none"], medians["megabatch recompute"]
    pt_none, pt_ck = medians["pytorch none"], medians["pytorch checkpoint"]
    ratios = {
        "megabatch_memory_reduction": mb_none["activation_bytes"] / mb_re["activation_bytes"],
        "megabatch_time_ratio": mb_re["step_time_s"] / mb_none["step_time_s"],
        "pytorch_memory_reduction": pt_none["activation_bytes"] / pt_ck["activation_bytes"],
        "pytorch_time_ratio": pt_ck["step_time_s"] / pt_none["step_time_s"],
        "megabatch_to_pytorch_checkpointed_memory": mb_re["activation_bytes"] / pt_ck["activation_bytes"],
        "megabatch_to_pytorch_checkpointed_time": mb_re["step_time_s"] / pt_ck["step_time_s"],
    }
    print("%s: megabatch %.1fx less activation memory at %.2fx the step time; PyTorch checkpoint %.1fx "
          "at %.2fx; megabatch recomputing / PyTorch checkpointed: memory %.2f, step time %.2f"
          % (name, ratios["megabatch_memory_reduction"], ratios["megabatch_time_ratio"],
             ratios["pytorch_memory_reduction"], ratios["pytorch_time_ratio"],
             ratios["megabatch_to_pytorch_checkpointed_memory"], ratios["megabatch_to_pytorch_checkpointed_time"]),
          flush=True)
    return {"medians": medians, "ratios": ratios, "time_pass": timed, "memory_pass": memory}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(benchlib.ROOT, "build-cuda", "megabatch"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--torch-side", nargs=2, metavar=("MODEL", "CHECKPOINT"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.torch_side:
        name, checkpoint = args.torch_side
        return torch_side(name, checkpoint == "1", MODELS[name][3], args.threads)
    import torch  # for the versions in the report
    host = benchlib.Host(threads=args.threads, binaries={"megabatch": args.bin},
                         extra_versions={"torch_side": torch.__version__})
    result = {"models": {}, "memory_pass_env": MEMORY_PASS_ENV}
    with tempfile.TemporaryDirectory(prefix="mb-recompute-") as work:
        for name in args.models.split(","):
            result["models"][name] = measure_model(args, host, name, work)
    benchlib.finish("recompute_bench", result, host, out=args.out)


if __name__ == "__main__":
    main()
