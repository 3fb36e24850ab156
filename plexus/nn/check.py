"""`check_layer`: a user's `Layer` on several grids against 1x1x1, PASS/FAIL per grid and graph
with the largest differences (``plexus-bench check --layer module:Class`` prints the same).

Each grid runs a two-layer `Network` of the layer (in_features → hidden → classes) on a small
undirected and a small directed graph (`plexus_datasets.toy`), one training step with dropout:
full logits, the loss and every parameter's full gradient, held to the exactness checks'
tolerance (`plexus.engine.tolerance`) against 1x1x1's. A layout mistake fails on every grid
with its one-line `LayoutError`; a layer that is right on one rank and wrong on several fails
on the grids where it differs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from plexus_datasets.graph import Graph
from plexus_datasets.toy import directed_toy_graph, toy_graph
from plexus.engine.tolerance import difference

from .network import Layer, Network

#: 1x1x1 (the reference), then every grid of 2 ranks and three of 4 (each axis split in turn)
GRIDS = ((1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 1, 2), (1, 2, 2), (2, 2, 1))
HIDDEN = 6  # not a multiple of the axis sizes: padding is exercised
STEP = 3  # the dropout key of the checked step


@dataclass
class LayerCheck:
    """One grid and graph against 1x1x1: the largest differences of the logits, the loss and
    any gradient, and the failure messages (a `LayoutError` or other error's line included)."""

    grid: str
    graph: str
    logits: float = 0.0
    loss: float = 0.0
    grads: float = 0.0
    failures: list[str] = field(default_factory=list)
    cause: str = ""  # why it differs and the fix, where the differences say (`diagnose`)
    compared: bool = True  # False: the layer raised here or on 1x1x1, no differences to show

    @property
    def passed(self) -> bool:
        return not self.failures

    def line(self, layer: str) -> str:
        """``PASS``/``FAIL``, the layer, grid and graph, the largest differences, the first
        failure; where nothing was compared (the layer raised), what it raised instead of
        differences."""
        out = f"{'PASS' if self.passed else 'FAIL'}  {layer}  {self.grid:<7} {self.graph:<10}  "
        more = f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        if not self.compared:
            return out + self.failures[0] + more
        out += (f"max abs diff vs 1x1x1: logits {self.logits:.1e}, loss {self.loss:.1e}, "
                f"grads {self.grads:.1e}")
        if self.failures:
            cause = f"{self.cause}; " if self.cause else ""
            out += f"  [{cause}{self.failures[0]}{more}]"
        return out


LayerFactory = Callable[[int, int], Layer]


def load_layer(spec: str) -> type:
    """The class named by ``module:Class`` (importable: on the path or an installed module).
    Raises `ValueError` with the problem and the fix."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{spec!r}: give the layer as module:Class (e.g. mylayers:MyConv)")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise ValueError(f"{spec!r}: cannot import {module} ({e}); run from its folder or put "
                         "it on PYTHONPATH") from None
    except AttributeError:
        raise ValueError(f"{spec!r}: module {module} has no {name}") from None
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise ValueError(f"{spec!r}: {name} is not a plexus.nn.Layer subclass")
    return cls


def default_graphs() -> dict[str, Graph]:
    """The checked graphs: a small undirected and a small directed one."""
    return {"undirected": toy_graph(), "directed": directed_toy_graph()}


def layer_records(layer: LayerFactory | str, grids: Sequence[tuple[int, int, int]],
                  graphs: dict[str, Graph] | None = None, *, hidden: int = HIDDEN,
                  dropout: float = 0.5, aggregation: str = "gcn", seed: int = 0) -> list[dict]:
    """This rank's part of `check_layer` on ``grids`` (all of this world's size; collective):
    per grid and graph, the full logits, loss and full gradients (rank 0's copies; other ranks
    return None in their place), or the error the layer raised as one line."""
    from plexus.engine.grid import Grid

    make = load_layer(layer) if isinstance(layer, str) else layer
    graphs = graphs or default_graphs()
    rank = torch.distributed.get_rank()
    out = []
    for dims in grids:
        grid = Grid.create(dims)
        for gname, g in graphs.items():
            record = {"grid": "x".join(map(str, dims)), "graph": gname}
            try:
                record.update(_one_step(make, g, grid, hidden, dropout, aggregation, seed))
            except Exception as e:  # noqa: BLE001 (the user's layer: every error is a FAIL)
                lines = [s for s in str(e).splitlines() if s.strip()] or [type(e).__name__]
                record["error"] = f"{type(e).__name__}: {lines[0]}"
            if rank and "error" not in record:
                record.update(logits=None, loss=None, grads=None)
            out.append(record)
    return out


class _Probe(Layer):
    """x·W, no aggregation and no activation: in front of a layer without parameters, W's
    gradient (Xᵀ times the layer's input gradient) carries that input gradient into the check."""

    order = "dense"
    activation = None

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.weight("w")

    def forward(self, g, x, step):  # noqa: ANN001, ANN201 - a Layer's forward
        return g.linear(x, self.w)


def check_layers(make: LayerFactory, num_features: int, hidden: int,
                 num_classes: int) -> list[Layer]:
    """The network `check_layer` runs: two of the layer (features → hidden → classes); a layer
    without parameters (a propagation, as APPNP's) keeps its width, so it runs twice on the
    classes' width after a `_Probe` (features → classes), whose gradient is the input's."""
    own = make(num_classes, num_classes)
    if not own.declared:
        return [_Probe(num_features, num_classes), own, make(num_classes, num_classes)]
    return [make(num_features, hidden), make(hidden, num_classes)]


def _one_step(make: LayerFactory, g: Graph, grid, hidden: int, dropout: float,
              aggregation: str, seed: int) -> dict:
    layers = check_layers(make, g.num_features, hidden, g.num_classes)
    net = Network(g, grid, layers, seed=seed, dropout=dropout, aggregation=aggregation)
    net.train()
    z = net(step=STEP)
    loss = net.loss(z)
    loss.backward()
    # every rank scatters its block into the full matrix; replicas count once
    full = torch.zeros(g.num_nodes, g.num_classes)
    seen = torch.zeros(g.num_nodes, g.num_classes)
    rows = net.node_ids
    real = rows >= 0
    c0 = net.class_start
    c1 = min(c0 + z.shape[1], g.num_classes)
    if c1 > c0:
        full[rows[real], c0:c1] = z.detach()[real][:, : c1 - c0].float()
        seen[rows[real], c0:c1] = 1
    torch.distributed.all_reduce(full)
    torch.distributed.all_reduce(seen)
    # numpy, not tensors: a tensor sent to the parent is shared through a file descriptor that
    # dies with the rank's process
    grads = {name: net.full_parameter(name, p.grad if p.grad is not None else
                                      torch.zeros_like(p)).cpu().numpy()
             for name, p in net.named_shards().items()}
    kinds = {f"{l}.{name}": kind for l, layer in enumerate(layers)
             for name, kind, _ in layer.declared}
    return {"logits": (full / seen.clamp(min=1)).numpy(), "loss": float(loss.detach()),
            "grads": grads, "kinds": kinds}


def compare(records: Sequence[dict]) -> list[LayerCheck]:
    """Each record of `layer_records` (rank 0's, every grid) against 1x1x1's of its graph."""
    ref = {r["graph"]: r for r in records if r["grid"] == "1x1x1"}
    out = []
    for r in records:
        check = LayerCheck(r["grid"], r["graph"])
        base = ref.get(r["graph"])
        if "error" in r:
            check.compared = False
            check.failures.append(f"the layer raised {r['error']}")
        elif base is None or "error" in base:
            check.compared = False
            check.failures.append("not compared: the layer raised on 1x1x1 (its line says "
                                  "what)" if base is not None else
                                  "not compared: 1x1x1 did not run")
        else:
            d = difference(torch.from_numpy(r["logits"]), torch.from_numpy(base["logits"]))
            check.logits = d.max_abs
            found = [d.message("logits")]
            d = difference(torch.tensor(r["loss"]), torch.tensor(base["loss"]))
            check.loss = d.max_abs
            found.append(d.message("loss"))
            for name, grad in r["grads"].items():
                d = difference(torch.from_numpy(grad), torch.from_numpy(base["grads"][name]))
                check.grads = max(check.grads, d.max_abs)
                found.append(d.message(f"grad {name}"))
            check.failures += [m for m in found if m]
            check.cause = diagnose(found, r.get("kinds", {}))
        out.append(check)
    return out


#: the collective each kind of parameter is used through: the fix when its gradient differs
_USE = {"scalar": "g.replicate(self.{0}) sums its gradient over every rank's part",
        "vector": "use it through g.add_bias(out, self.{0}) or g.head_sums",
        "weight": "use it through g.linear(x, self.{0})"}


def diagnose(found: Sequence[str], kinds: dict[str, str]) -> str:
    """The cause and the fix of a grid's differences from 1x1x1 (``found``: each difference's
    message or "", logits first, then the loss, then each gradient as "grad <name>: ...";
    ``kinds``: each parameter's kind), "" if none."""
    if not any(found):
        return ""
    if found[0] or found[1]:
        return ("cause: the values differ from 1x1x1's, so an operation saw this rank's block "
                "as the whole matrix (a reduction, slice or plain tensor over cut rows or "
                "columns, or a tensor stripped of its layout); fix: do it with g's operations "
                "(g.normalize_rows/g.row_norm for row norms, g.to_rows, g.aggregate, "
                "g.linear)")
    bad = [m.split(":")[0].removeprefix("grad ") for m in found[2:] if m]
    name = bad[0]
    kind = kinds.get(name, "")
    attr = name.split(".", 1)[-1]
    if kind in _USE:
        return (f"cause: the values agree but the gradient of the {kind} {name} is this rank's "
                f"part only (it was used without its collective); fix: "
                + _USE[kind].format(attr))
    return (f"cause: the values agree but the gradient of {name} misses other ranks' parts "
            "(a parameter used without its collective); fix: use parameters through g's "
            "operations (g.linear, g.add_bias, g.replicate)")


def check_layer(layer: type | LayerFactory | str, grids: Sequence[tuple[int, int, int]] = GRIDS,
                *, hidden: int = HIDDEN, dropout: float = 0.5, aggregation: str = "gcn",
                seed: int = 0, report: Callable[[str], None] | None = print,
                timeout: float = 600) -> list[LayerCheck]:
    """Run ``layer`` (a `Layer` class taking (in_features, out_features), a factory of that
    signature importable at module level, or "module:Class") in a two-layer `Network` on
    every grid of ``grids`` (1x1x1 first: the reference; one local gloo world per world size)
    on a small undirected and a small directed graph; ``report`` sees one PASS/FAIL line per
    check. Returns the checks; all passed means the layer gives 1x1x1's logits, loss and
    gradients on every grid (its layouts are consistent). A layer without parameters (a
    propagation) is checked by its outputs and its input gradients (`check_layers`)."""
    from plexus_partition.launch.env import threads_per_worker
    from plexus.runtime.world import run_world

    grids = [tuple(d) for d in grids]
    if (1, 1, 1) not in grids:
        grids.insert(0, (1, 1, 1))
    name = layer if isinstance(layer, str) else getattr(layer, "__name__", "layer")
    if isinstance(layer, str):
        load_layer(layer)  # a bad spec fails here, before any world starts
    by_size: dict[int, list[tuple[int, int, int]]] = {}
    for dims in sorted(grids, key=lambda d: d[0] * d[1] * d[2]):
        by_size.setdefault(dims[0] * dims[1] * dims[2], []).append(dims)
    records: list[dict] = []
    checks: list[LayerCheck] = []
    for size, group in by_size.items():
        ranks = run_world(size, _records, layer, group, hidden, dropout, aggregation, seed,
                          timeout=timeout, threads=threads_per_worker(size),
                          preload=[__name__])  # a world per size: torch imported once
        records += ranks[0]
        new = compare(records)[len(checks):]
        for c in new:
            if report is not None:
                report(c.line(name))
        checks += new
    return checks


def _records(layer, grids, hidden, dropout, aggregation, seed) -> list[dict]:
    """`layer_records` with positional options (run_world passes positional arguments)."""
    return layer_records(layer, grids, hidden=hidden, dropout=dropout, aggregation=aggregation,
                         seed=seed)
