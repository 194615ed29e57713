"""PyTorch parity of the model zoo: the state_dict-name contract.

kind: gat is checked the same way, on the batch graph the C++ side built (/edges), with a
reference that computes graph attention densely (a masked softmax over an adjacency matrix)
rather than over an edge list as the C++ model does. Its graph builder is checked on its own,
edge for edge, against a numpy reference (GraphBuilderTest, OUT_DIR/graphs/*.h5).

megabatch_model_parity (ParityDump.cpp) builds each model kind in C++, writes its state_dict
with model::writeStateDict, an input batch, and the C++ outputs, loss sum, metric sums, and
the gradient of the loss sum for every parameter. Here the same modules are written the way a
PyTorch user would write them, loaded BY NAME from the HDF5 file with a strict
load_state_dict, and must reproduce all of it within 1e-5 (fp32). Under MEGABATCH_TEST_DEVICE=cuda
the C++ side computes on the GPU and this CPU reference checks it within 1e-4 (see TOL).

usage: test_parity.py PATH/TO/megabatch_model_parity
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

DUMP = os.environ.get("MB_PARITY_DUMP", "")  # or the first argument
# CPU against CPU: float32 rounding. CUDA (the dump switches TF32 off, so both sides are true
# fp32) against this CPU reference: CUDA's tanh/exp/erf differ from the CPU's by an ulp or two and
# its kernels sum in another order; over an LSTM's steps and a sum of cross entropies that is
# ~1e-5 relative, so 1e-4. The sensitivity test perturbs a weight by 100x the tolerance on both.
TOL = 1e-4 if mbtest.ON_CUDA else 1e-5
PERTURBATION = 100 * TOL  # test_comparison_is_sensitive: one weight entry off by this much


# --- reference modules -------------------------------------------------------------

def make_head(fused, head_hidden, outputs):
    if head_hidden == 0:
        return nn.Sequential(nn.Linear(fused, outputs))
    return nn.Sequential(nn.Linear(fused, head_hidden), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(head_hidden, outputs))


class MultiStreamLstm(nn.Module):
    def __init__(self, streams, features, hidden, layers, head_hidden, outputs):
        super().__init__()
        self.streams = streams
        self.encoders = nn.ModuleDict(
            {s: nn.LSTM(f, hidden, layers, batch_first=True) for s, f in zip(streams, features)})
        self.head = make_head(hidden * len(streams), head_hidden, outputs)

    def forward(self, xs):
        finals = []
        for s, x in zip(self.streams, xs):
            _, (h_n, _) = self.encoders[s](x)
            finals.append(h_n[-1])
        return self.head(torch.cat(finals, dim=1))


class Mlp(nn.Module):
    def __init__(self, width, hidden, layers, outputs):
        super().__init__()
        body = []
        for _ in range(layers):
            body += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(0.0)]
            width = hidden
        self.body = nn.Sequential(*body)
        self.head = nn.Linear(width, outputs)

    def forward(self, xs):
        x = torch.cat([x.reshape(x.shape[0], -1) for x in xs], dim=1)
        return self.head(self.body(x))


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch 1.13's nn.LayerNorm always has one)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, bias):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width, bias=bias)
        self.c_proj = nn.Linear(width, width, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GptMlp(nn.Module):
    def __init__(self, width, bias):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width, bias=bias)
        self.c_proj = nn.Linear(4 * width, width, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width, heads, bias):
        super().__init__()
        self.ln_1 = LayerNorm(width, bias)
        self.attn = CausalSelfAttention(width, heads, bias)
        self.ln_2 = LayerNorm(width, bias)
        self.mlp = GptMlp(width, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, context, width, layers, heads, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width),
            wpe=nn.Embedding(context, width),
            h=nn.ModuleList([Block(width, heads, bias) for _ in range(layers)]),
            ln_f=LayerNorm(width, bias)))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# --- graph models, from the papers' formulas on dense matrices ----------------------------
# A batch of graphs as one graph of N nodes; edge_index [2, E] (source, target). The C++ layers
# (src/model/parts/GraphConv.cpp) scatter messages edge by edge with index_add_; these write the same
# formulas with dense [N, N] matrices, A[t, s] = 1 for an edge s -> t, so they share no code path.

def dense_adjacency(edge_index, n):
    a = torch.zeros(n, n)
    a[edge_index[1], edge_index[0]] = 1.0  # the test graphs have no duplicate edges
    return a


def dense_edge_features(edge_index, edge_features, n):
    """[N, N, F_e]: the features of edge s -> t at [t, s]; zero elsewhere (self loops too)."""
    out = torch.zeros(n, n, edge_features.shape[1])
    out[edge_index[1], edge_index[0]] = edge_features
    return out


class GCNConv(nn.Module):
    """Kipf & Welling (2017): X' = D^-1/2 (A + I) D^-1/2 X W + b, D the (in-)degrees of A + I."""

    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout, bias=False)
        self.bias = nn.Parameter(torch.zeros(fout))

    def forward(self, x, a, e):
        a_hat = a + torch.eye(a.shape[0])
        d = torch.diag(a_hat.sum(1).pow(-0.5))
        return d @ a_hat @ d @ self.lin(x) + self.bias


