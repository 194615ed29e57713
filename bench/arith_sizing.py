"""Sizing run behind configs/arith-gpt.yaml (not a test; takes ~20 minutes on one core).

Trains the reference GPT of tests/model/test_parity.py (the same module megabatch builds) in
PyTorch on an arithmetic corpus like `megabatch data arith --digits 2 --ops +-`
("a+b=c\\n" and "a-b=c\\n", operands 0..99, 2000 problems held out), with the optimiser of the
config, and prints greedy exact match on the held-out problems every 250 steps.

usage: /usr/bin/python3 bench/arith_sizing.py WIDTH LAYERS HEADS CONTEXT BATCH LR STEPS
e.g.   /usr/bin/python3 bench/arith_sizing.py 64 2 4 32 128 5e-3 6000
Set OPENBLAS_NUM_THREADS=1 (or OMP_NUM_THREADS=1) to time one core.
"""
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model"))
import test_parity as reference  # noqa: E402


def text(problem):
    a, op, b = problem
    return "%d%s%d=%d\n" % (a, op, b, a + b if op == "+" else a - b)


def main():
    C, L, H, T, B = (int(v) for v in sys.argv[1:6])
    LR, STEPS = float(sys.argv[6]), int(sys.argv[7])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = random.Random(0)
    problems = [(a, op, b) for a in range(100) for b in range(100) for op in "+-"]
    rng.shuffle(problems)
    held, train = problems[:2000], problems[2000:]
    stream = "".join(text(train[rng.randrange(len(train))]) for _ in range(300000)).encode()
    data = torch.tensor(list(stream), dtype=torch.long)

    model = reference.Gpt(128, T, C, L, H, True)
    for name, p in model.named_parameters():  # GPT-2 initialisation, as megabatch's
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.99))

    def lr_at(step):
        if step < 100:
            return LR * (step + 1) / 100
        return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / STEPS))))

    @torch.no_grad()
    def exact_match():
        model.eval()
        correct, by_length = 0, {}
        for p in held:
            by_length.setdefault(len(text(p).split("=")[0]), []).append(p)
        for n, group in by_length.items():
            seq = torch.tensor([list(("\n" + text(p).split("=")[0] + "=").encode()) for p in group])
            for _ in range(6):
                seq = torch.cat([seq, model(seq[:, -T:])[:, -1].argmax(-1, keepdim=True)], 1)
            for i, p in enumerate(group):
                answer = bytes(seq[i, n + 2:].tolist()).decode(errors="replace").split("\n")[0]
                correct += answer == text(p).split("=")[1].strip()
        model.train()
        return correct / len(held)

    start = time.time()
    for step in range(STEPS + 1):
        if step % 250 == 0:
            print("step %d t=%.0fs exact=%.3f" % (step, time.time() - start, exact_match()), flush=True)
        ix = torch.randint(len(data) - T - 1, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = F.cross_entropy(model(x).view(-1, 128), y.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


if __name__ == "__main__":
    main()
