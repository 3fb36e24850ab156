"""Layers for tests/nn/test_nn_layouts.py, importable by the ranks of a local world: the docs'
example layer (read from docs/python-api.md's python block, so the test checks what the page shows),
layers with layout mistakes, a layer right on 1x1x1 and wrong on a grid, layers on edge values;
and `rank_checks`, the whole test file's work inside one world."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F

import plexus.nn as pnn
from plexus_datasets.graph import incoming
from plexus.nn.check import layer_records

README = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"
_block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"),
                                    re.S) if "pnn.Layer" in b)
exec(_block.split('if __name__ == "__main__":')[0], globals())  # noqa: S102 (our docs)
README_LAYER = "WeightedConv"


class OneWeight(pnn.Layer):
    """A layer with one weight ``w`` (d_in × d_out); most layers below are one, some declare
    more after it."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.weight("w")


# ---- layout mistakes: each must fail with a one-line LayoutError on every grid --------------
class PygStyleCombine(OneWeight):
    """Aggregate, then linear, left at the default order "combine" (the issue's first case)."""

    def forward(self, g, x, step):
        return g.linear(g.aggregate(x), self.w)


class SkipWithoutToRows(OneWeight):
    """order "agg", a skip term x·W_root without g.to_rows (the issue's second case)."""

    order = "agg"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.weight("w_root")

    def forward(self, g, x, step):
        return g.linear(g.aggregate(x), self.w) + g.linear(x, self.w_root)


class AddRawSkip(OneWeight):
    """order "combine", the skip term added in its input rows: Â-rows + nodes."""

    def forward(self, g, x, step):
        h = g.linear(x, self.w)
        return g.aggregate(h) + h


class ParameterDirectly(OneWeight):
    """``x @ self.w`` instead of g.linear: right on one rank, a partial product on a grid."""

    def forward(self, g, x, step):
        return g.aggregate(x @ self.w)


class ForgotAggregate(OneWeight):
    """order "combine" but never aggregates: returns the input's rows, not Â's."""

    def forward(self, g, x, step):
        return g.linear(x, self.w)



class ScalarNotReplicated(OneWeight):
    """GIN-like (1+ε)·x_i + Σ x_j with ε used without g.replicate: right values on every grid,
    ε's gradient only this rank's part on a grid: refused on every grid, 1x1x1 included."""

    order = "agg"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.scalar("eps")

    def forward(self, g, x, step):
        return g.linear(g.aggregate(x) + (1 + self.eps) * g.to_rows(x), self.w)


class NormalizeOverCutColumns(OneWeight):
    """F.normalize(out, dim=1) of an output whose columns are cut: each rank would divide by
    its own columns' norm: refused on every grid."""

    def forward(self, g, x, step):
        return F.normalize(g.aggregate(g.linear(x, self.w)), dim=1)


MISTAKES = {"pyg-style-at-combine": PygStyleCombine, "skip-without-to-rows": SkipWithoutToRows,
            "raw-skip-add": AddRawSkip, "parameter-directly": ParameterDirectly,
            "forgot-aggregate": ForgotAggregate, "scalar-not-replicated": ScalarNotReplicated,
            "normalize-cut-columns": NormalizeOverCutColumns}
#: what each mistake's message must name (the fix)
MISTAKE_FIX = {"scalar-not-replicated": "g.replicate(self.eps)",
               "normalize-cut-columns": "g.normalize_rows"}


# ---- correct layers with the toolkit's scalar and row norm: check_layer PASSes them ----------
class ScalarsEverywhere(OneWeight):
    """order "agg": a learnable scalar on every tensor it can meet — the input, Â-rows×in
    (GIN's (1+ε)), the output — and the output's rows normalized (g.normalize_rows)."""

    order = "agg"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.vector("bias")
        for name in ("eps", "t_in", "t_out"):
            self.scalar(name, init="ones")

    def forward(self, g, x, step):
        eps, t_in, t_out = (g.replicate(s) for s in (self.eps, self.t_in, self.t_out))
        h = g.aggregate(x * t_in) + (1 + eps) * g.to_rows(x)
        out = g.add_bias(g.linear(h, self.w), self.bias)
        return t_out * g.normalize_rows(out) + out


