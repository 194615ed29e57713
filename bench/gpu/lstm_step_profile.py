#!/usr/bin/env python3
"""Where the seed LSTM's step goes on a GPU, and what the cheapest levers buy (item 6 of the GPU
plan; docs/benchmarks.md, "GPU benchmarks"). The seed's shape (configs/bench-lstm-seed.yaml: one
stream of 167 features, window 360, hidden 256, 2 layers, bf16 autocast, AdamW, clip 1.0) in
eager PyTorch with its data on the device, the model and step of bench/gpu/gpu_bench.py's
variant (b), at batch 128:

1. torch.profiler over 10 steps after warm-up: the wall time per step against the time the GPU
   spends in kernels (the rest is the GPU waiting for the host), the kernels launched per step,
   and the 15 kernels that take the most time.
2. Levers, each timed against the plain step in the same process (medians of --repeats windows):
   - the forward and backward captured in one CUDA graph (torch.cuda.graphs, static input
     buffers; the optimizer step stays eager): what megabatch would gain from graph capture;
   - torch.backends.cudnn.benchmark off against on (on is what both sides run).
   Each lever's gradients are checked against the plain step's on the same batch first: a lever
   that changes the result is reported as such, not timed as a speed-up.

    python3 bench/gpu/lstm_step_profile.py --out DIR [--batch 128] [--repeats 3] [--quick]

Writes DIR/lstm_profile.json and DIR/lstm_profile.md. --quick (or no GPU) runs a tiny shape on
the CPU to check the script; CUDA graphs need a GPU and are skipped there.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench  # noqa: E402  (the benchmark's LstmTask: the same model megabatch is compared with)

FULL = {"window": 360, "features": 167, "hidden": 256, "layers": 2, "head_hidden": 128, "rows": 20000}
QUICK = {"window": 24, "features": 8, "hidden": 32, "layers": 2, "head_hidden": 16, "rows": 2000}
WINDOW_STEPS = 20


def make_task(shape, device):
    torch.manual_seed(0)
    task = gpu_bench.LstmTask(shape["features"], shape["hidden"], shape["layers"], shape["head_hidden"], 0.0)
    return task.to(device)


def batches(shape, batch, device):
    """A device-resident series and a function giving the next (x, y): gathered on the device."""
    values = torch.randn(shape["rows"], shape["features"], device=device)
    targets = torch.randn(shape["rows"], device=device)
    offsets = torch.arange(-shape["window"] + 1, 1, device=device)
    low = shape["window"] - 1

    def next_batch():
        ends = torch.randint(low, shape["rows"], (batch,), device=device)
        return values[ends.unsqueeze(1) + offsets], targets[ends]
    return next_batch


def autocast(device):
    return torch.autocast(device.type, dtype=torch.bfloat16)


def plain_step(task, opt, device):
    params = list(task.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        with autocast(device):
            loss = task(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return step


def graphed_step(task, opt, device, example):
    """Forward and backward replayed from one CUDA graph; clip and AdamW eager after it. Returns
    (step, replay): replay(x, y) runs the graph alone, leaving its gradients in .grad. The
    gradients are made inside the capture (set_to_none before it), so each replay writes them
    afresh instead of adding to the last step's (torch.cuda.graphs' whole-network pattern)."""
    params = list(task.parameters())
    static_x, static_y = example[0].clone(), example[1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs asks
        for _ in range(3):
            opt.zero_grad(set_to_none=False)
            with autocast(device):
                task(static_x, static_y).backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        with autocast(device):
            static_loss = task(static_x, static_y)
        static_loss.backward()

    def replay(x, y):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    def step(x, y):
        replay(x, y)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return step, replay


def gradients_of(task, device, x, y):
    task.zero_grad(set_to_none=False)
    with autocast(device):
        task(x, y).backward()
    return [p.grad.detach().clone() for p in task.parameters()]


def time_windows(step, next_batch, repeats, sync):
    for _ in range(5):
        step(*next_batch())
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(WINDOW_STEPS):
            step(*next_batch())
        sync()
        times.append((time.perf_counter() - start) / WINDOW_STEPS)
    return times


def profile_steps(step, next_batch, device, sync, steps=10):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(5):
        step(*next_batch())
    sync()
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step(*next_batch())
        sync()
        wall = (time.perf_counter() - start) / steps
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.time_range.elapsed_us() for e in kernels) / 1e6 / steps
    by_name = {}
    for e in kernels:
        entry = by_name.setdefault(e.name, [0, 0.0])
        entry[0] += 1
        entry[1] += e.time_range.elapsed_us() / steps
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:15]
    return {"wall_ms_per_step": 1e3 * wall, "kernel_ms_per_step": 1e3 * busy,
            "gpu_busy_fraction": busy / wall if device.type == "cuda" else None,
            "kernels_per_step": len(kernels) / steps,
            "top_kernels": [{"name": n[:120], "calls_per_step": c / steps, "us_per_step": us} for n, (c, us) in top]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = QUICK if args.quick or device.type == "cpu" else FULL
    batch = 16 if shape is QUICK else args.batch
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    task = make_task(shape, device)
    opt = torch.optim.AdamW(task.parameters(), lr=1e-4, fused=device.type == "cuda") \
        if device.type == "cuda" else torch.optim.AdamW(task.parameters(), lr=1e-4)
    next_batch = batches(shape, batch, device)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
              "shape": shape, "batch": batch, "levers": {}}
    plain = plain_step(task, opt, device)
    result["profile"] = profile_steps(plain, next_batch, device, sync)
    result["levers"]["plain (cudnn.benchmark on)"] = time_windows(plain, next_batch, args.repeats, sync)
    x, y = next_batch()
    want = gradients_of(task, device, x, y)
    if device.type == "cuda":
        try:
            graphed, replay = graphed_step(task, opt, device, (x, y))
            replay(x, y)
            got = [p.grad.detach().clone() for p in task.parameters()]
            result["graph_gradient_difference"] = max(
                float((a - b).abs().max() / a.abs().max().clamp_min(1e-30)) for a, b in zip(want, got))
            result["levers"]["forward+backward in a CUDA graph"] = time_windows(graphed, next_batch, args.repeats,
                                                                                 sync)
        except Exception as e:  # noqa: BLE001  (cuDNN's RNN may refuse capture: report it)
            result["levers"]["forward+backward in a CUDA graph"] = "failed: %s: %s" % (type(e).__name__, e)
        torch.backends.cudnn.benchmark = False
        task = make_task(shape, device)
        opt = torch.optim.AdamW(task.parameters(), lr=1e-4, fused=True)
        result["levers"]["cudnn.benchmark off"] = time_windows(plain_step(task, opt, device), next_batch,
                                                               args.repeats, sync)
    write(args.out, result)


def write(out, result):
    with open(os.path.join(out, "lstm_profile.json"), "w") as f:
        json.dump(result, f, indent=1)
    prof = result["profile"]
    lines = ["## Seed LSTM step, batch %d, %s, torch %s" % (result["batch"], result["device"], result["torch"]), "",
             "Profiled: %.2f ms a step, %.2f ms of it in %d kernels (GPU busy %s)." % (
                 prof["wall_ms_per_step"], prof["kernel_ms_per_step"], prof["kernels_per_step"],
                 "%.0f%%" % (100 * prof["gpu_busy_fraction"]) if prof["gpu_busy_fraction"] else "n/a"), "",
             "| lever | ms a step (median) | per window | vs plain |", "|---|---|---|---|"]
    base = None
    for name, times in result["levers"].items():
        if isinstance(times, str):
            lines.append("| %s | - | - | %s |" % (name, times))
            continue
        med = 1e3 * statistics.median(times)
        base = base or med
        lines.append("| %s | %.2f | %s | %.2fx |" % (name, med, ", ".join("%.2f" % (1e3 * t) for t in times),
                                                    base / med))
    if "graph_gradient_difference" in result:
        lines.append("\nCUDA graph gradients against the plain step's: %.2g of each tensor's largest."
                     % result["graph_gradient_difference"])
    lines += ["", "| kernel | calls a step | us a step |", "|---|---|---|"]
    lines += ["| %s | %.1f | %.1f |" % (k["name"], k["calls_per_step"], k["us_per_step"]) for k in prof["top_kernels"]]
    with open(os.path.join(out, "lstm_profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))


if __name__ == "__main__":
    main()
