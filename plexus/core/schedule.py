"""Every collective of one training epoch, layer by layer: the one description of the schedule.

The engine's layers issue these collectives (`plexus.engine.layer`), the performance model
prices them (`plexus.perfmodel`), and the tests compare the engine's ledger with them; all three
read this list, so the schedule is written down once. Sizes are the padded ones of
`plexus.core.layout.padding`; see docs/design.md for the layouts they come from.

With (o, i, d) a layer's (outer, inner, depth) axes, D and D' its padded input and output widths
and N the padded node count, one rank issues:

aggregate-first layer (Â·H)·W
  forward   AG(H) over d (layer 0 only)  n = N·D/(|o||i|)
            AR(AGG) over o               n = N·D/(|d||i|)
            AG(W) over d                 n = D·D'/(|i||o|)
            AR(OUT) over i               n = N·D'/(|d||o|)
  backward  AR(db) over the output rows  n = D'/|out cols|  (with bias)
            RS(dW) over d                n = D·D'/(|i||o|)
            AR(dAGG) over o              n = N·D/(|d||i|)   (not on layer 0 with fixed features)
            AR(dH) over d (layer > 0)    n = N·D/(|o||i|)   layer 0: RS over d if features learn
combine-first layer Â·(H·W)
  forward   AG(H) over d (layer 0 only)  n = N·D/(|o||i|)
            AG(W) over o                 n = D·D'/(|i||d|)
            AR(Z) over i                 n = N·D'/(|o||d|)
            AR(OUT) over o               n = N·D'/(|i||d|)
  backward  AR(db) over the output rows  n = D'/|out cols|  (with bias)
            AR(dZ) over i                n = N·D'/(|o||d|)
            RS(dW) over o                n = D·D'/(|i||d|)
            AR(dH) over d (layer > 0)    n = N·D/(|o||i|)   layer 0: RS over d if features learn
loss      AR-MAX of N/|rows| and AR-SUM of 2·N/|rows| over the class axis (the last layer's
          output columns), AR-SUM of 1 element over its rows axis
Layer 0 with fixed input features needs no dH, hence no dAGG: autograd skips both.

Further stages and terms (docs/design.md, "Models"):
dense layer H·W   forward AG(W) over o (D·D'/(|i||d|)), AR(OUT) over i (N·D'/(|o||d|));
                  backward RS(dW) over o, AR(dH) over d
root term         aggregate-first: AR(AGG) and AR(dAGG) carry [Â·H; S·H] (twice the size);
                  combine-first with Wr (SAGE, residual): AR(Z) and AR(dZ) carry [H·W | H·Wr];
                  SAGE gathers Wr like W (AG(Wr), RS(dWr)); GIN: AR(dε) of 1 element over
                  every axis
BatchNorm         forward AR(Σx), AR(Σx²) over the output rows (D'/|out cols| each, training
                  only); backward AR(dγ), AR(dβ), AR(dΣx), AR(dΣx²) over the output rows

Volumes are those of ring algorithms: an all-reduce of n elements over p ranks moves
2(p-1)/p·n elements per rank in 2(p-1) steps; an all-gather or reduce-scatter whose full size is
n moves (p-1)/p·n in p-1 steps. Collectives over an axis of size 1 are not issued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .layout import LayerPlan, Padding

OPS = ("all_reduce", "all_gather", "reduce_scatter")
PHASES = ("forward", "loss", "backward", "eval")


def ring_volume(op: str, numel: float, p: int) -> float:
    """Elements one rank sends for collective ``op`` on ``numel`` elements (full size) over p."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; use one of {', '.join(OPS)}")
    if p <= 1:
        return 0.0
    return (2.0 if op == "all_reduce" else 1.0) * (p - 1) / p * numel


def ring_steps(op: str, p: int) -> int:
    """Latency-bound steps of the ring: 2(p-1) for an all-reduce, p-1 otherwise."""
    return (2 if op == "all_reduce" else 1) * max(p - 1, 0)


