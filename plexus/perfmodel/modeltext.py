"""What ``plexus-model`` prints (`plexus.perfmodel.cli` parses and checks its options): the
header (the graph, the model, the calibration and the set-up's memory), a table per world size
of its grids ranked by predicted epoch time, ``--explain``'s accounting of one grid, or all of
it as one JSON document (``--json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import DTYPE_BYTES
from plexus_partition.model.modelopts import describe_model
from plexus.core.units import format_bytes, format_seconds

from .calibration import Calibration
from .explain import account, explain_lines
from .model import Prediction
from .placement import Placement
from .setup import partition_memory, setup_memory
from .spec import ModelSpec


@dataclass(frozen=True)
class Ranking:
    """A ``plexus-model`` answer: the grids of each world size ranked, and how to show them."""

    spec: ModelSpec
    cal: Calibration
    origin: str  # where the graph's sizes come from, as the header says it
    streamed: bool  # the graph is partitioned out of core
    ranks_per_host: int | None
    placement: Placement | None
    per_node: int | None  # GPUs per node, where placed
    limit: float | None  # the memory per rank a grid must fit (None: none)
    limit_name: str
    runs: list[tuple[int, ModelSpec, list[Prediction]]]  # (world size, its spec, its grids)
    top: int  # the grids shown per world (0: all)
    explain: bool
    only: GridShape | None  # the one grid asked for (None: the fastest)
    one_world: bool  # no --gpus: the one world's fields at the top of the JSON
    task: str = ""  # --task link: the header's line saying what a step prices

    def shown(self, preds: list[Prediction]) -> int:
        return len(preds) if self.top == 0 else min(self.top, len(preds))


def json_doc(r: Ranking) -> dict[str, Any]:
    """``--json``: the inputs, the calibration and every world's shown grids."""
    doc: dict[str, Any] = {
        "spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(r.spec).items()},
        "sizes_from": r.origin, "calibration": r.cal.to_dict(),
        "calibration_label": r.cal.label, "ranks_per_host": r.ranks_per_host,
        "gpus_per_node": r.per_node, "partition_bytes": partition_memory(r.spec, r.streamed),
        "partition_out_of_core": r.streamed, "memory_limit": r.limit,
        "task": "link" if r.task else "node", "worlds": []}
    for world, at, preds in r.runs:
        doc["worlds"].append({
            "world_size": world, "num_grids": len(preds),
            "configs": [{**p.to_dict(), "setup_bytes": setup_memory(at, p.grid).rank}
                        for p in preds[:r.shown(preds)]]})
        if r.explain and preds:
            doc["worlds"][-1]["explain"] = [
                line.to_dict() for line in account(at, shown_prediction(preds, r.only), r.cal,
                                                   r.ranks_per_host)]
    if r.one_world:  # the one world's fields at the top, as before --gpus
        doc.update(doc["worlds"][0])
    return doc


def text_lines(r: Ranking) -> list[str]:
    """The header, then each world's table (and ``--explain``'s accounting)."""
    lines = header_lines(r.spec, r.cal, r.origin, r.streamed, r.ranks_per_host, r.placement)
    lines += [r.task] if r.task else []
    for world, at, preds in r.runs:
        lines += [""] + table_lines(at, preds, world, r.shown(preds), r.limit_name, r.only)
        if r.explain and preds:
            lines += [""] + explain_lines(at, shown_prediction(preds, r.only), r.cal,
                                          r.ranks_per_host)
    return lines


