"""Users' layers on the 3D engine: `Layer`, `BatchNorm` and `Network` (see `plexus.nn`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from plexus_partition.model.layout import DEFAULT_PERMUTATION, grid_misfit, layer_plans
from plexus_partition.model.ops import ACTIVATIONS, NORM_OP, OPERATORS, Param
from plexus_datasets import Graph
from plexus_datasets.graph import incoming
from plexus.engine.blocks import GraphBlocks
from plexus.engine.comm import Comm
from plexus.engine.config import EngineConfig
from plexus.engine.gemm import GemmTuner
from plexus.engine.graph3d import StageGraph
from plexus.engine.grid import Grid
from plexus.engine.model import GridModel
from plexus.engine.stage import Stage3D
from plexus.engine.stagespec import StageContext, StageSpec
from plexus_partition.model.model import check_seed, input_dropout_rate
from plexus.engine.masks import dropout, edge_keep
from plexus_partition import shard_graph

from .graph import LayerGraph, output_layout
from .validate import check_declared, check_network, check_width
from .layouts import NODES_OUT, ROWS_OUT, LayoutError, laid, layout_of, param_view, plain

_SHAPES = {"weight": lambda i, o: (i, o), "vector": lambda i, o: (o,), "scalar": lambda i, o: (1,)}


class Layer(nn.Module):
    """A layer of your own: declare its parameters in ``__init__`` with `weight`, `vector` and
    `scalar` (full shapes; each rank gets its shard when a `Network` builds the layer, where
    ``self.<name>`` is that shard), and write ``forward(g, x, step)`` with the operations of
    ``g`` (a `plexus.nn.LayerGraph`). ``order`` says which layouts the layer goes through:
    "combine" (``g.linear`` on the input, then ``g.aggregate``/``g.aggregate_weighted`` into
    Â's rows: the output), "agg" (``g.aggregate``/``g.to_rows`` of the input, then
    ``g.linear``: the output; PyG's aggregate-then-transform layers) or "dense" (``g.linear``
    only). ``x`` arrives as ``nodes×in`` (`plexus.nn.layouts`); every tensor derived from it
    carries its layout, elementwise operations take operands of one layout, and an operation
    or output that does not fit ``order`` raises a one-line `plexus.nn.LayoutError` saying
    which order the layer's steps need.
    """

    order = "combine"
    #: what follows the layer in a `Network` (not after the last layer): "relu", "elu",
    #: "leaky_relu", "gelu", "tanh" (each as torch's and PyG's module of the name) or None
    #: ("none")
    activation: str | None = "relu"
    #: the rate of the dropout on this layer's input; None: the `Network`'s
    input_dropout: float | None = None

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features = check_width(self, in_features, "in_features")
        self.out_features = check_width(self, out_features, "out_features")
        self.declared: list[tuple[str, str, str]] = []  # (name, layout, init)
        self.reads: set[int] = set()  # earlier layers whose outputs forward reads (g.output)
        self._plexus_kinds: dict[str, str] | None = None  # set while a Network runs forward

    def weight(self, name: str, init: str = "glorot") -> None:
        """Declare an in_features × out_features weight, cut like the engine's W
        (Glorot-uniform, "zeros", "ones" or "identity": the identity matrix, a layer that
        starts as a skip); use it with ``g.linear(x, self.<name>)``."""
        check_declared(self, name, "weight")
        self.declared.append((name, "weight", init))

    def vector(self, name: str, init: str = "zeros") -> None:
        """Declare a vector of out_features entries, cut like the output's columns (a bias:
        ``g.add_bias(out, self.<name>)``; per-column weights such as attention vectors)."""
        check_declared(self, name, "vector")
        self.declared.append((name, "vector", init))

    def scalar(self, name: str, init: str = "zeros") -> None:
        """Declare one number, replicated on every rank: use it as ``g.replicate(self.<name>)``
        (its gradient then sums every rank's part; used directly on a layer's tensor it is a
        `LayoutError`, 1x1x1 included)."""
        check_declared(self, name, "scalar")
        self.declared.append((name, "scalar", init))

    def reads_output(self, layer: int) -> None:
        """Declare that ``forward`` reads layer ``layer``'s output (after its activation: the
        next layer's input, before dropout; e.g. GCNII's H⁰) with ``g.output(layer)``; the
        `Network` carries it to this layer's input layout."""
        self.reads.add(layer)

    def __getattr__(self, name: str):
        value = super().__getattr__(name)
        kinds = self.__dict__.get("_plexus_kinds")
        if kinds is not None and name in kinds:  # inside forward: the shard with its layout
            return param_view(value, kinds[name], name)
        return value

    def forward(self, g: StageGraph, x: torch.Tensor, step: int) -> torch.Tensor:  # noqa: D102
        raise NotImplementedError