@dataclass(frozen=True)
class Collective:
    """One collective as a rank issues it.

    ``size`` is the full size n in elements (the all-reduce buffer, the all-gather's output, the
    reduce-scatter's input), the number the engine's ledger records; ``elements`` is what one
    rank moves.
    """

    name: str  # e.g. "AR(AGG)"
    layer: int | None  # None for the loss and the accuracy
    phase: str  # one of PHASES
    op: str  # one of OPS
    axis: str
    group: int  # ranks on the axis
    size: int
    itemsize: int | None = None  # bytes per element; None: the run's float size

    @property
    def elements(self) -> float:
        """Elements moved per rank (ring algorithm)."""
        return ring_volume(self.op, self.size, self.group)

    @property
    def steps(self) -> int:
        """Latency-bound steps of the ring."""
        return ring_steps(self.op, self.group)


def _div(a: int, b: int) -> int:
    # Padding makes every block size exact; a remainder means the schedule and layout disagree.
    q, r = divmod(a, b)
    assert r == 0, f"{a} is not divisible by {b}: padding does not match the layout"
    return q


class _Schedule:
    """Accumulates the collectives of one epoch, leaving out those over axes of size 1."""

    def __init__(self, shape: Mapping[str, int], pad: Padding) -> None:
        self.s, self.n, self.widths = shape, pad.nodes_padded, pad.widths_padded
        self.out: list[Collective] = []

    def add(self, name: str, layer: int | None, phase: str, op: str, axis: str, size: int,
            itemsize: int | None = None) -> None:
        if self.s[axis] > 1:
            self.out.append(Collective(name, layer, phase, op, axis, self.s[axis], size,
                                       itemsize))

    def forward(self, p: LayerPlan, phase: str) -> None:
        s, n = self.s, self.n
        o, i, d = p.outer, p.inner, p.depth
        D, D2 = self.widths[p.index], self.widths[p.index + 1]
        stacked = 2 if p.root != "none" else 1  # [Â; S]·H gives AGG and R together
        wide = 2 if p.root in ("sage", "res") else 1  # H·[W | Wr]
        if p.index == 0:
            self.add("AG(H)", 0, phase, "all_gather", d, _div(n * D, s[o] * s[i]))
        if p.order == "agg":
            self.add("AR(AGG)", p.index, phase, "all_reduce", o,
                     stacked * _div(n * D, s[d] * s[i]))
            self.add("AG(W)", p.index, phase, "all_gather", d, _div(D * D2, s[i] * s[o]))
            if p.root == "sage":
                self.add("AG(Wr)", p.index, phase, "all_gather", d, _div(D * D2, s[i] * s[o]))
            self.add("AR(OUT)", p.index, phase, "all_reduce", i, _div(n * D2, s[d] * s[o]))
        elif p.order == "combine":
            self.add("AG(W)", p.index, phase, "all_gather", o, _div(D * D2, s[i] * s[d]))
            if p.root == "sage":
                self.add("AG(Wr)", p.index, phase, "all_gather", o, _div(D * D2, s[i] * s[d]))
            self.add("AR(Z)", p.index, phase, "all_reduce", i, wide * _div(n * D2, s[o] * s[d]))
            self.add("AR(OUT)", p.index, phase, "all_reduce", o, _div(n * D2, s[i] * s[d]))
        else:  # dense
            self.add("AG(W)", p.index, phase, "all_gather", o, _div(D * D2, s[i] * s[d]))
            self.add("AR(OUT)", p.index, phase, "all_reduce", i, _div(n * D2, s[o] * s[d]))
        if p.norm and phase == "forward":  # evaluation normalizes with the running statistics
            for what in ("AR(Σx)", "AR(Σx²)"):
                self.add(what, p.index, phase, "all_reduce", p.out_rows, _div(D2, s[p.out_cols]))

    def backward(self, p: LayerPlan, bias: bool, learnable_features: bool,
                 learnable_eps: bool = True) -> None:
        s, n = self.s, self.n
        o, i, d = p.outer, p.inner, p.depth
        D, D2 = self.widths[p.index], self.widths[p.index + 1]
        stacked = 2 if p.root != "none" else 1
        wide = 2 if p.root in ("sage", "res") else 1
        vector = _div(D2, s[p.out_cols])
        if p.norm:  # dγ, dβ and the two column sums' gradients
            for what in ("AR(dγ)", "AR(dβ)", "AR(dΣx)", "AR(dΣx²)"):
                self.add(what, p.index, "backward", "all_reduce", p.out_rows, vector)
        if bias and not p.norm:
            self.add("AR(db)", p.index, "backward", "all_reduce", p.out_rows, vector)
        if p.root == "gin" and learnable_eps:
            for axis in ("x", "y", "z"):
                self.add("AR(dε)", p.index, "backward", "all_reduce", axis, 1)
        dh = _div(n * D, s[o] * s[i])
        need_dh = p.index > 0 or learnable_features
        if p.order == "agg":
            for w in ("W", "Wr") if p.root == "sage" else ("W",):
                self.add(f"RS(d{w})", p.index, "backward", "reduce_scatter", d,
                         _div(D * D2, s[i] * s[o]))
            if need_dh:  # dAGG only feeds dH; autograd skips both for fixed input features
                self.add("AR(dAGG)", p.index, "backward", "all_reduce", o,
                         stacked * _div(n * D, s[d] * s[i]))
        elif p.order == "combine":
            self.add("AR(dZ)", p.index, "backward", "all_reduce", i,
                     wide * _div(n * D2, s[o] * s[d]))
            for w in ("W", "Wr") if p.root == "sage" else ("W",):
                self.add(f"RS(d{w})", p.index, "backward", "reduce_scatter", o,
                         _div(D * D2, s[i] * s[d]))
        else:
            self.add("RS(dW)", p.index, "backward", "reduce_scatter", o, _div(D * D2, s[i] * s[d]))
        if p.index > 0:
            self.add("AR(dH)", p.index, "backward", "all_reduce", d, dh)
        elif learnable_features:
            self.add("RS(dH)", 0, "backward", "reduce_scatter", d, dh)

    def loss(self, last: LayerPlan) -> None:
        rows, classes, n = last.out_rows, last.out_cols, self.n
        self.add("loss", None, "loss", "all_reduce", classes, _div(n, self.s[rows]))  # row max
        self.add("loss", None, "loss", "all_reduce", classes,
                 2 * _div(n, self.s[rows]))  # Σ exp and the label's logit
        self.add("loss", None, "loss", "all_reduce", rows, 1)  # sum of per-node losses

    def accuracy(self, last: LayerPlan) -> None:
        rows, classes, n = last.out_rows, last.out_cols, self.n
        self.add("accuracy", None, "eval", "all_reduce", classes, _div(n, self.s[rows]))  # max
        self.add("accuracy", None, "eval", "all_reduce", classes, _div(n, self.s[rows]), 8)  # id
        self.add("accuracy", None, "eval", "all_reduce", rows, 3, 8)  # hits of train/val/test


