"""Per-layer roles of the grid axes and the padding every cut needs.

Pure bookkeeping (no torch): the partitioner and the engine both read it, so a shard written
offline and the layer that consumes it agree on every block.

Roles follow docs/design.md: layer 0 is (outer, inner, depth) = (x, y, z).
An aggregate-first layer (Â·H)·W hands the next layer (depth, outer, inner); a combine-first
layer Â·(H·W) hands it (inner, depth, outer), i.e. the rotation advances by two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .grid import AXES, GridShape

ORDERS = ("agg", "combine")


@dataclass(frozen=True)
class LayerPlan:
    """Which axis cuts what in one layer.

    ``adj`` is 1 or 2: which permuted adjacency the layer multiplies by (Â1 = P1 Â P2ᵀ on even
    layers, Â2 = P2 Â P1ᵀ on odd ones; both are the same matrix for the ``none``/``single``
    permutations). Every matrix is described by the axis cutting its rows and its columns.
    """

    index: int
    order: str  # "agg": (Â·H)·W   "combine": Â·(H·W)
    outer: str
    inner: str
    depth: str

    @property
    def adj(self) -> int:
        return 1 if self.index % 2 == 0 else 2

    @property
    def in_rows(self) -> str:  # H rows
        return self.outer

    @property
    def in_cols(self) -> str:  # H cols
        return self.inner

    @property
    def a_rows(self) -> str:  # Â block rows
        return self.depth if self.order == "agg" else self.inner

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
        return self.inner if self.order == "agg" else self.outer

    def next_roles(self) -> tuple[str, str, str]:
        """(outer, inner, depth) of the next layer: its input is this layer's output layout."""
        return (self.out_rows, self.out_cols, self.out_replicated)


def layer_plans(num_layers: int, orders: Sequence[str] | str = "agg") -> list[LayerPlan]:
    """The roles of every layer, given each layer's product order."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    if isinstance(orders, str):
        orders = [orders] * num_layers
    if len(orders) != num_layers:
        raise ValueError(f"need one order per layer ({num_layers}), got {len(orders)}")
    plans, roles = [], ("x", "y", "z")
    for index, order in enumerate(orders):
        if order not in ORDERS:
            raise ValueError(f"unknown layer order {order!r}; use one of {ORDERS}")
        plan = LayerPlan(index, order, *roles)
        plans.append(plan)
        roles = plan.next_roles()
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
