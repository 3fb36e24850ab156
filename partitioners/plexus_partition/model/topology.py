"""Where a grid's ranks sit on nodes, and how a collective over one axis is cut into a node's
part and the network's: the one rule the engine builds its groups by, counts its ledger by, and
the performance model prices (no torch).

Ranks are placed node by node, ``gpus_per_node`` (K) to a node: rank r sits on node r // K
(under torchrun or srun, K is the launcher's LOCAL_WORLD_SIZE; on a CPU world a virtual
placement; None: one node holds every rank). A grid numbers ranks (x·Y + y)·Z + z, so the p ranks
of one collective along an axis of stride s (z: 1, y: Z, x: Y·Z) are b, b + s, ..., b + (p−1)·s
(b: the group's rank at coordinate 0). As r // K grows with the position j along the axis, the
ranks a group has on one node are consecutive positions. A group's link class is "intra" when
all its ranks sit on one node, else "inter"; an axis's is "inter" when any of its groups crosses
nodes (a ring runs at its slowest link's pace), which happens exactly when the job spans nodes,
p > 1 and s·p does not divide K.

An axis is *split* (`AxisSpan.split`) when every one of its groups has k > 1 ranks on each of
m > 1 nodes (p = k·m): exactly when s divides K and K divides s·p, with k = K/s (s < K). Position
j = i·k + l is then rank l of node i. Its collectives may run *hierarchically*, each part a
collective of a sub-group (`parts`):

- all-reduce of M elements (M' = k·⌈M/k⌉, M padded with at most k − 1 zeros): reduce-scatter
  of M' within the node (k ranks, "intra"), all-reduce of its M'/k across the nodes among the m
  ranks with the same l ("inter"), all-gather of M' within the node ("intra");
- all-gather of full size M (each rank holds M/p): all-gather of M/k across the nodes ("inter")
  then of M within the node ("intra"), the blocks put back in the flat order (position j);
- reduce-scatter of full size M: within the node on M, the blocks ordered so that rank l keeps
  those of positions l, k + l, ... ("intra"), then across the nodes on M/k ("inter").

Each part moves its ring volume (`plexus_partition.model.schedule.ring_volume`) on its link
class; a flat collective moves its whole ring volume on its group's class. For M a multiple of
k the hierarchical total equals the flat one (2(k−1)/k + 2(m−1)/(m·k) = 2(p−1)/p): only the
share on the network changes, 1/k of the flat collective's per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping, NamedTuple

from .bounds import check_bound
from .grid import AXES
from .schedule import ring_steps, ring_volume

#: The link classes a collective's bytes are counted in.
LINKS = ("intra", "inter")
#: `EngineConfig.collectives`' values: "flat" rings over the axis's group, "hierarchical" where
#: the axis is split (`AxisSpan.split`), "auto" as `choose_form` decides.
COLLECTIVES = ("auto", "flat", "hierarchical")
#: The collectives that have a hierarchical form (all-reduces, their maxima and minima too, and
#: gathers and reduce-scatters; an all-to-all stays flat).
HIERARCHICAL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


class Part(NamedTuple):
    """One sub-collective of a collective: its link class, operation, full size (elements, as
    `ring_volume` takes it) and ranks."""

    link: str
    op: str
    numel: float
    p: int


@dataclass(frozen=True)
class AxisSpan:
    """How the groups of one axis sit on nodes: ``size`` ranks a group, ``per_node`` (k) of
    them on each of ``nodes`` (m) nodes where every group has the same k on every node (else
    both are 0), and ``link``, the axis's link class."""

    size: int
    per_node: int
    nodes: int
    link: str

    @property
    def split(self) -> bool:
        """Every group has k > 1 ranks on each of m > 1 nodes: a hierarchical form exists."""
        return self.per_node > 1 and self.nodes > 1


def check_gpus_per_node(value: object) -> int | None:
    """``value`` (None: one node) as ranks per node, a whole number within
    `plexus_partition.model.bounds.BOUNDS`; `BoundError` otherwise."""
    return check_bound("gpus_per_node", value)


def _stride(shape: Mapping[str, int], axis: str) -> int:
    return {"z": 1, "y": shape["z"], "x": shape["y"] * shape["z"]}[axis]


def node_block(shape: Mapping[str, int], gpus_per_node: int,
               node: tuple[int, int, int] | None = None) -> tuple[int, int, int] | None:
    """(x, y, z): how many ranks of each axis one node holds on grid ``shape``, a block of the
    grid. ``node`` where it tiles the grid (each entry divides its axis, their product
    ``gpus_per_node``); None: the launcher's numbering, node by node with z fastest (as much
    of z as fits, then of y, then of x). None where neither tiles the grid (an irregular
    split, e.g. z = 6 on nodes of 4)."""
    if node is not None:
        fits = math.prod(node) == gpus_per_node and all(
            k >= 1 and shape[a] % k == 0 for a, k in zip(AXES, node))
        return tuple(node) if fits else None  # type: ignore[return-value]
    left, out = gpus_per_node, {}
    for axis in ("z", "y", "x"):
        p = shape[axis]
        if left % p == 0:
            out[axis], left = p, left // p
        elif p % left == 0:
            out[axis], left = left, 1
        else:
            return None
    return (out["x"], out["y"], out["z"]) if left == 1 else None


