"""``plexus-model --explain``: the account of one epoch collective by collective (layer,
forward/backward, collective, axis and link, elements, bytes per rank, predicted time and its
share of the epoch), priced exactly as `plexus.perfmodel.model.estimate` prices the grid."""

from __future__ import annotations

from dataclasses import dataclass

from plexus.core.units import format_bytes, format_seconds

from .calibration import Calibration
from .model import Prediction, pieces, priced_time
from .spec import ModelSpec, normalize_grid


@dataclass(frozen=True)
class Line:
    """One collective of the epoch as one rank issues it."""

    layer: int | None
    phase: str
    name: str
    op: str
    axis: str
    link: str
    size: int  # full size in elements (an all-to-all: what this rank sends)
    calls: int  # the engine's calls (an aggregation cut into pieces: one per piece)
    bytes: float  # moved by this rank
    seconds: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def account(spec: ModelSpec, pred: Prediction, calibration: Calibration,
            ranks_per_host: int | None = None) -> list[Line]:
    """Every collective of ``pred``'s epoch with what it moves and costs; their times add up
    to ``pred.comm_s``."""
    shape = normalize_grid(pred.grid)
    spmm_rate, _, _ = calibration.rates(spec.dtype_bytes)
    rate = spmm_rate * calibration.core_share(ranks_per_host)
    out = []
    for c in pred.volume.collectives:
        link = pred.links.get(c.axis, "local") if pred.links else "local"
        seconds = priced_time(c, spec, calibration, ranks_per_host, pred.links.get(c.axis),
                              rate, shape)
        out.append(Line(c.layer, c.phase, c.name, c.op, c.axis, link, c.size, pieces(c, spec),
                        c.elements * (c.itemsize or spec.dtype_bytes), seconds))
    return out


def explain_lines(spec: ModelSpec, pred: Prediction, calibration: Calibration,
                  ranks_per_host: int | None = None) -> list[str]:
    """The account as a table, then its totals per axis and link class."""
    rows = account(spec, pred, calibration, ranks_per_host)
    lines = [f"one epoch on {'x'.join(map(str, pred.grid))}, collective by collective "
             f"(epoch {format_seconds(pred.time_s)}, communication "
             f"{format_seconds(pred.comm_s)}):",
             f"{'layer':>5} {'phase':<8} {'collective':<10} {'op':<14} {'axis':<4} "
             f"{'link':<5} {'elements':>13} {'calls':>5} {'bytes/rank':>11} {'time':>10} "
             f"{'share':>6}"]
    for r in rows:
        lines.append(
            f"{'-' if r.layer is None else r.layer:>5} {r.phase:<8} {r.name:<10} {r.op:<14} "
            f"{r.axis:<4} {r.link:<5} {r.size:>13,} {r.calls:>5} {format_bytes(r.bytes):>11} "
            f"{format_seconds(r.seconds):>10} {100 * r.seconds / pred.time_s:>5.1f}%")
    for axis in ("x", "y", "z"):
        mine = [r for r in rows if r.axis == axis]
        if mine:
            moved = sum(r.bytes for r in mine)
            seconds = sum(r.seconds for r in mine)
            lines.append(f"  axis {axis} ({mine[0].link}): {format_bytes(moved)} per rank, "
                         f"{format_seconds(seconds)}, {100 * seconds / pred.time_s:.1f}% of the "
                         "epoch")
    return lines
