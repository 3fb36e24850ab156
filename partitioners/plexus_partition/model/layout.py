"""Per-layer roles of the grid axes and the padding every cut needs.

Pure bookkeeping (no torch): the partitioner and the engine both read it, so a shard written
offline and the layer that consumes it agree on every block.

Roles follow docs/design.md: layer 0 is (outer, inner, depth) = (x, y, z).
An aggregate-first layer (Â·H)·W hands the next layer (depth, outer, inner); a combine-first
layer Â·(H·W) hands it (inner, depth, outer), i.e. the rotation advances by two; a dense layer
H·W (no aggregation: an MLP layer) keeps the rows where they are and hands it (outer, depth,
inner).

A "plan" is one stage of the model: a graph convolution or a dense layer. A GNN layer is one
stage (GCN, GraphSAGE) or two (GIN: the convolution with the MLP's first linear map, then a
dense stage with its second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .grid import AXES, GridShape

ORDERS = ("agg", "combine")  # the product orders of a graph convolution
# the node permutation every tool defaults to: results never depend on it; it balances the
# blocks of real graphs (plexus_partition.permutations)
DEFAULT_PERMUTATION = "double"
# The permutations of one node order (p1 == p2, `plexus_partition.permutations`): Â1 and Â2
# are then one matrix.
ONE_ORDER = ("none", "single")
STAGE_ORDERS = ORDERS + ("dense",)


@dataclass(frozen=True)
class LayerPlan:
    """Which axis cuts what in one stage.

    ``adj`` is 1 or 2: which permuted adjacency the stage multiplies by (Â1 = P1 Â P2ᵀ, Â2 =
    P2 Â P1ᵀ, alternating over the graph convolutions; both are the same matrix for the
    ``none``/``single`` permutations); a dense stage keeps the row order its input has, which is
    the column order of Â_adj. Every matrix is described by the axis cutting its rows and its
    columns.

    The rest is the model's, filled in by `plexus_partition.model.model.ModelConfig.plans` (a plan
    from `layer_plans` alone describes the layout only): ``op`` names the stage's operator
    (`plexus_partition.model.ops.OPERATORS`), ``layer`` the GNN layer it belongs to, ``norm`` says a
    BatchNorm follows it, ``bias`` that it adds one, ``options`` what its kind declares per stage
    (`plexus_partition.model.ops.base.ModelKind.stage_options`: a GCN stage's residual, a GIN
    stage's trained ε, a GAT stage's heads and whether they are concatenated; None: nothing).
    """

    index: int
    order: str  # "agg": (Â·H)·W   "combine": Â·(H·W)   "dense": H·W
    outer: str
    inner: str
    depth: str
    adj: int = 1
    layer: int = 0
    op: str = ""
    norm: bool = False
    bias: bool = True
    options: Any = None  # the kind's per-stage options: a frozen dataclass (hashable)

    @property
    def dense(self) -> bool:
        return self.order == "dense"

    @property
    def in_rows(self) -> str:  # H rows
        return self.outer

    @property
    def in_cols(self) -> str:  # H cols
        return self.inner

    @property
    def a_rows(self) -> str:  # Â block rows (a dense stage's output rows)
        return {"agg": self.depth, "combine": self.inner, "dense": self.outer}[self.order]

    @property
    def a_cols(self) -> str:  # Â block cols
        return self.outer

    @property
    def w_cols(self) -> str:  # W cols (W rows are always cut by inner)
        return self.outer if self.order == "agg" else self.depth

    @property
    def w_flat(self) -> str:  # axis W's block is additionally split over, gathered before use
        return self.depth if self.order == "agg" else self.outer

    @property
    def out_rows(self) -> str:
        return self.a_rows

    @property
    def out_cols(self) -> str:
        return self.w_cols

    @property
    def out_replicated(self) -> str:
        return self.inner if self.order in ("agg", "dense") else self.outer

    def next_roles(self) -> tuple[str, str, str]:
        """(outer, inner, depth) of the next stage: its input is this stage's output layout."""
        return (self.out_rows, self.out_cols, self.out_replicated)