def placed_ranks(shape: Mapping[str, int], gpus_per_node: int | None,
                 node: tuple[int, int, int] | None = None) -> tuple[int, ...]:
    """The process rank at each grid rank (index: the grid's rank (x·Y + y)·Z + z) when process
    rank r sits on node r // K (K = ``gpus_per_node``) and each node holds the block ``node``
    of the grid (x, y, z ranks): node n takes the n-th block in the grid's order of blocks (z
    fastest) and its local rank l the l-th position inside it (z fastest). ``node`` None, one
    node, or the launcher's own block: the identity (a node holds consecutive grid ranks).
    Raises ValueError where ``node`` does not tile the grid."""
    world = shape["x"] * shape["y"] * shape["z"]
    if node is None or gpus_per_node is None or world <= gpus_per_node:
        return tuple(range(world))
    block = node_block(shape, gpus_per_node, node)
    if block is None:
        raise ValueError(f"a node's block {'x'.join(map(str, node))} does not tile the grid "
                         f"{shape['x']}x{shape['y']}x{shape['z']} on nodes of {gpus_per_node}")
    bx, by, bz = block
    nodes_y, nodes_z = shape["y"] // by, shape["z"] // bz
    out = [0] * world
    for proc in range(world):
        n, l = divmod(proc, gpus_per_node)
        nx, rest = divmod(n, nodes_y * nodes_z)
        ny, nz = divmod(rest, nodes_z)
        lx, rest = divmod(l, by * bz)
        ly, lz = divmod(rest, bz)
        x, y, z = nx * bx + lx, ny * by + ly, nz * bz + lz
        out[(x * shape["y"] + y) * shape["z"] + z] = proc
    return tuple(out)


def node_text(gpus_per_node: int | None, node: tuple[int, int, int] | None) -> str:
    """A placement in words: "one node", "nodes of K (the launcher's numbering)" or "nodes of
    K, each a XxYxZ block of the grid"."""
    if gpus_per_node is None:
        return "one node"
    if node is None:
        return f"nodes of {gpus_per_node} (the launcher's numbering)"
    return f"nodes of {gpus_per_node}, each a {'x'.join(map(str, node))} block of the grid"