class GATConv(nn.Module):
    """Velickovic et al. (2018), heads concatenated; with edge features the attention logit
    gains att_edge . W_e e_ji (self loops: zero features)."""

    def __init__(self, fin, fout, heads, edge_dim):
        super().__init__()
        self.heads, self.channels = heads, fout // heads
        self.lin = nn.Linear(fin, fout, bias=False)
        self.att_src = nn.Parameter(torch.zeros(1, heads, self.channels))
        self.att_dst = nn.Parameter(torch.zeros(1, heads, self.channels))
        if edge_dim:
            self.lin_edge = nn.Linear(edge_dim, fout, bias=False)
            self.att_edge = nn.Parameter(torch.zeros(1, heads, self.channels))
        self.bias = nn.Parameter(torch.zeros(fout))

    def forward(self, x, a, e):
        n = x.shape[0]
        h = self.lin(x).view(n, self.heads, self.channels)
        src = (h * self.att_src).sum(-1)  # [N, H]
        dst = (h * self.att_dst).sum(-1)
        logits = dst.unsqueeze(1) + src.unsqueeze(0)  # [t, s, H]
        if e is not None:
            we = self.lin_edge(e).view(n, n, self.heads, self.channels)
            logits = logits + (we * self.att_edge).sum(-1)
        logits = F.leaky_relu(logits, 0.2)
        mask = (a + torch.eye(n)) > 0
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        alpha = logits.softmax(dim=1)  # over sources s
        out = torch.einsum("tsh,shc->thc", alpha, h)
        return out.reshape(n, -1) + self.bias


class GINConv(nn.Module):
    """Xu et al. (2019), GIN-0: MLP(x + sum of neighbours); with edge features GINE (Hu et al.
    2020): the messages are ReLU(x_j + Linear(e_ji))."""

    def __init__(self, fin, fout, edge_dim):
        super().__init__()
        self.nn = nn.Sequential(nn.Linear(fin, fout), nn.ReLU(), nn.Linear(fout, fout))
        if edge_dim:
            self.lin = nn.Linear(edge_dim, fin)

    def forward(self, x, a, e):
        if e is None:
            return self.nn(x + a @ x)
        messages = F.relu(x.unsqueeze(0) + self.lin(e))  # [t, s, F]
        return self.nn(x + (a.unsqueeze(-1) * messages).sum(1))


class NodeLinear(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout)

    def forward(self, x, a, e):
        return self.lin(x)