class ScaledCombine(OneWeight):
    """order "combine": a scalar on g.linear's output and on the output, a row norm of each."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.scalar("a", init="ones")
        self.scalar("b", init="ones")

    def forward(self, g, x, step):
        a, b = g.replicate(self.a), g.replicate(self.b)
        z = g.linear(x, self.w)
        z = z * a / (1 + g.row_norm(z))
        out = g.aggregate(z)
        return out * b + g.normalize_rows(out)


class ScaledDense(OneWeight):
    """order "dense": a scalar on the input and on the output (which is g.linear's), a row
    norm of the output."""

    order = "dense"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.vector("bias")
        self.scalar("a", init="ones")
        self.scalar("b", init="ones")

    def forward(self, g, x, step):
        a, b = g.replicate(self.a), g.replicate(self.b)
        out = g.add_bias(g.linear(x * a, self.w), self.bias)
        return out * b / (1 + g.row_norm(out))


class HiddenScalar(OneWeight):
    """A scalar whose layout is stripped (plexus.nn.layouts.plain) before use: the toolkit
    cannot see it; right on one rank, its gradient this rank's part on a grid (check_layer's
    FAIL names the cause and the fix)."""

    order = "agg"

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.scalar("eps")

    def forward(self, g, x, step):
        from plexus.nn.layouts import plain

        return g.linear(g.aggregate(x) + (1 + plain(self.eps)) * g.to_rows(x), self.w)


# ---- edge values ----------------------------------------------------------------------------
class EdgeValueGCN(OneWeight):
    """GCNConv through per-edge values: Σ_j Â_ij·(x_j·W) + b with Â's values from the edges."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.vector("bias")

    def forward(self, g, x, step):
        return g.add_bias(g.aggregate(g.linear(x, self.w), g.edge_values()), self.bias)


class ValuesTimesWeights(OneWeight):
    """GCN's Â values times the graph's weights, per edge, in g.aggregate_weighted:
    Σ_j (Â_ij·w_ji)·z_j (self loops GCN adds weigh 0)."""

    def forward(self, g, x, step):
        alpha = g.edge_values() * g.edge_weights()  # per-edge product, both ``edges``
        return g.aggregate_weighted(alpha, g.linear(x, self.w), 1, self.out_features)


def serial_logits(name: str, graph, params: dict) -> torch.Tensor:
    """The serial version of an edge-value layer (two layers, ReLU between, no dropout)."""
    x = torch.from_numpy(graph.features)
    ahat = torch.from_numpy(graph.normalized("gcn").toarray())
    w = torch.from_numpy(incoming(graph.adj, graph.directed, graph.weighted).toarray())
    for l in range(2):
        if name == "readme":
            h = (w @ x) @ params[f"{l}.w"] + x @ params[f"{l}.w_root"] + params[f"{l}.bias"]
        elif name == "edge-value-gcn":
            h = ahat @ (x @ params[f"{l}.w"]) + params[f"{l}.bias"]
        else:
            h = (ahat * w) @ (x @ params[f"{l}.w"])
        x = F.relu(h) if l == 0 else h
    return x


EDGE_LAYERS = {"readme": README_LAYER, "edge-value-gcn": EdgeValueGCN,
               "values-times-weights": ValuesTimesWeights}


def check_mistake(layer, grid, g) -> list[str]:
    """The layer must stop with a one-line LayoutError naming an operation and a fix."""
    try:
        net = pnn.Network(g, grid, [layer(g.num_features, 6), layer(6, g.num_classes)])
        net.loss(net(step=0)).backward()
    except pnn.LayoutError as e:
        msg = str(e)
        if "\n" in msg or "g." not in msg or "×" not in msg or not msg.startswith("layer "):
            return [f"not a one-line error naming the layer, the layouts and a fix: {msg!r}"]
        fix = next((f for n, f in MISTAKE_FIX.items() if MISTAKES[n] is layer), "")
        return [f"the message does not name the fix {fix}: {msg!r}"] if fix not in msg else []
    except Exception as e:  # noqa: BLE001
        return [f"{type(e).__name__} instead of LayoutError: {str(e).splitlines()[0]}"]
    return ["no error"]