def epoch_collectives(plans: Sequence[LayerPlan], shape: Mapping[str, int], pad: Padding, *,
                      bias: bool = True, learnable_features: bool = False,
                      learnable_eps: bool = True, evaluate: bool = False) -> list[Collective]:
    """Every collective one rank issues in one training step, in program order: the forward,
    the loss, the backward (last layer first). ``evaluate`` appends the evaluation that follows
    (the forward again, the prediction's argmax over the class axis and the three masks' hit
    counts over the rows axis)."""
    sched = _Schedule(shape, pad)
    for p in plans:
        sched.forward(p, "forward")
    sched.loss(plans[-1])
    for p in reversed(plans):
        sched.backward(p, bias, learnable_features, learnable_eps)
    if evaluate:
        for p in plans:
            sched.forward(p, "eval")
        sched.accuracy(plans[-1])
    return sched.out


def volume_per_axis(collectives: Sequence[Collective], itemsize: int | None = None,
                    phases: Sequence[str] = PHASES) -> dict[str, float]:
    """Elements (or bytes, with ``itemsize``) one rank moves per axis in ``phases``."""
    out = {"x": 0.0, "y": 0.0, "z": 0.0}
    for c in collectives:
        if c.phase in phases:
            out[c.axis] += c.elements * (1 if itemsize is None else (c.itemsize or itemsize))
    return out