def axis_span(shape: Mapping[str, int], axis: str, gpus_per_node: int | None,
              node: tuple[int, int, int] | None = None) -> AxisSpan:
    """The `AxisSpan` of ``axis`` on grid ``shape`` ({"x": X, "y": Y, "z": Z}) with
    ``gpus_per_node`` ranks per node (None: one node), each node holding the block ``node``
    of the grid (`node_block`; None: the launcher's numbering)."""
    p, s = shape[axis], _stride(shape, axis)
    world = shape["x"] * shape["y"] * shape["z"]
    k = gpus_per_node
    if p == 1 or k is None or world <= k:
        return AxisSpan(p, p, 1, "intra")
    if node is not None:  # a chosen block: its share of the axis on each node
        block = node_block(shape, k, node)
        if block is None:
            return AxisSpan(p, 0, 0, "inter")
        here = block[AXES.index(axis)]
        return AxisSpan(p, p, 1, "intra") if here == p else AxisSpan(p, here, p // here, "inter")
    if k % (s * p) == 0:
        return AxisSpan(p, p, 1, "intra")
    if s >= k:  # consecutive positions a node or more apart: one rank per node
        return AxisSpan(p, 1, p, "inter")
    if k % s == 0 and (s * p) % k == 0:
        return AxisSpan(p, k // s, p * s // k, "inter")
    return AxisSpan(p, 0, 0, "inter")  # groups differ in how they sit: no split


def ring_class(span: AxisSpan) -> str:
    """The link class a flat ring over an axis of ``span`` is priced with: "intra" inside a
    node; across nodes "strided4" / "strided" with 4+ / 2-3 of the group's ranks on each node
    (the ring crosses each node boundary on that many NICs at once), "inter" with one (each
    rank on its own NIC; an irregular split is read so, the slowest)."""
    if span.nodes == 1 and span.link == "intra":
        return "intra"
    k = span.per_node
    return "strided4" if k >= 4 else "strided" if k >= 2 else "inter"


def axis_links(shape: Mapping[str, int], gpus_per_node: int | None) -> dict[str, str]:
    """{axis: "intra" or "inter"}: the link class of each axis's collectives (an axis of size
    1 moves nothing: "intra")."""
    return {axis: axis_span(shape, axis, gpus_per_node).link for axis in AXES}


def group_ranks(shape: Mapping[str, int], axis: str, rank: int) -> list[int]:
    """The ranks of ``rank``'s group along ``axis``, in coordinate order."""
    p, s = shape[axis], _stride(shape, axis)
    base = rank - ((rank // s) % p) * s
    return [base + j * s for j in range(p)]


def axis_groups(shape: Mapping[str, int], axis: str) -> Iterator[list[int]]:
    """Every group of ``axis``, each in coordinate order, by its first rank."""
    p, s = shape[axis], _stride(shape, axis)
    world = shape["x"] * shape["y"] * shape["z"]
    for outer in range(0, world, s * p):
        for inner in range(s):
            yield [outer + inner + j * s for j in range(p)]


def group_link(ranks: list[int], gpus_per_node: int | None) -> str:
    """"intra" when ``ranks`` all sit on one node, else "inter"."""
    if gpus_per_node is None:
        return "intra"
    return "intra" if len({r // gpus_per_node for r in ranks}) == 1 else "inter"


def subgroups(shape: Mapping[str, int], axis: str, per_node: int
              ) -> tuple[list[list[int]], list[list[int]]]:
    """The sub-groups a split axis's hierarchical collectives run on, for every group of the
    world in one fixed order (every rank creates them alike): (the node parts, each the k
    ranks of one group on one node; the network parts, each the m ranks of one group that
    share a local index l)."""
    intra, inter = [], []
    for ranks in axis_groups(shape, axis):
        intra += [ranks[i:i + per_node] for i in range(0, len(ranks), per_node)]
        inter += [ranks[l::per_node] for l in range(per_node)]
    return intra, inter


def choose_form(collectives: str, span: AxisSpan, op: str, numel: float = 0.0,
                itemsize: float = 4.0, rates: Mapping[str, tuple[float, float]] | None = None,
                flat_link: str | None = None) -> str:
    """"hierarchical" or "flat": the form collective ``op`` of full size ``numel`` over an
    axis of ``span`` runs in under the mode ``collectives`` (one of `COLLECTIVES`). "flat"
    never splits; "hierarchical" splits every sum and gather of a split axis. "auto" does too
    where no link rates are known (a virtual placement: the network then carries 1/k of the
    flat bytes for the same total); with ``rates`` ({link class: (α, β)}, the flat form on
    ``flat_link``, default the axis's) it picks the form the α-β ring prices faster
    (`form_seconds`; ties: flat). Anything else stays flat."""
    if collectives not in COLLECTIVES:
        raise ValueError(f"unknown collectives {collectives!r}; use one of "
                         f"{', '.join(COLLECTIVES)}")
    if collectives == "flat" or not span.split or op not in HIERARCHICAL_OPS:
        return "flat"
    if collectives == "auto" and rates is not None:
        flat = form_seconds(parts(op, "flat", numel, span, flat_link), itemsize, rates)
        two = form_seconds(parts(op, "hierarchical", numel, span), itemsize, rates)
        return "hierarchical" if two < flat else "flat"
    return "hierarchical"


def form_seconds(pieces: tuple[Part, ...], itemsize: float,
                 rates: Mapping[str, tuple[float, float]]) -> float:
    """The α-β time of ``pieces`` (`parts`): each part's ring steps × α plus the bytes one rank
    sends × β of its link class in ``rates``."""
    total = 0.0
    for part in pieces:
        alpha, beta = rates[part.link]
        total += (ring_steps(part.op, part.p) * alpha
            + ring_volume(part.op, part.numel, part.p) * itemsize * beta)
    return total


def parts(op: str, form: str, numel: float, span: AxisSpan, link: str | None = None
          ) -> tuple[Part, ...]:
    """The sub-collectives collective ``op`` of full size ``numel`` over an axis of ``span``
    runs as in ``form``: flat, itself on ``link`` (default the axis's class); hierarchical, as
    the module's docstring says."""
    p = span.size
    if form == "flat" or p == 1:
        return (Part(link or span.link, op, numel, p),)
    if form != "hierarchical" or not span.split or op not in HIERARCHICAL_OPS:
        raise ValueError(f"no hierarchical {op} over an axis of {span}")
    k, m = span.per_node, span.nodes
    if op == "all_reduce":
        padded = k * -(-int(numel) // k)
        return (Part("intra", "reduce_scatter", padded, k),
                Part("inter", "all_reduce", padded // k, m),
                Part("intra", "all_gather", padded, k))
    if op == "all_gather":
        return (Part("inter", "all_gather", numel / k, m), Part("intra", "all_gather", numel, k))
    return (Part("intra", "reduce_scatter", numel, k), Part("inter", "reduce_scatter", numel / k, m))


def link_volume(pieces: tuple[Part, ...], itemsize: float = 1.0) -> dict[str, float]:
    """{"intra": ..., "inter": ...}: what one rank sends on each link class for ``pieces``
    (`parts`), in elements times ``itemsize`` (bytes with the payload's bytes per element)."""
    out = dict.fromkeys(LINKS, 0.0)
    for part in pieces:
        out[part.link] += ring_volume(part.op, part.numel, part.p) * itemsize
    return out