def check_edge_layer(name, grid, g) -> list[str]:
    """The edge-value layer against its serial version: logits and every gradient."""
    from plexus.engine.tolerance import close

    make = globals()[EDGE_LAYERS[name]] if isinstance(EDGE_LAYERS[name], str) else EDGE_LAYERS[name]
    net = pnn.Network(g, grid, [make(g.num_features, 6), make(6, g.num_classes)],
                      aggregation="gcn", seed=3)
    params = {k: v.clone().requires_grad_() for k, v in net.full_parameters().items()}
    net.train()
    zd = net(step=0)
    zs = serial_logits(name, g, params)
    mask, labels = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    ld, ls = net.loss(zd), F.cross_entropy(zs[mask], labels[mask])
    ld.backward()
    ls.backward()
    rows, c0 = net.node_ids, net.class_start
    real = rows >= 0
    c1 = min(c0 + zd.shape[1], g.num_classes)
    fails = close("loss", ld, ls)
    if c1 > c0:
        fails += close("logits", zd[real][:, : c1 - c0], zs[rows[real]][:, c0:c1])
    for pname, p in net.named_shards().items():
        fails += close(f"grad {pname}", p.grad, net.shard_of(pname, params[pname].grad))
    return fails


def rank_checks(grids) -> dict:
    """Everything tests/nn/test_nn_layouts.py checks on ``grids`` (one world size), this rank's
    part: {check: failures} and check_layer's records (rank 0's hold the tensors)."""
    from plexus_datasets.toy import directed_toy_graph, toy_graph
    from plexus.engine.grid import Grid

    from engine_checks import weighted_graph

    graphs = {"undirected": toy_graph(), "directed": directed_toy_graph()}
    out: dict = {}
    for dims in grids:
        grid = Grid.create(dims)
        tag = "x".join(map(str, dims))
        for gname, g in graphs.items():
            for name, layer in MISTAKES.items():
                out[f"{tag}/{gname}/mistake/{name}"] = check_mistake(layer, grid, g)
            for name in EDGE_LAYERS:
                # weighted graphs (weights, weighted self loops) for every layer; the unweighted
                # one (every weight 1) for the layer on the graph's weights
                for weighted in ((False, True) if name == "readme" else (True,)):
                    gw = weighted_graph(g) if weighted else g
                    key = f"{tag}/{gname}{'-weighted' if weighted else ''}/edges/{name}"
                    out[key] = check_edge_layer(name, grid, gw)
    records = {name: layer_records(f"nn_layers:{cls}", grids)
               for name, cls in (("readme", README_LAYER), ("wrong", "HiddenScalar"),
                                 ("scalars-agg", "ScalarsEverywhere"),
                                 ("scalars-combine", "ScaledCombine"),
                                 ("scalars-dense", "ScaledDense"))}
    return {"checks": out, "records": records}


class Propagate(pnn.Layer):
    """APPNP's propagation without parameters: 3 hops z ← 0.9·Â·z + 0.1·x (PyG's ``APPNP(K=3,
    alpha=0.1)``), the width kept; `check_layer` checks it by outputs and input gradients."""

    order = "agg"
    activation = None

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        if in_features != out_features:
            raise ValueError("a propagation keeps its width")

    def forward(self, g, x, step):
        h = 0.1 * g.to_rows(x)
        z = x
        for k in range(3):
            rows = 0.9 * g.aggregate(z) + h
            if k < 2:
                z = g.to_nodes(rows)
        return g.linear(rows, None, identity=1.0)


class TwoHopsWithoutToNodes(Propagate):
    """Two hops without `g.to_nodes` between them: the second `g.aggregate` gets Â·Z's rows,
    not the input's, which every grid refuses (1x1x1 included)."""

    def forward(self, g, x, step):
        rows = g.aggregate(g.aggregate(x))
        return g.linear(rows, None, identity=1.0)
