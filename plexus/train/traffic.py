"""The run's traffic, collective by collective: rank 0's ledger (what the engine measured, keyed
by layer, phase, operation, axis, size and bytes per element, each named where the engine issued
it: `plexus.engine.ledger.Ledger.names`), for the summary and ``--log-json``; and what the
schedule declares (`plexus_partition.model.schedule`), which the summary's declared bytes price."""

from __future__ import annotations

from typing import Mapping

from plexus_partition.model.schedule import (SETUP, Collective, SparseExchange, epoch_collectives,
                                  exact_rows, ring_volume, setup_collectives)
from plexus.core.units import format_bytes
from plexus.perfmodel.spec import DryRunRecorder

#: The phases of a training step (an evaluation's are "eval", the set-up's `SETUP`).
STEP_PHASES = ("forward", "loss", "backward")


def run_exchange(net, engine) -> SparseExchange | None:
    """The run's sparse exchanges priced with the rows its own shard sends
    (`plexus_partition.model.schedule.exact_rows`; the stages must have run once)."""
    if engine.sparse_comm == "off":
        return None
    return SparseExchange(engine.sparse_comm, exact_rows(net.exchange_counts()))


def setup_declared(net, shape: Mapping[str, int], engine) -> list[Collective]:
    """What the model (an engine `GridModel`) declares it issues once, at set-up."""
    return setup_collectives(net.plans, shape, net.pad, kept_input=net.kept_input,
                             itemsize=engine.dtype_bytes)


def step_declared(net, shape: Mapping[str, int], engine, evaluate: bool) -> list[Collective]:
    """What the model declares for one training step (and with ``evaluate`` the evaluation
    after it): its kept input, wire precision and sparse exchanges, as the engine runs them."""
    return epoch_collectives(
        net.plans, shape, net.pad, learnable_features=net.cfg.learnable_features,
        evaluate=evaluate, multilabel=net.multilabel, kept_input=net.kept_input,
        payload_itemsize=engine.comm_bytes, exchange=run_exchange(net, engine),
        recorder=DryRunRecorder(engine.dtype_bytes))


def collective_account(recorded: Mapping[tuple, int], names: Mapping[tuple, str],
                       group: Mapping[str, int], steps: int) -> dict:
    """JSON-ready: every recorded collective (``recorded``: `Ledger.collectives`) with its name
    (``names``: `Ledger.names`, as the code that issued it labelled it), calls, elements and bytes one rank sends per call
    (ring volumes, ``group``: ranks per axis) and in all; ``steps``: the training steps run, so
    that a step's share can be read off."""
    rows = []
    for key, calls in sorted(recorded.items(), key=_order):
        layer, phase, op, axis, size, itemsize = key
        elements = ring_volume(op, size, group[axis])
        rows.append({"layer": layer, "phase": phase,
                     "name": names.get(key) or op, "op": op,
                     "axis": axis, "size": size, "itemsize": itemsize, "calls": calls,
                     "elements_per_call": elements, "bytes_per_call": elements * itemsize,
                     "bytes": elements * itemsize * calls})
    return {"steps": steps, "collectives": rows}


def _order(item: tuple) -> tuple:
    """Program order: set-up, then forward by layer, the loss, backward last layer first,
    evaluation."""
    (layer, phase, op, axis, size, itemsize), _ = item
    rank = {SETUP: 0, "forward": 1, "loss": 2, "backward": 3, "eval": 4}.get(phase, 5)
    lay = -1 if layer is None else layer
    return rank, -lay if phase == "backward" else lay, op, axis, size, itemsize


def format_account(account: dict) -> list[str]:
    """Summary lines: one training step's collectives (bytes rank 0 sends per step), then the
    set-up's and an evaluation's totals."""
    rows, steps = account["collectives"], max(account["steps"], 1)
    step = [r for r in rows if r["phase"] in STEP_PHASES]
    if not rows:
        return []
    lines = ["  collectives of one training step, rank 0 (elements and bytes it sends per step; "
             "--log-json: comm_collectives):"]
    for r in step:
        layer = "loss" if r["layer"] is None else f"layer {r['layer']}"
        per_step = r["calls"] / steps
        times = "" if per_step == 1 else f" x{per_step:g}"
        lines.append(f"    {layer:<8} {r['phase']:<8} {r['name']:<12} {r['op']:<14} "
                     f"{r['axis']}  {r['elements_per_call'] * per_step:>12,.0f}  "
                     f"{format_bytes(r['bytes_per_call'] * per_step):>10}{times}")
    total = sum(r["bytes"] for r in step) / steps
    lines.append(f"    {'':<8} {'step':<8} {'total':<12} {'':<14} {'':<3}{'':>12}  "
                 f"{format_bytes(total):>10}")
    for phase, what in ((SETUP, "set-up (once)"), ("eval", "evaluations (all)")):
        part = [r for r in rows if r["phase"] == phase]
        if part:
            names = sorted({r["name"] for r in part})
            lines.append(f"    {what}: {format_bytes(sum(r['bytes'] for r in part))} in "
                         f"{sum(r['calls'] for r in part)} collectives ({', '.join(names)})")
    return lines
