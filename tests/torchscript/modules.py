"""Modules for the model.kind = torchscript tests, written as a PyTorch user would and scripted
with Debian's python3-torch. The data they read is mbtest.SeriesTrainingTestCase's file: streams
m1 and m5 with 3 features each, one target column ([N] targets).

save_all(directory) scripts every module and returns {name: archive path}.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

FEATURES = 3


class StreamConv(nn.Module):
    """[B, T, F] -> [B, width]: a convolution over time, optional batch norm, mean over time."""

    def __init__(self, width: int, norm: bool, dropout: float):
        super().__init__()
        self.conv = nn.Conv1d(FEATURES, width, 3)
        self.norm = nn.BatchNorm1d(width) if norm else nn.Identity()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(self.conv(x.transpose(1, 2))))
        return self.drop(h).mean(dim=2)


class TwoStreamNet(nn.Module):
    """forward(m1 [B, T1, 3], m5 [B, T5, 3]) -> [B, 1]. Options: batch norm in the encoders,
    dropout, `mix2` tied to `mix` (one tensor under two names), a frozen scale."""

    def __init__(self, width: int = 8, norm: bool = False, dropout: float = 0.0, tied: bool = False,
                 frozen: bool = False):
        super().__init__()
        self.enc_m1 = StreamConv(width, norm, dropout)
        self.enc_m5 = StreamConv(width, norm, dropout)
        self.mix = nn.Linear(2 * width, 2 * width)
        self.mix2 = nn.Linear(2 * width, 2 * width)
        if tied:
            self.mix2.weight = self.mix.weight
        self.head = nn.Linear(2 * width, 1)
        self.scale = nn.Parameter(torch.full((1,), 0.5), requires_grad=not frozen)

    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.enc_m1(m1), self.enc_m5(m5)], dim=1)
        h = torch.tanh(self.mix2(torch.tanh(self.mix(h))))
        return self.head(h) * self.scale


class TwoStreamLstm(nn.Module):
    """The built-in lstm's structure and state_dict names (encoders.<stream>, head.0, head.3)."""

    def __init__(self, hidden: int = 16, head_hidden: int = 16):
        super().__init__()
        self.encoders = nn.ModuleDict({s: nn.LSTM(FEATURES, hidden, 1, batch_first=True)
                                       for s in ("m1", "m5")})
        self.head = nn.Sequential(nn.Linear(2 * hidden, head_hidden), nn.GELU(), nn.Dropout(0.0),
                                  nn.Linear(head_hidden, 1))

    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        _, (h1, _) = self.encoders["m1"](m1)
        _, (h5, _) = self.encoders["m5"](m5)
        return self.head(torch.cat([h1[-1], h5[-1]], dim=1))


class RenamedNet(TwoStreamNet):
    """TwoStreamNet's shapes under other names: a checkpoint of one does not load into the other."""

    def __init__(self):
        super().__init__()
        self.blend = self.mix
        del self.mix

    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.enc_m1(m1), self.enc_m5(m5)], dim=1)
        h = torch.tanh(self.mix2(torch.tanh(self.blend(h))))
        return self.head(h) * self.scale


# --- modules that break the contract ---------------------------------------------------

class NoForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 1)

    @torch.jit.export
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class OneInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.mean(dim=1))


class IntArgument(OneInput):
    def forward(self, m1: torch.Tensor, m5: int) -> torch.Tensor:
        return self.linear(m1.mean(dim=1)) * m5


class SwappedInputs(OneInput):
    def forward(self, m5: torch.Tensor, m1: torch.Tensor) -> torch.Tensor:
        return self.linear(m1.mean(dim=1) + m5.mean(dim=1))


class TupleOutput(OneInput):
    def forward(self, m1: torch.Tensor, m5: torch.Tensor):
        y = self.linear(m1.mean(dim=1) + m5.mean(dim=1))
        return y, y


class ExtraAxis(OneInput):
    """Returns [B, 1, 1] where the mse objective wants [B, 1]."""

    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        return self.linear(m1.mean(dim=1) + m5.mean(dim=1)).unsqueeze(1)


class WrongFeatures(nn.Module):
    """Built for 5 features; the data has 3: the matmul fails inside forward."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(5, 1)

    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        return self.linear(m1.mean(dim=1) + m5.mean(dim=1))


class NoParameters(nn.Module):
    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        return (m1.mean(dim=(1, 2)) + m5.mean(dim=(1, 2))).unsqueeze(1)


class Detached(OneInput):
    def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
        return self.linear(m1.mean(dim=1) + m5.mean(dim=1)).detach()


# --- other layouts ---------------------------------------------------------------------

class FlatFeatures(nn.Module):
    """samples layout with [N, F] features: forward(features [B, F]) -> [B, K]."""

    def __init__(self, features: int, outputs: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 16), nn.GELU(), nn.Linear(16, outputs))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class TinyLm(nn.Module):
    """tokens layout: forward(idx [B, T] int64) -> logits [B, T, V]."""

    def __init__(self, vocab: int, context: int, width: int = 32, logits: int = 0):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.out = nn.Linear(width, logits or vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        # A causal running mean: position t sees tokens 0..t only.
        steps = torch.arange(1, idx.shape[1] + 1, device=idx.device, dtype=x.dtype).view(1, -1, 1)
        x = x.cumsum(dim=1) / steps
        return self.out(x + self.mlp(x))


def modules():
    torch.manual_seed(0)
    return {
        "net": TwoStreamNet(),
        "net_bn": TwoStreamNet(norm=True),
        "net_dropout_tied_frozen": TwoStreamNet(dropout=0.3, tied=True, frozen=True),
        "lstm": TwoStreamLstm(),
        "renamed": RenamedNet(),
        "narrow": TwoStreamNet(width=6),
        "no_forward": NoForward(),
        "one_input": OneInput(),
        "int_argument": IntArgument(),
        "swapped": SwappedInputs(),
        "tuple_output": TupleOutput(),
        "extra_axis": ExtraAxis(),
        "wrong_features": WrongFeatures(),
        "no_parameters": NoParameters(),
        "detached": Detached(),
    }


def save_all(directory):
    paths = {}
    for name, module in modules().items():
        paths[name] = os.path.join(directory, name + ".pt")
        torch.jit.script(module).save(paths[name])
    return paths
