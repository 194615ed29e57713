"""A temporal convolution network (TCN) over multi-timeframe windows, for megabatch to train.

Defines the model in plain PyTorch, scripts it with torch.jit.script and saves the archive that
`model.kind: torchscript` trains (examples/torchscript/tcn.yaml). Needs only PyTorch (on Debian:
apt install python3-torch).

    /usr/bin/python3 examples/torchscript/tcn.py --out data/tcn.pt
    build/megabatch data synth-series --out data/demo.h5
    mpirun -np 2 build/megabatch train --config examples/torchscript/tcn.yaml
    build/megabatch export --checkpoint runs/tcn --to data/tcn-trained.pt
    /usr/bin/python3 examples/torchscript/use_trained.py data/tcn-trained.pt data/demo.h5

The contract (docs/models.md "Your own model"): megabatch calls forward with one tensor per
stream of data.streams, in that order, each [B, window, features] float32, and trains the
output against the targets with the configured loss: here regression, so forward returns
[B, targets]. The argument names below are the stream names of tcn.yaml; a config with other
streams needs a forward with those arguments.
"""
import argparse
import os
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalBlock(nn.Module):
    """Two dilated causal convolutions with a residual connection: the output at time t sees
    inputs up to t only (the convolution is padded on the left and the overhang cut)."""

    def __init__(self, channels_in: int, channels: int, kernel: int, dilation: int, dropout: float):
        super().__init__()
        self.trim = (kernel - 1) * dilation
        self.conv1 = nn.Conv1d(channels_in, channels, kernel, dilation=dilation, padding=self.trim)
        self.conv2 = nn.Conv1d(channels, channels, kernel, dilation=dilation, padding=self.trim)
        self.drop = nn.Dropout(dropout)
        self.skip = nn.Conv1d(channels_in, channels, 1) if channels_in != channels else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C_in, T] -> [B, C, T]
        t = x.shape[2]
        h = self.drop(F.gelu(self.conv1(x)[:, :, :t]))
        h = self.drop(F.gelu(self.conv2(h)[:, :, :t]))
        return F.gelu(h + self.skip(x))


class StreamTcn(nn.Module):
    """One stream's encoder: [B, T, F] -> [B, channels], the last time step of the TCN."""

    def __init__(self, features: int, channels: int, levels: int, kernel: int, dropout: float):
        super().__init__()
        blocks = []
        for level in range(levels):
            blocks.append(CausalBlock(features if level == 0 else channels, channels, kernel,
                                      2 ** level, dropout))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x.transpose(1, 2))[:, :, -1]


class MultiStreamTcn(nn.Module):
    """forward(m1 [B, 60, F], m5 [B, 24, F], h1 [B, 12, F]) -> [B, outputs]."""

    def __init__(self, features: int = 4, outputs: int = 1, channels: int = 32, levels: int = 4,
                 kernel: int = 3, dropout: float = 0.1):
        super().__init__()
        self.encoders = nn.ModuleList([StreamTcn(features, channels, levels, kernel, dropout)
                                       for _ in range(3)])
        self.norm = nn.LayerNorm(3 * channels)
        self.head = nn.Sequential(nn.Linear(3 * channels, channels), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(channels, outputs))

    def forward(self, m1: torch.Tensor, m5: torch.Tensor, h1: torch.Tensor) -> torch.Tensor:
        streams = [m1, m5, h1]
        finals: List[torch.Tensor] = []
        for i, encoder in enumerate(self.encoders):
            finals.append(encoder(streams[i]))
        return self.head(self.norm(torch.cat(finals, dim=1)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/tcn.pt", help="the TorchScript archive to write")
    parser.add_argument("--features", type=int, default=4, help="features per stream (synth-series: 4)")
    parser.add_argument("--outputs", type=int, default=1, help="target columns (synth-series: 1)")
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--levels", type=int, default=4, help="dilations 1, 2, 4, ...")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0, help="initial weights")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = MultiStreamTcn(args.features, args.outputs, args.channels, args.levels,
                           dropout=args.dropout)
    scripted = torch.jit.script(model)
    # The shapes megabatch will pass, as a quick check before saving.
    out = scripted(torch.randn(2, 60, args.features), torch.randn(2, 24, args.features),
                   torch.randn(2, 12, args.features))
    assert out.shape == (2, args.outputs), out.shape
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    scripted.save(args.out)
    count = sum(p.numel() for p in model.parameters())
    print("wrote %s: MultiStreamTcn, %d parameters, receptive field %d steps" % (
        args.out, count, 1 + 2 * 2 * (2 ** args.levels - 1)))


if __name__ == "__main__":
    main()