class AttentionPool(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.gate = nn.Linear(width, 1)


class Gnn(nn.Module):
    def __init__(self, f, conv, features, vocab, edge_dim, outputs):
        super().__init__()
        hidden, layers = int(attr(f, "hidden")), int(attr(f, "layers"))
        if features:
            self.node_encoder = nn.Linear(features, hidden)
        if vocab:
            self.type_embedding = nn.Embedding(vocab, hidden)
        make = {"gcn": lambda: GCNConv(hidden, hidden),
                "gat": lambda: GATConv(hidden, hidden, int(attr(f, "heads")), edge_dim),
                "gin": lambda: GINConv(hidden, hidden, edge_dim),
                "none": lambda: NodeLinear(hidden, hidden)}[conv]
        self.convs = nn.ModuleList([make() for _ in range(layers)])
        self.pooling = attr(f, "pooling")
        if self.pooling == "attention":
            self.pool = AttentionPool(hidden)
        self.head = make_head(hidden, int(attr(f, "head_hidden")), outputs)
        self.residual = bool(attr(f, "residual"))
        if "criterion.weight" in f["model"]:
            self.criterion = nn.CrossEntropyLoss(weight=torch.ones(outputs), reduction="sum")

    def forward(self, g):
        x = 0
        if hasattr(self, "node_encoder"):
            x = self.node_encoder(g["node_features"])
        if hasattr(self, "type_embedding"):
            x = x + self.type_embedding(g["node_type"])
        n = x.shape[0]
        a = dense_adjacency(g["edge_index"], n)
        e = (dense_edge_features(g["edge_index"], g["edge_features"], n)
             if "edge_features" in g else None)
        for conv in self.convs:
            z = F.relu(conv(x, a, e))
            x = x + z if self.residual else z
        owner = g["node_graph"]
        pooled = []
        for b in range(int(owner.max()) + 1):
            h = x[owner == b]
            if self.pooling == "sum":
                pooled.append(h.sum(0))
            elif self.pooling == "mean":
                pooled.append(h.mean(0))
            elif self.pooling == "max":
                pooled.append(h.max(0).values)
            else:
                w = self.pool.gate(h).softmax(0)
                pooled.append((w * h).sum(0))
        return self.head(torch.stack(pooled))


def build_gnn(f, targets):
    g = {k: torch.from_numpy(v[()]) for k, v in f["graph"].items()}
    task = attr(f, "task")
    outputs = int(attr(f, "num_classes")) if task == "classification" else (
        1 if targets.dim() == 1 else targets.shape[1])
    features = g["node_features"].shape[1] if "node_features" in g else 0
    edge_dim = g["edge_features"].shape[1] if "edge_features" in g else 0
    module = Gnn(f, attr(f, "conv"), features, int(attr(f, "vocab_size")), edge_dim, outputs)
    return module, g, targets


class DenseGatConv(nn.Module):
    """PyG's GATConv(width, width // heads, heads) on an edge list, computed densely."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.channels = heads, width // heads
        self.lin = nn.Linear(width, width, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, self.channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, self.channels))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, h, edge_index):
        m = h.shape[0]
        x = self.lin(h).view(m, self.heads, self.channels)
        a_src = (x * self.att_src).sum(-1)  # [M, H]
        a_dst = (x * self.att_dst).sum(-1)
        adjacent = torch.zeros(m, m, dtype=torch.bool)  # [dst, src]
        adjacent[edge_index[1], edge_index[0]] = True
        scores = F.leaky_relu(a_dst.t().unsqueeze(2) + a_src.t().unsqueeze(1), 0.2)  # [H, dst, src]
        scores = scores.masked_fill(~adjacent, float("-inf"))
        alpha = torch.softmax(scores, dim=2).nan_to_num(0.0)  # a node without edges gets nothing
        out = torch.einsum("hds,shc->dhc", alpha, x)
        return out.reshape(m, -1) + self.bias


class PanelTransformer(nn.Module):
    def __init__(self, features, window, hidden, heads, layers):
        super().__init__()
        self.input = nn.Linear(features, hidden)
        self.position = nn.Parameter(torch.zeros(window, hidden))
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers)])
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        h = self.input(x) + self.position
        for layer in self.layers:
            h = layer(h)
        return self.norm(h[:, -1])


class PanelGat(nn.Module):
    """kind: gat as a PyTorch user writes it: encoder per instrument, GAT layers, head."""

    def __init__(self, encoder, features, window, hidden, layers, heads, gat_layers, head_hidden,
                 outputs):
        super().__init__()
        self.lstm = encoder == "lstm"
        self.encoder = (nn.LSTM(features, hidden, layers, batch_first=True) if self.lstm
                        else PanelTransformer(features, window, hidden, heads, layers))
        if gat_layers:
            self.gat = nn.ModuleList([DenseGatConv(hidden, heads) for _ in range(gat_layers)])
            self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(gat_layers)])
        self.head = make_head(hidden, head_hidden, outputs)

    def forward(self, batch):
        values, mask, edge_index = batch
        b, n, w, f = values.shape
        x = values.reshape(b * n, w, f)
        h = self.encoder(x)[1][0][-1] if self.lstm else self.encoder(x)
        h = h * mask.reshape(-1, 1)  # absent instruments: zero encodings
        if hasattr(self, "gat"):
            for conv, norm in zip(self.gat, self.norms):
                h = norm(h + F.elu(conv(h, edge_index)))
        return self.head(h).view(b, n, -1)


def daily_correlations(x, y, present):
    """Sum over dates (and target columns) of the Pearson correlation across present instruments;
    0 for a date with fewer than two or a constant side. x, y: [B, N, K]."""
    total = 0.0
    for b in range(x.shape[0]):
        use = present[b]
        for k in range(x.shape[2]):
            a, c = x[b, use, k].double(), y[b, use, k].double()
            if a.numel() < 2:
                continue
            a, c = a - a.mean(), c - c.mean()
            scale = (a.square().sum() * c.square().sum()).sqrt()
            if scale > 1e-12:
                total += float((a * c).sum() / scale)
    return torch.tensor(total)


def ranks(x, present):
    """Ranks among each date's present instruments (stable: ties in instrument order)."""
    key = x.masked_fill(~present.unsqueeze(2), float("inf"))
    order = torch.sort(key, dim=1, stable=True).indices
    out = torch.empty_like(order)
    out.scatter_(1, order, torch.arange(x.shape[1]).view(1, -1, 1).expand_as(order))
    return out.float()


def panel_loss_and_metrics(f, out, targets, present):
    task, loss = attr(f, "task"), attr(f, "loss")
    weight = present.float()
    count = weight.sum(1).clamp_min(1)

    def date_means(per_instrument):
        return ((per_instrument * weight).sum(1) / count).sum()

    if task == "classification":
        labels = (targets > 0).long()
        per = F.cross_entropy(out.reshape(-1, 2), labels.reshape(-1), reduction="none").view(labels.shape)
        score = (out[..., 1] - out[..., 0]).detach().unsqueeze(2)
        correct = (out.argmax(2) == labels).float()
        metrics = {"accuracy": date_means(correct)}
        pred = out
    else:
        pred = out.squeeze(2) if targets.dim() == 2 else out
        p3, t3 = pred.view(*targets.shape[:2], -1), targets.view(*targets.shape[:2], -1)
        if loss == "huber":
            per = F.huber_loss(p3, t3, reduction="none", delta=float(attr(f, "huber_delta"))).sum(2)
        else:
            per = F.mse_loss(p3, t3, reduction="none").sum(2)
        err = (p3 - t3).detach()
        metrics = {"mse": date_means(err.square().sum(2)), "mae": date_means(err.abs().sum(2))}
        score = p3.detach()
    target3 = targets.view(*targets.shape[:2], -1)
    metrics["ic"] = daily_correlations(score, target3, present)
    metrics["rank_ic"] = daily_correlations(ranks(score, present), ranks(target3, present), present)
    return pred, date_means(per), metrics


# --- the graph builder: a numpy reference -------------------------------------------------------

def reference_graph(returns, present, sector, k, min_periods):
    """Edges [2, E] (src, dst) of one date, sorted by (dst, src): Note [Panel graph] in
    src/model/parts/PanelGraph.h, written with loops over pairs."""
    n = returns.shape[0]
    seen = np.isfinite(returns)
    corr = np.full((n, n), -np.inf)
    for i in range(n):
        for j in range(n):
            if i == j or not (present[i] and present[j]):
                continue
            both = seen[i] & seen[j]
            if both.sum() < min_periods:
                continue
            a, b = returns[i, both].astype(np.float64), returns[j, both].astype(np.float64)
            # A constant series over the shared dates has no correlation (relative threshold as
            # in the C++ builder).
            if ((a - a.mean()) ** 2).sum() <= 1e-10 * (a ** 2).sum():
                continue
            if ((b - b.mean()) ** 2).sum() <= 1e-10 * (b ** 2).sum():
                continue
            corr[i, j] = np.corrcoef(a, b)[0, 1]
    adjacent = np.zeros((n, n), dtype=bool)  # [dst, src]
    for i in range(n):
        if present[i]:
            adjacent[i, i] = True
        candidates = [j for j in np.argsort(-corr[i], kind="stable")[:k] if np.isfinite(corr[i, j])]
        adjacent[i, candidates] = True
        if sector is not None and sector[i] >= 0 and present[i]:
            adjacent[i, (sector == sector[i]) & present] = True
    dst, src = np.nonzero(adjacent)
    return np.stack([src, dst])


# --- the comparison ---------------------------------------------------------------------

def attr(f, name):
    value = f.attrs[name]
    return value.decode() if isinstance(value, bytes) else value


def build(f):
    kind, task = attr(f, "kind"), attr(f, "task")
    inputs = [torch.from_numpy(f["inputs"][str(i)][()]) for i in range(len(f["inputs"]))]
    targets = torch.from_numpy(f["targets"][()])
    if kind == "gnn":
        return build_gnn(f, targets)
    hidden, layers = int(attr(f, "hidden")), int(attr(f, "layers"))
    if kind == "gat":
        task = attr(f, "task")
        outputs = 2 if task == "classification" else (1 if targets.dim() == 2 else targets.shape[2])
        values = inputs[0]
        module = PanelGat(attr(f, "encoder"), values.shape[3], values.shape[2], hidden, layers,
                          int(attr(f, "heads")), int(attr(f, "gat_layers")),
                          int(attr(f, "head_hidden")), outputs)
        edges = torch.from_numpy(f["edges"][()]).long() if "edges" in f else None
        return module, (values, inputs[1].bool(), edges), targets
    if kind == "gpt":
        context = inputs[0].shape[1]
        module = Gpt(int(attr(f, "vocab_size")), context, hidden, layers, int(attr(f, "heads")),
                     bool(attr(f, "bias")))
        return module, inputs[0], targets
    outputs = int(attr(f, "num_classes")) if task == "classification" else (
        1 if targets.dim() == 1 else targets.shape[1])
    if kind == "lstm":
        streams = attr(f, "streams").split(",")
        module = MultiStreamLstm(streams, [x.shape[2] for x in inputs], hidden, layers,
                                 int(attr(f, "head_hidden")), outputs)
    else:
        width = sum(int(np.prod(x.shape[1:])) for x in inputs)
        module = Mlp(width, hidden, layers, outputs)
    return module, inputs, targets


def loss_and_metrics(f, out, targets, module=None):
    kind, task, loss = attr(f, "kind"), attr(f, "task"), attr(f, "loss")
    if kind == "gat":
        return panel_loss_and_metrics(f, out, targets, torch.from_numpy(f["inputs"]["1"][()]).bool())
    if kind == "gpt":
        logits = out.reshape(-1, out.shape[-1])
        value = F.cross_entropy(logits, targets.reshape(-1), reduction="sum")
        return out, value, {"accuracy": (out.argmax(-1) == targets).sum().float()}
    if task == "classification":
        weight = module.criterion.weight if hasattr(module, "criterion") else None
        value = F.cross_entropy(out, targets, weight=weight, reduction="sum")
        return out, value, {"accuracy": (out.argmax(1) == targets).sum().float()}
    pred = out.squeeze(1) if targets.dim() == 1 else out
    if loss == "huber":
        value = F.huber_loss(pred, targets, reduction="sum", delta=float(attr(f, "huber_delta")))
    else:
        value = F.mse_loss(pred, targets, reduction="sum")
    err = (pred - targets).detach()
    return pred, value, {"mse": err.square().sum(), "mae": err.abs().sum()}


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DUMP:
            raise unittest.SkipTest("pass the path of megabatch_model_parity")
        cls._tmp = tempfile.TemporaryDirectory(prefix="mbparity-")
        subprocess.run([DUMP, cls._tmp.name], check=True)
        cls.files = sorted(os.path.join(cls._tmp.name, n) for n in os.listdir(cls._tmp.name)
                           if n.endswith(".h5"))
        graphs = os.path.join(cls._tmp.name, "graphs")
        cls.graph_files = sorted(os.path.join(graphs, n) for n in os.listdir(graphs))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def assertClose(self, name, ours, theirs):
        theirs = torch.as_tensor(theirs, dtype=ours.dtype)
        self.assertEqual(tuple(ours.shape), tuple(theirs.shape), name)
        diff = (ours - theirs).abs().max().item() if ours.numel() else 0.0
        self.assertTrue(torch.allclose(ours, theirs, rtol=TOL, atol=TOL),
                        "%s: max abs difference %.3g" % (name, diff))
        return diff

    def test_cases_were_computed_on_the_test_device(self):
        for path in self.files:
            with h5py.File(path, "r") as f:
                self.assertTrue(attr(f, "device").startswith(mbtest.DEVICE), (path, attr(f, "device")))

    def test_cases_cover_every_kind(self):
        kinds = {re.split(r"[_.]", os.path.basename(p))[0] for p in self.files}
        self.assertEqual(kinds, {"lstm", "mlp", "gpt", "gnn", "gat"})
        self.assertGreaterEqual(len(self.files), 16)
        convs = {re.split(r"[_.]", os.path.basename(p))[1] for p in self.files if "gnn" in p}
        self.assertEqual(convs, {"gcn", "gat", "gin", "gine", "none"})

    def test_parity(self):
        for path in self.files:
            with self.subTest(case=os.path.basename(path)), h5py.File(path, "r") as f:
                module, inputs, targets = build(f)
                state = {k: torch.from_numpy(v[()]) for k, v in f["model"].items()}
                for k, v in state.items():
                    self.assertEqual(v.dtype, torch.float32, k)
                    self.assertTrue(f["model"][k].fletcher32, k)
                # strict: every name of the torch.nn module is in the file and nothing else
                self.assertEqual(set(state), set(module.state_dict()))
                module.load_state_dict(state, strict=True)
                out, loss, metrics = loss_and_metrics(f, module(inputs), targets, module)
                loss.backward()
                worst = self.assertClose("output", out.detach(), f["output"][()])
                self.assertClose("loss", loss.detach(), f["loss"][()])
                for name, value in metrics.items():
                    self.assertClose("metric " + name, value, f["metrics"][name][()])
                grads = dict(module.named_parameters())
                self.assertEqual(set(grads), set(f["grads"]))
                for name, p in grads.items():
                    worst = max(worst, self.assertClose("grad " + name, p.grad, f["grads"][name][()]))
                print("%s: %d tensors, loss %.5f, max |diff| %.2g" % (
                    os.path.basename(path), len(state), loss.item(), worst))

    def test_comparison_is_sensitive(self):
        # A wrong weight (one entry off by PERTURBATION) must break the match: the test can fail.
        for path in self.files:
            with self.subTest(case=os.path.basename(path)), h5py.File(path, "r") as f:
                module, inputs, targets = build(f)
                state = {k: torch.from_numpy(v[()]) for k, v in f["model"].items()}
                name = sorted(k for k in state if k.endswith("weight") and "ln" not in k)[0]
                if attr(f, "kind") == "gnn":  # a ReLU unit may be off for every node: perturb
                    # the head's last layer, whose inputs are GELU outputs (or the pooled sum)
                    name = sorted(k for k in state if re.match(r"head\.\d+\.weight", k))[-1]
                state[name].view(-1)[0] += PERTURBATION
                if name == "transformer.wte.weight":
                    state["lm_head.weight"] = state[name]
                module.load_state_dict(state, strict=True)
                with torch.no_grad():
                    out, _, _ = loss_and_metrics(f, module(inputs), targets, module)
                ours = torch.from_numpy(f["output"][()])
                self.assertFalse(torch.allclose(out, ours, rtol=TOL, atol=TOL), name)

    def test_gat_edges_are_the_reference_graph(self):
        # The batch graph the gat cases attended over is the numpy reference's, date by date.
        for path in self.files:
            if not os.path.basename(path).startswith("gat") or "without_graph" in path:
                continue
            with self.subTest(case=os.path.basename(path)), h5py.File(path, "r") as f:
                present = f["inputs"]["1"][()].astype(bool)
                returns = f["inputs"]["2"][()]
                sector = f["inputs"]["3"][()] if "3" in f["inputs"] else None
                n = present.shape[1]
                expected = np.concatenate([
                    reference_graph(returns[b], present[b], None if sector is None else sector[b],
                                    int(attr(f, "graph_k")), int(attr(f, "graph_min_periods"))) + b * n
                    for b in range(present.shape[0])], axis=1)
                np.testing.assert_array_equal(f["edges"][()], expected)

    # --- the graph builder (OUT_DIR/graphs) -------------------------------------------------

    def graph_cases(self):
        for path in self.graph_files:
            with h5py.File(path, "r") as f:
                yield (os.path.basename(path), f["returns"][()], f["present"][()].astype(bool),
                       f["sector"][()] if "sector" in f else None, int(attr(f, "k")),
                       int(attr(f, "min_periods")),
                       [f["edges"][str(d)][()] for d in range(len(f["edges"]))])

    def test_graph_builder_matches_the_reference_edge_for_edge(self):
        # model::buildPanelGraphs (batched matmuls + topk on the test device) against the loops.
        self.assertGreaterEqual(len(self.graph_files), 4)
        for name, returns, present, sector, k, min_periods, edges in self.graph_cases():
            for d, got in enumerate(edges):
                with self.subTest(case=name, date=d):
                    expected = reference_graph(returns[d], present[d],
                                               None if sector is None else sector[d], k, min_periods)
                    self.assertEqual(got.shape, expected.shape)
                    np.testing.assert_array_equal(got, expected)
                    src, dst = got
                    # Absent instruments take part in no edge; present ones attend to themselves.
                    self.assertTrue(present[d][src].all() and present[d][dst].all())
                    self.assertEqual(set(src[src == dst]), set(np.nonzero(present[d])[0]))
            print("%s: %d dates, %d edges" % (name, len(edges), sum(e.shape[1] for e in edges)))

    def test_graph_reference_can_tell_graphs_apart(self):
        # Another k gives other edges: the comparison above can fail.
        name, returns, present, sector, k, min_periods, edges = next(
            c for c in self.graph_cases() if c[0] == "knn_k5.h5")
        other = reference_graph(returns[0], present[0], None if sector is None else sector[0],
                                k - 1, min_periods)
        self.assertFalse(other.shape == edges[0].shape and np.array_equal(other, edges[0]), name)

    def test_tied_weights_stored_under_both_names(self):
        for path in self.files:
            if not os.path.basename(path).startswith("gpt"):
                continue
            with h5py.File(path, "r") as f:
                np.testing.assert_array_equal(f["model"]["lm_head.weight"][()],
                                              f["model"]["transformer.wte.weight"][()])

    def test_gpt2_initialisation(self):
        with h5py.File([p for p in self.files if p.endswith("gpt.h5")][0], "r") as f:
            m = f["model"]
            layers = int(attr(f, "layers"))
            self.assertAlmostEqual(float(np.std(m["transformer.wte.weight"][()])), 0.02, delta=0.003)
            proj = np.concatenate([m["transformer.h.%d.attn.c_proj.weight" % i][()].ravel()
                                   for i in range(layers)])
            self.assertAlmostEqual(float(np.std(proj)), 0.02 / math.sqrt(2 * layers), delta=0.002)
            np.testing.assert_array_equal(m["transformer.h.0.ln_1.weight"][()], 1.0)
            np.testing.assert_array_equal(m["transformer.h.0.attn.c_attn.bias"][()], 0.0)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        DUMP = sys.argv.pop(1)
    torch.manual_seed(0)
    unittest.main(verbosity=2)