def layer_plans(num_stages: int, orders: Sequence[str] | str = "agg") -> list[LayerPlan]:
    """The roles of every stage, given each stage's order ("agg", "combine" or "dense"): the
    layout alone (a model's plans, with their operators, come from
    `plexus_partition.model.model.ModelConfig.plans`)."""
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if isinstance(orders, str):
        orders = [orders] * num_stages
    if len(orders) != num_stages:
        raise ValueError(f"need one order per layer ({num_stages}), got {len(orders)}")
    plans, roles, adj = [], ("x", "y", "z"), 1
    for index, order in enumerate(orders):
        if order not in STAGE_ORDERS:
            raise ValueError(f"unknown layer order {order!r}; use one of {STAGE_ORDERS}")
        plan = LayerPlan(index, order, *roles, adj=adj, layer=index,
                         op="dense" if order == "dense" else "gcn")
        plans.append(plan)
        roles = plan.next_roles()
        if not plan.dense:
            adj = 3 - adj
    return plans


def grid_misfit(shape: Mapping[str, int], plans: Sequence[LayerPlan], num_nodes: int,
                widths: Sequence[int | None]) -> str | None:
    """Why the grid does not fit the problem, or None: an axis with more ranks than the
    dimension it cuts would give its extra ranks nothing but padding. ``widths`` are D_0 .. D_L
    (None where unknown, e.g. the hidden width to a partitioner)."""
    cuts = [(axis, num_nodes, "nodes") for axis in AXES]
    for plan in plans:  # each width is cut by its layer's inner axis (= the last one's out cols)
        what = "input features" if plan.index == 0 else f"hidden features of layer {plan.index}"
        cuts.append((plan.in_cols, widths[plan.index], what))
    cuts.append((plans[-1].out_cols, widths[-1], "classes"))
    for axis, size, what in cuts:
        if size is not None and shape[axis] > size:
            return (f"grid {GridShape.of(shape)}: axis {axis} has {shape[axis]} ranks but cuts "
                    f"the {size} {what}; use a grid whose {axis} is at most {size}")
    return None


def pad_to(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= n."""
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class Padding:
    """Real and padded sizes of the graph and of every layer width (D_0 .. D_L = classes)."""

    num_nodes: int
    nodes_padded: int
    widths: tuple[int, ...]
    widths_padded: tuple[int, ...]


def padding(shape: Mapping[str, int], plans: Sequence[LayerPlan], num_nodes: int,
            widths: Sequence[int]) -> Padding:
    """Pad N and each width so every cut of every layer divides it evenly.

    N is cut by every axis, and layer 0's H block again by depth: a multiple of X·Y·Z suffices.
    Width l is cut by the inner axis of layer l and split again over W's flat axis, and by the
    output-column axis of layer l-1 (the same axis as layer l's inner, by the rotation).
    """
    if len(widths) != len(plans) + 1:
        raise ValueError("widths must hold the input width, each hidden width and the class count")
    world = shape["x"] * shape["y"] * shape["z"]
    padded = []
    for l, width in enumerate(widths):
        multiple = 1
        if l < len(plans):
            multiple = math.lcm(multiple, shape[plans[l].in_cols] * shape[plans[l].w_flat])
        if l > 0:
            multiple = math.lcm(multiple, shape[plans[l - 1].out_cols])
        padded.append(pad_to(width, multiple))
    return Padding(num_nodes, pad_to(num_nodes, world), tuple(widths), tuple(padded))


def block(n: int, parts: int, index: int) -> slice:
    """The ``index``-th of ``parts`` equal contiguous blocks of range(n) (n divisible by parts)."""
    size = n // parts
    return slice(index * size, (index + 1) * size)


def block_identity(plan: LayerPlan, nodes_padded: int, shape: Mapping[str, int],
                   coords: Mapping[str, int], perm: str) -> tuple[int, int, int, int, int]:
    """Which block of Â a stage of the rank at ``coords`` multiplies by, as (matrix, first row,
    end row, first column, end column): blocks of one identity are equal whatever the axes that
    cut them (every block of a matrix at 1x1x1; ranks on the grid's diagonal). Â1 and Â2 are one
    matrix where ``perm`` has one order (`ONE_ORDER`). The engine keeps one block per identity
    (`plexus.engine.blocks`) and the performance model prices them so."""
    rows, cols = (block(nodes_padded, shape[a], coords[a]) for a in (plan.a_rows, plan.a_cols))
    return (1 if perm in ONE_ORDER else plan.adj, rows.start, rows.stop, cols.start, cols.stop)


def transpose_identity(ident: tuple[int, int, int, int, int], perm: str
                       ) -> tuple[int, int, int, int, int]:
    """The identity (`block_identity`) of the block that is ``ident``'s transpose when Â = Âᵀ:
    the other matrix (Â1ᵀ = Â2, as Â2 = P2 Â P1ᵀ), the ranges swapped."""
    k, r0, r1, c0, c1 = ident
    return (k if perm in ONE_ORDER else 3 - k, c0, c1, r0, r1)