def header_lines(spec: ModelSpec, cal: Calibration, origin: str, streamed: bool,
            per_host: int | None, placement: Placement | None) -> list[str]:
    m = spec.model
    spmm, gemm, _ = cal.rates(spec.dtype_bytes)
    if placement is not None and cal.links:
        links = ", ".join(f"{c} alpha {a:.3g} s, beta {1 / b:.3g} B/s" for c, a, b in cal.links)
    elif placement is not None:
        links = f"every link alpha {cal.alpha:.3g} s, beta {1 / cal.beta:.3g} B/s"
    else:
        alpha, beta = cal.local_link(per_host)  # the pair the collectives are priced with
        measured = [(p, cal.group_link(per_host, p)) for p in range(2, (per_host or 0) + 1)]
        calls = ", ".join(f"groups of {p} {g[0] * 1e3:.3g} ms + {1 / g[1]:.3g} B/s"
                          for p, g in measured if g)
        links = (f"per call: {calls}" if calls else
                 f"alpha {alpha:.3g} s, beta {1 / beta:.3g} B/s") + (
            f"; {per_host} ranks per host" if per_host else "")
    if cal.stage_overhead or cal.step_overhead:
        links += (f"; fixed work {cal.step_overhead * 1e3:.3g} ms per step + "
                  f"{cal.stage_overhead * 1e3:.3g} ms per stage")
    return [
        f"{spec.name or 'graph'}: N={spec.num_nodes:,} nnz={spec.nnz:,} F={spec.num_features} "
        f"C={spec.num_classes} layers={m.num_layers} hidden={m.hidden} "
        f"order={spec.order_text} bias={'yes' if m.bias else 'no'}"
        + (f" ({origin})" if origin != "loaded" else ""),
        "model: " + describe_model(m).replace(f"order {m.order}", f"order {spec.order_text}")
        + (f", {[k for k, v in DTYPE_BYTES.items() if v == spec.dtype_bytes][0]}"
           if spec.dtype_bytes != 4 else "") + (", recompute" if spec.recompute else "")
        + " (plexus-train's model options and defaults: --model, --layers, --hidden, ...)",
        f"calibration: {cal.label}",
        f"  rates: SpMM {spmm:.3g} flop/s, GEMM {gemm:.3g} flop/s; {links}"
        + (f"; {placement.gpus_per_node} GPUs per node" if placement else "")
        + (f"; GPU memory {format_bytes(cal.device_memory)}" if cal.device_memory else ""),
        f"set-up: partitioning the graph takes {format_bytes(partition_memory(spec, streamed))} "
        f"in one process{' (out of core)' if streamed else ''}, once per shard store"
        + ("" if streamed else f" ({format_bytes(partition_memory(spec, True))} out of core, "
                               "from R-MAT, OGB or a graph directory: plexus-partition)"),
    ]


def _axis_shares(p: Prediction) -> str:
    """Each axis's share of the epoch in communication, with its link class when placed."""
    parts = []
    for axis, seconds in p.comm_s_per_axis.items():
        if seconds > 0:
            link = f" {p.links[axis]}" if p.links else ""
            parts.append(f"{axis} {100 * seconds / p.time_s:.0f}%{link}")
    return (" ".join(parts) or "-") + (f" (node {'x'.join(map(str, p.node))})"
                                       if p.node else "")


def shown_prediction(preds: list[Prediction], only: GridShape | None) -> Prediction:
    """The prediction ``--explain`` details: the one grid asked for, else the fastest."""
    if only is not None:
        return next(p for p in preds if GridShape.of(p.grid) == only)
    return preds[0]


def table_lines(spec: ModelSpec, preds: list[Prediction], world: int, shown: int,
           limit_name: str, only: GridShape | None = None) -> list[str]:
    if only is not None:  # the one grid asked for, numbered by its rank among all
        ranked = [(k, p) for k, p in enumerate(preds, 1) if GridShape.of(p.grid) == only]
        head = f"world size {world}: grid {only}, rank {ranked[0][0]} of {len(preds)}"
    else:
        ranked = list(enumerate(preds[:shown], 1))
        head = f"world size {world}: {len(preds)} grids, showing {shown}"
    lines = [
        head + "; set-up/rank: a rank "
        + ("reading its shard" if spec.from_store else "loading the graph to cut its shard"),
        f"{'rank':>4}  {'XxYxZ':<11} {'epoch':>10} {'comm':>10} {'compute':>10} {'comm%':>6} "
        f"{'comm share per axis':<30} {'comm/rank':>11} {'memory/rank':>12} "
        f"{'set-up/rank':>12}  orders",
    ]
    for k, p in ranked:
        grid = str(GridShape.of(p.grid))
        flag = "" if p.fits else f"  (over {limit_name})"
        orders = ",".join("a" if o == "agg" else "c" for o in p.orders)
        lines.append(
            f"{k:>4}  {grid:<11} {format_seconds(p.time_s):>10} {format_seconds(p.comm_s):>10} "
            f"{format_seconds(p.compute_s):>10} {100 * p.comm_fraction:>5.1f}% "
            f"{_axis_shares(p):<30} "
            f"{format_bytes(p.volume.total_bytes):>11} {format_bytes(p.memory.total):>12} "
            f"{format_bytes(setup_memory(spec, p.grid).rank):>12}  {orders}{flag}")
    if preds and not preds[0].fits:
        lines.append(f"none of the {len(preds)} grids fits in the {limit_name}: use more ranks, "
                     "--dtype bf16 or --recompute")
    return lines