class BatchNorm(nn.Module):
    """BatchNorm1d over all nodes for a layer's output (statistics all-reduced over the output's
    row axis, float32): create it in your layer's ``__init__`` with the output width, call
    ``self.bn(out)`` in ``forward``."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.num_features = check_width(self, num_features, "num_features")
        self.norm: Stage3D | None = None  # the engine's BatchNorm stage, bound by the Network

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self.norm is None:
            raise RuntimeError("BatchNorm is built by plexus.nn.Network: use it inside a Layer")
        if layout_of(x) != ROWS_OUT and layout_of(x) != NODES_OUT:
            raise LayoutError(f"BatchNorm: x is {layout_of(x) or 'a tensor without layout'}; "
                              "normalize the layer's output (Â-rows×out, or nodes×out in a "
                              "dense layer)")
        return laid(self.norm(plain(x)), layout_of(x))


class Network(GridModel):
    """A stack of `Layer`s on ``grid`` for ``graph`` (call it on every rank): each layer's
    activation after it (ReLU unless it says another), dropout ``dropout`` on every layer's
    input (``input_dropout``: the first's too),
    Â normalized by ``aggregation`` ("gcn", "mean" or "sum"; `plexus_datasets.normalize`).
    ``seed`` fixes the initial parameters (drawn at full size, layer by layer, in declaration
    order, by the engine's one rule `plexus.engine.seeding.initial_values`: `full_parameters`
    gives them, the same on every grid) and the dropout masks. It is built by the engine's
    model builder (`plexus.engine.model.GridModel`), as the engine's own model is.

    ``net(step)`` returns this rank's logits block, ``loss``/``accuracy`` are over the whole
    graph (the same on every rank); it is a `plexus.engine.trainer.Trainer`'s model too. It
    runs the engine's one forward loop (`plexus.engine.model.GridModel.forward`): its layers
    are that loop's stages (`_compute`, `_keep`), with ``engine.recompute``'s segments too.
    """

    def __init__(self, graph: Graph, grid: Grid, layers: Sequence[Layer], *, seed: int = 0,
                 dropout: float = 0.0, input_dropout: bool = True, aggregation: str = "gcn",
                 perm: str = DEFAULT_PERMUTATION, engine: EngineConfig | None = None) -> None:
        super().__init__()
        engine = engine or EngineConfig()
        check_seed(seed)
        if (isinstance(dropout, bool) or not isinstance(dropout, (int, float))
                or not 0.0 <= dropout < 1.0):  # 1.0 would scale the kept (none) by 1 / 0
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r:.60}")
        check_network(graph, grid, layers, Layer)
        self.layers = nn.ModuleList(layers)
        widths = [graph.num_features] + [layer.out_features for layer in layers]
        for l, layer in enumerate(layers):
            if layer.in_features != widths[l]:
                raise ValueError(f"layer {l} takes {layer.in_features} features but gets "
                                 f"{widths[l]}")
        if widths[-1] != graph.num_classes:
            raise ValueError(f"the last layer gives {widths[-1]} outputs, the graph has "
                             f"{graph.num_classes} classes")
        for l, layer in enumerate(layers):
            _check_layer_options(l, layer)
        # each earlier output a layer reads -> the last layer reading it (carried until then)
        self.carry_until = {k: max(l for l, layer in enumerate(layers) if k in layer.reads)
                            for layer in layers for k in layer.reads}
        shape, coords, device = grid.shape, grid.coords, grid.device
        plans = layer_plans(len(layers), [layer.order for layer in layers])
        problem = grid_misfit(shape, plans, graph.num_nodes, widths)
        if problem:
            raise ValueError(problem)
        shard = shard_graph(graph, shape, coords, len(layers), [p.order for p in plans],
                            perm, seed=seed, aggregation=aggregation)
        self._start(Comm(grid), shard, plans, widths, seed, engine)
        # none after the last; "none" is None
        self.activations = [None if layer.activation in (None, "none") else layer.activation
                            for layer in layers]
        blocks = GraphBlocks(shard, [], shape, coords, device, self.dtype, engine)
        ids = [torch.from_numpy(i).to(device) for i in shard.input_ids]
        wp, tuner = self.pad.widths_padded, GemmTuner()
        def weights(ids: np.ndarray) -> sp.csr_matrix:  # only if a layer asks for them
            return incoming(graph.adj[ids][:, ids], graph.directed, graph.weighted)

        # each layer's input dropout as a built-in stage's: its rate in its stage toolkit
        # users' layers read no kind's options and no engine settings: none in their context
        ctx = StageContext(self.comm, blocks, seed, self.dtype, tuner, num_nodes=self.num_nodes)
        self.graphs = [LayerGraph(StageGraph(ctx, StageSpec(p, ids[p.index], wp[p.index],
                                                            wp[p.index + 1],
                                                            rate=_rate(layer, p.index, dropout,
                                                                       input_dropout))),
                                  _describe(p.index, layer), weights)
                       for p, layer in zip(self.plans, layers)]
        decls = []  # every layer's declarations, then its BatchNorms', in layer order
        for p, layer in zip(self.plans, layers):
            d_in, d_out = widths[p.index], widths[p.index + 1]
            decls += [(f"{p.index}.{name}", p, Param(name, _SHAPES[layout](d_in, d_out), layout,
                                                     init, stream=0))
                      for name, layout, init in layer.declared]
            for bn in _batchnorms(layer):
                if bn.num_features != d_out:
                    raise ValueError(f"layer {p.index}'s BatchNorm has {bn.num_features} "
                                     f"features, the layer gives {d_out}")
                decls += [(f"{p.index}.bn.{x.kind}", p, x)
                          for x in OPERATORS[NORM_OP].params(p, d_out, d_out)]
        shards = self._initial_shards(decls)
        for p, layer in zip(self.plans, layers):
            for name, _, _ in layer.declared:
                layer.register_parameter(name, nn.Parameter(shards[f"{p.index}.{name}"]))
                self._hold(f"{p.index}.{name}", layer, name)
            for bn in _batchnorms(layer):
                bn.norm = self._norm_stage(p, ctx, f"{p.index}.bn.{{}}".format, shards)
        self.register_buffer("features", torch.from_numpy(shard.features).to(device,
                                                                              self.dtype),
                             persistent=False)
        self.node_ids = torch.from_numpy(shard.output_ids).to(device)

    def parameter_layer(self, name: str) -> int | None:
        return int(name.split(".")[0])

    # ---- its stages in the one forward loop (`plexus.engine.model.GridModel.forward`) --------
    def _compute(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor],
                 step: int | None) -> torch.Tensor:
        """Layer ``s`` on its dropped input, with the earlier outputs it reads (``kept``)
        moved to its input's layout; its output's layout checked."""
        g, layer = self.graphs[s], self.layers[s]
        g.stage.training = self.training
        g.outputs = {k: g.receive(c) for k, c in kept.items()}
        x = g.dropout(g.receive(H), g.stage.stage_rate(), step)
        object.__setattr__(layer, "_plexus_kinds",
                           {name: kind for name, kind, _ in layer.declared})
        try:
            H = layer(g, x, step)
        except LayoutError as e:  # a torch operation's check does not know the layer
            if str(e).startswith(g.name):
                raise
            raise LayoutError(f"{g.name}: {e}") from None
        finally:
            object.__setattr__(layer, "_plexus_kinds", None)
        want = output_layout(layer.order)
        if layout_of(H) != want:
            raise LayoutError(_wrong_output(g.name, layer.order, layout_of(H), want))
        return plain(H)

    def _keep(self, s: int, H: torch.Tensor, kept: dict[int, torch.Tensor]
              ) -> dict[int, torch.Tensor]:
        """The earlier outputs later layers read, carried to the next layer's input layout,
        and layer ``s``'s own (``H``, after its activation) if a later layer reads it."""
        g = self.graphs[s]
        kept = {k: plain(g.carry(c)) for k, c in g.outputs.items() if self.carry_until[k] > s}
        if self.carry_until.get(s, -1) > s:
            kept[s] = H
        return kept


def _rate(layer: Layer, index: int, dropout: float, input_dropout: bool) -> float:
    """The rate of layer ``index``'s input dropout: its own, or the network's."""
    if layer.input_dropout is not None:
        return layer.input_dropout
    return input_dropout_rate(dropout, input_dropout, index)


def _check_layer_options(l: int, layer: Layer) -> None:
    """A layer's activation, input dropout and read outputs, each refused in one line."""
    name = type(layer).__name__
    if layer.activation is not None and layer.activation not in ACTIVATIONS:
        raise ValueError(f"layer {l} ({name}): activation {layer.activation!r:.60}; use one of "
                         f"{', '.join(ACTIVATIONS)} or None (apply others inside forward)")
    rate = layer.input_dropout
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not 0.0 <= rate < 1.0):
        raise ValueError(f"layer {l} ({name}): input_dropout must be in [0, 1) or None, got "
                         f"{rate!r:.60}")
    late = sorted(k for k in layer.reads if not 0 <= k < l)
    if late:
        which = f"layers 0 to {l - 1}" if l else "none: the first layer has no earlier one"
        raise ValueError(f"layer {l} ({name}) reads the output of layer {late[0]}: it may read "
                         f"earlier layers' outputs only ({which})")


