"""Communication ledger: what every collective moved, per axis and operation, per link class,
and per collective as the schedule declares it (layer, phase, operation, axis, full size, bytes
per element).

Volumes are those of ring algorithms, per rank (`plexus_partition.model.schedule.ring_volume`, the
formula the performance model uses too). Collectives over an axis of size 1 are skipped and move
nothing. The (axis, op) totals are the collective's own (as the schedule declares it, whatever
form it ran in); ``link_bytes`` counts what its parts (`plexus_partition.model.topology.parts`:
itself when flat, its node's and the network's sub-collectives when hierarchical) sent, each on
its link class ("intra": a group inside one node, "inter": across nodes).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from plexus_partition.model.schedule import ring_volume
from plexus_partition.model.topology import LINKS, Part

#: One collective as the ledger keys it: (layer or None, phase, op, axis, full size n in
#: elements, bytes per element), the fields of `plexus_partition.model.schedule.Collective.key`.
Key = tuple


@dataclass
class Ledger:
    """Accumulates elements/bytes moved and call counts, keyed by (axis, op), bytes per
    (axis, op, link class), and call counts per collective (`Key`)."""

    def __post_init__(self) -> None:
        self.elements: dict[tuple[str, str], float] = defaultdict(float)
        self.bytes: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.collectives: dict[Key, int] = defaultdict(int)
        self.link_bytes: dict[tuple[str, str, str], float] = defaultdict(float)
        # each collective's name as the code that issued it labelled it (`Comm.labelled`);
        # collectives of the same key with different names: joined by "/"
        self.names: dict[Key, str] = {}

    def record(self, axis: str, op: str, numel: int, p: int, itemsize: int,
               layer: int | None = None, phase: str = "",
               parts: Sequence[Part] | None = None, link: str = "intra",
               name: str = "") -> None:
        """Add one collective on ``numel`` elements (its full size) over ``p`` ranks, sent
        ``itemsize`` bytes per element, issued by ``layer`` (None: the loss or the metric) in
        ``phase`` (one of `plexus_partition.model.schedule.PHASES`), run as ``parts``
        (`plexus_partition.model.topology.parts`; None: flat, itself on link class ``link``),
        named ``name`` where it was issued."""
        moved = ring_volume(op, numel, p)
        self.elements[axis, op] += moved
        self.bytes[axis, op] += moved * itemsize
        self.calls[axis, op] += 1
        key = (layer, phase, op, axis, int(numel), int(itemsize))
        self.collectives[key] += 1
        known = self.names.get(key)
        if known is None:
            self.names[key] = name
        elif name not in known.split("/"):
            self.names[key] = f"{known}/{name}"
        if parts is None:
            self.link_bytes[axis, op, link] += moved * itemsize
            return
        for part in parts:
            self.link_bytes[axis, op, part.link] += (
                ring_volume(part.op, part.numel, part.p) * itemsize)

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self.elements.clear()
        self.bytes.clear()
        self.calls.clear()
        self.collectives.clear()
        self.link_bytes.clear()
        self.names.clear()

    def per_axis(self, what: str = "bytes") -> dict[str, float]:
        """Totals per axis ("x", "y", "z") of ``what`` ("bytes" or "elements")."""
        table = getattr(self, what)
        out = {"x": 0.0, "y": 0.0, "z": 0.0}
        for (axis, _op), value in table.items():
            out[axis] += value
        return out

    def per_link(self) -> dict[str, float]:
        """Bytes this rank sent per link class: {"intra": ..., "inter": ...}."""
        out = dict.fromkeys(LINKS, 0.0)
        for (_axis, _op, link), value in self.link_bytes.items():
            out[link] += value
        return out

    def summary(self) -> dict:
        """A JSON-ready view: per axis and op, elements, bytes, calls and bytes per link
        class."""
        return {f"{axis}:{op}": {"elements": self.elements[axis, op], "bytes": self.bytes[axis, op],
                                  "calls": self.calls[axis, op],
                                  "link_bytes": {link: self.link_bytes.get((axis, op, link), 0.0)
                                                 for link in LINKS}}
                for (axis, op) in sorted(self.calls)}
