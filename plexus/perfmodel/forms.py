"""The form a collective runs in on a cluster (flat ring, or two levels: within the node, then
across the nodes on 1/k of the data, `plexus_partition.model.topology`), priced by the α-β ring
of its parts with the calibration's link classes, and the bytes it sends per link class.

The rule that picks the form and cuts it into parts is the engine's
(`plexus_partition.model.topology.choose_form`, `parts`); here it is given the link rates: a
flat ring over an axis takes the axis's class (intra, strided4, strided or inter,
`plexus.perfmodel.placement`), a two-level collective's node parts "intra" and its network
part "inter" (one rank per node).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from plexus_partition.model.schedule import Collective, ring_volume
from plexus_partition.model.topology import AxisSpan, Part, choose_form, form_seconds, parts

from .calibration import Calibration


def link_rates(calibration: Calibration, link_class: str) -> dict[str, tuple[float, float]]:
    """{class: (α, β)} for a collective over an axis of ``link_class``: that class and the two
    a two-level form runs on."""
    return {c: calibration.link_class(c) for c in {"intra", "inter", link_class}}


def collective_parts(c: Collective, collectives: str, calibration: Calibration,
                     link_class: str, span: AxisSpan, dtype_bytes: int = 4
                     ) -> tuple[Part, ...]:
    """The parts ``c`` runs as under the mode ``collectives`` on an axis of ``span`` whose
    flat ring crosses ``link_class``: the form `choose_form` prices faster with the
    calibration's rates ("auto"), or the one asked for."""
    rates = link_rates(calibration, link_class)
    form = choose_form(collectives, span, c.op, c.size, c.itemsize or dtype_bytes, rates,
                       link_class)
    return parts(c.op, form, c.size, span, link_class)


def parts_seconds(pieces: tuple[Part, ...], calibration: Calibration, link_class: str,
                  itemsize: float) -> float:
    """The α-β time of ``pieces`` with the calibration's link classes."""
    return form_seconds(pieces, itemsize, link_rates(calibration, link_class))


def epoch_link_bytes(collectives: Sequence[Collective], spec, calibration: Calibration,
                     links: Mapping[str, str], spans: Mapping[str, AxisSpan]) -> dict[str, float]:
    """{link class: bytes one rank sends} over ``collectives`` on a cluster (``links`` and
    ``spans`` per axis, `plexus.perfmodel.placement`; empty without a placement), each in the
    form it runs in (`collective_parts`, under ``spec.collectives``)."""
    out: dict[str, float] = {}
    if not links:
        return out
    for c in collectives:
        link, span = links[c.axis], spans[c.axis]
        size = c.itemsize or spec.dtype_bytes
        pieces = (collective_parts(c, spec.collectives, calibration, link, span,
                                   spec.dtype_bytes) if span.split
                  else (Part(link, c.op, c.size, c.group),))
        for part in pieces:
            out[part.link] = out.get(part.link, 0.0) + ring_volume(part.op, part.numel,
                                                                   part.p) * size
    return out