def _batchnorms(layer: Layer) -> list[BatchNorm]:
    return [m for m in layer.modules() if isinstance(m, BatchNorm)]


def _describe(index: int, layer: Layer) -> str:
    return f"layer {index} ({type(layer).__name__}, order=\"{layer.order}\")"


def _wrong_output(name: str, order: str, got: str | None, want: str) -> str:
    """Why a layer's output is not the layout its order hands on, and the fix."""
    if got is None:
        return (f"{name} returned a tensor without layout; return the result of g's operations "
                f"({want})")
    if order == "combine" and got == "nodes×out":
        fix = ("aggregate g.linear's output with g.aggregate (or g.aggregate_weighted); a layer "
               'without aggregation declares order = "dense"')
    elif order == "dense":
        fix = 'a layer that aggregates declares order = "agg" or "combine"'
    elif got.endswith("×in"):
        fix = "end with g.linear(..., self.<weight>)"
    else:
        fix = "move it to Â's rows with g.to_rows / g.aggregate"
    return f"{name} returned {got} but an order=\"{order}\" layer returns {want}: {fix}"


def serial_dropout(x: torch.Tensor, p: float, seed: int, step: int, layer: int) -> torch.Tensor:
    """The dropout a `Network` applies to layer ``layer``'s input, on the whole matrix (rows:
    the original node order), for a serial version of a network."""
    return dropout(x, seed, step, layer, torch.arange(x.shape[0]), 0, p)


def serial_edge_dropout(alpha: torch.Tensor, p: float, seed: int, step: int, layer: int,
                        dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """The attention dropout of ``StageGraph.aggregate_weighted(..., dropout=p)`` on per-edge
    coefficients ``alpha`` (edges × heads) of edges src -> dst (original ids)."""
    if p <= 0:
        return alpha
    return alpha * edge_keep(seed, step, layer, alpha.shape[1], dst, src, p) / (1 - p)
