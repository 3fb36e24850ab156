"""Every rank of a ``plexus-train`` job proves the job's secret and its run to rank 0 before any
tensor moves (`plexus_partition.launch.peers`): the run's options as a flat name -> value map
(the request's fields, the dataset spec and its seed, the grid, Plexus's version), nothing a
rank may hold alone (its start time, its console)."""

from __future__ import annotations

import dataclasses
from typing import Any

from plexus_partition.launch.env import JobEnv
from plexus_partition.launch.group import prove_job

from .plan import RunRequest

#: Fields of a request a rank may hold alone: how it talks to its console and its threads (when
#: it started and what the cache made of the run are not the request's: `JobFacts`)
_PER_RANK = frozenset({"quiet", "heartbeat_s", "threads"})


def flat_options(value: Any, name: str, out: dict[str, str]) -> None:
    """``value``'s fields into ``out`` as ``name.field``: repr(value), dataclasses unfolded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            flat_options(getattr(value, f.name), f"{name}.{f.name}" if name else f.name, out)
    else:
        out[name] = repr(value)


def run_options(plan: RunRequest) -> dict[str, str]:
    """The options of ``plan`` every rank of one job must share, flat (``train.lr``: "0.01")."""
    from plexus import __version__  # noqa: PLC0415

    out: dict[str, str] = {"plexus": __version__}
    for f in dataclasses.fields(RunRequest):
        if f.name not in _PER_RANK:
            flat_options(getattr(plan, f.name), f.name, out)
    return out


def check_peers(plan: RunRequest, env: JobEnv) -> None:
    """Prove this rank's secret and run to rank 0 of the job it joined (and, on rank 0, check
    every rank's): `PeerRefused` (one line) on a mismatch, before any tensor moves."""
    prove_job(run_options(plan), f"the job at {env.master_addr}:{env.master_port}")
