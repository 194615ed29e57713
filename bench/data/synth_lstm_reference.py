"""Reference: what a small LSTM reaches on `megabatch data synth-series` output, in PyTorch.

Trains the demo's model shape (one LSTM of hidden 32 per stream over windows m1:60, m5:24,
h1:12, concatenated into a 32-wide head) for 600 steps of batch 128 (AdamW 3e-3, cosine,
30 warm-up steps) on the same split megabatch uses (train before val, embargo of one window),
and prints val MSE next to the file's mean and last-value baselines.

    /usr/bin/python3 bench/data/synth_lstm_reference.py data/demo.h5 [steps]
"""
import sys
import time

import h5py
import numpy as np
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
path = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 600
W = {"m1": 60, "m5": 24, "h1": 12}
with h5py.File(path, "r") as f:
    S = {k: torch.from_numpy(f["series/%s/values" % k][()].astype("f4")) for k in W}
    E = {k: f["samples/end/%s" % k][()] for k in W}
    Y = torch.from_numpy(f["targets"][()].astype("f4"))
    base_mean = f.attrs["baseline_mean_val_mse"]
    base_last = f.attrs["baseline_last_value_val_mse"]
N = len(Y)
first = max(int(np.searchsorted(E[k], W[k] - 1)) for k in W)
n = N - first
cut1, cut2 = first + int(0.8 * n), first + int(0.9 * n)


def disjoint_start(prev, cut):
    j = cut
    while any(E[k][j] - W[k] + 1 <= E[k][prev] for k in W):
        j += 1
    return j


train = np.arange(first, cut1)
val = np.arange(disjoint_start(cut1 - 1, cut1), cut2)
Et = {k: torch.from_numpy(E[k]) for k in W}


def batch(ix):
    ix = torch.as_tensor(ix)
    return [S[k][Et[k][ix][:, None] - W[k] + 1 + torch.arange(W[k])] for k in W], Y[ix]


class Model(torch.nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.lstms = torch.nn.ModuleList([torch.nn.LSTM(S[k].shape[1], hidden, 1, batch_first=True) for k in W])
        self.head = torch.nn.Sequential(torch.nn.Linear(hidden * len(W), 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, xs):
        return self.head(torch.cat([l(x)[0][:, -1] for l, x in zip(self.lstms, xs)], 1)).squeeze(1)


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s, steps) / steps))))


def val_mse():
    with torch.no_grad():
        total = 0.0
        for i in range(0, len(val), 2048):
            xs, y = batch(val[i:i + 2048])
            total += ((model(xs) - y) ** 2).sum().item()
    return total / len(val)


rng = np.random.default_rng(0)
order = rng.permutation(train)
start = time.time()
for step in range(steps):
    i = (step * 128) % len(order)
    xs, y = batch(order[i:i + 128])
    loss = ((model(xs) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if (step + 1) % 100 == 0:
        print("step %d  train %.4f  val %.4f  (%.0f s)" % (step + 1, loss.item(), val_mse(), time.time() - start), flush=True)
final = val_mse()
best = min(base_mean, base_last)
print("val MSE %.4f; mean baseline %.4f, last-value baseline %.4f; %.0f%% below the better baseline"
      % (final, base_mean, base_last, 100 * (1 - final / best)))
