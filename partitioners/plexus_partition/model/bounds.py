"""The one table of bounds of every number a user gives: each tool's numeric options (by their
argparse destination, the same meaning in every tool) and the launchers' environment variables.

`plexus_partition.model.cli.ArgumentParser` checks every parsed option against `BOUNDS` before a
tool does anything else, `plexus_partition.launch.env` reads the launchers' variables through
`env_int`, and the API (`plexus_partition.launch.env.threads_per_worker`,
`plexus.engine.config.EngineConfig`) checks its arguments with `check_bound`; a test keeps every
numeric option of every tool in the table. The limits are those past which a value can only be a
typing mistake or breaks a library below us (torch segfaults creating 100000 threads; ``timedelta``
overflows past ~1e14 s; a port is 16 bits), not policy: a run that is merely unusual stays allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

#: torch's thread pools segfault far above any machine's core count (100000 threads: SIGSEGV)
MAX_THREADS = 1024
MAX_WORLD_SIZE = 1 << 20  # as plexus_partition.model.grid's
MAX_LAYERS = 256  # as plexus_partition.model.model's
MAX_SEED = 2**63 - 1  # numpy's and torch's seeds
MAX_TIMEOUT_S = 365 * 86400  # a year: longer is no timeout, and timedelta overflows past ~1e14 s
MAX_COUNT = 10**9  # epochs, steps, repeats: a billion is beyond any run
MAX_WIDTH = 1 << 24  # a feature/hidden width: beyond it one row alone is gigabytes
MAX_CHUNKS = 1 << 16  # --agg-chunks: a Python object per chunk is allocated at start-up
MAX_GIB = float(1 << 30)  # an exbibyte of cache or memory
MAX_NODES = 1 << 40
MAX_EDGES = 1 << 48
MAX_LR = 1e3  # Adam's step moves every weight by about the rate: far above, a run diverges
MAX_PORT = 65535
#: a local world timed for the rates (plexus-bench calibrate, --grid auto): at most this many
#: ranks per core (far more times the scheduler, not gloo)
CALIBRATION_RANKS_PER_CORE = 2


class BoundError(ValueError):
    """A number out of its bounds (one line naming it, its range and the value given)."""


@dataclass(frozen=True)
class Bound:
    """``lo <= value <= hi`` (``lo < value`` where ``open_lo``), finite; ``integer``: a whole
    number (not a bool). ``text``: how the range reads where the two sides read as one (e.g.
    ``in [0, 1)``)."""

    lo: float
    hi: float
    integer: bool = True
    open_lo: bool = False
    text: str = ""

    def describe(self) -> str:
        """The whole range, e.g. ``an integer in [1, 1024]``."""
        kind = "an integer" if self.integer else "a number"
        lo = "(" if self.open_lo else "["
        return f"{kind} {self.text or f'in {lo}{_num(self.lo)}, {_num(self.hi)}]'}"

    def problem(self, value: float) -> str:
        """What ``value`` (a finite number of the right kind) breaks: the side it is past."""
        if self.text:
            return self.text
        if value > self.hi:
            return f"at most {_num(self.hi)}"
        return f"{'>' if self.open_lo else '>='} {_num(self.lo)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _int(lo: float, hi: float, text: str = "") -> Bound:
    return Bound(lo, hi, True, False, text)


def _real(lo: float, hi: float, open_lo: bool = False, text: str = "") -> Bound:
    return Bound(lo, hi, False, open_lo, text)


_RATE = _real(0.0, math.nextafter(1.0, 0.0), text="in [0, 1)")  # a probability of dropping

#: Every numeric option of every tool (its argparse destination) and every launcher variable.
BOUNDS: dict[str, Bound] = {
    # where ranks run
    "threads": _int(1, MAX_THREADS),
    "jobs": _int(1, MAX_THREADS),
    "world_size": _int(1, MAX_WORLD_SIZE, f"in [1, {MAX_WORLD_SIZE}]"),
    "ranks_per_host": _int(1, MAX_WORLD_SIZE, "in [1, --world-size]"),
    "gpus_per_node": _int(1, 1024),
    "tasks_per_node": _int(1, MAX_WORLD_SIZE),
    "timeout": _real(0, MAX_TIMEOUT_S, True, f"> 0 and at most {MAX_TIMEOUT_S} seconds"),
    "run_timeout": _real(0, MAX_TIMEOUT_S, open_lo=True),
    # the model
    "layers": _int(1, MAX_LAYERS, f"in [1, {MAX_LAYERS}]"),
    "hidden": _int(1, MAX_WIDTH),
    "heads": _int(1, 1024),
    "out_heads": _int(1, 1024),
    "dropout": _RATE,
    "attn_dropout": _RATE,
    "negative_slope": _real(-1e6, 1e6),
    "hops": _int(1, 10**6),  # APPNP's K: one SpMM each
    "teleport": _RATE,  # APPNP's alpha
    "alpha": _RATE,  # GCNII's initial-residual weight
    # GCNII's beta = log(theta/l + 1) is undefined at theta <= -1 (its first layer, l = 1)
    "theta": _real(-1, 1e6, True, "> -1 and at most 1e6"),
    "nodes": _int(1, MAX_NODES),
    "nnz": _int(1, MAX_EDGES),
    "features": _int(1, MAX_WIDTH),
    "classes": _int(1, MAX_WIDTH),
    "pairs": _int(1, MAX_EDGES),  # link prediction's positive pairs a step (an edge each)
    # training
    "epochs": _int(0, MAX_COUNT),
    "repeats": _int(1, 10**6),
    "steps": _int(1, 10**6),
    "eval_every": _int(0, MAX_COUNT),
    "checkpoint_every": _int(1, MAX_COUNT),
    "seed": _int(0, MAX_SEED, "in [0, 2**63 - 1]"),
    "dataset_seed": _int(0, MAX_SEED, "in [0, 2**63 - 1]"),
    "split_seed": _int(0, MAX_SEED, "in [0, 2**63 - 1]"),
    "lr": _real(0, MAX_LR, True, f"> 0 and at most {MAX_LR:g}"),
    "weight_decay": _real(0, 1e3),
    "momentum": _real(0, math.nextafter(1.0, 0.0), text="in [0, 1)"),
    "clip_grad_norm": _real(0, 1e30, True, "> 0 and finite (at most 1e30)"),
    "lr_step": _int(1, MAX_COUNT),
    "lr_gamma": _real(0, math.nextafter(1.0, 0.0), True, "in (0, 1)"),
    "lr_patience": _int(0, MAX_COUNT),
    "lr_min": _real(0, MAX_LR),
    "patience": _int(1, MAX_COUNT),
    "heartbeat": _real(0, MAX_TIMEOUT_S, text=f">= 0 seconds (0: none) and at most {MAX_TIMEOUT_S}"),  # seconds between --quiet heartbeat lines (0: none)
    # the engine, partitioner and cache
    "agg_chunks": _int(1, MAX_CHUNKS),
    "chunk_edges": _int(1, 1 << 40),
    "bucket_entries": _int(1, 1 << 40),
    "cache_max_gb": _real(0, MAX_GIB, True, f"a number of GiB > 0 and at most {MAX_GIB:g}"),
    "memory_limit": _real(0, MAX_GIB, open_lo=True),
    "top": _int(0, 10**6),
    "spread_threshold": _real(1, 1e6),
    # the launchers' environment (torchrun, srun, OpenMP, plexus-train's cache cap)
    "RANK": _int(0, MAX_WORLD_SIZE - 1),
    "WORLD_SIZE": _int(1, MAX_WORLD_SIZE),
    "LOCAL_RANK": _int(0, MAX_WORLD_SIZE - 1),
    "LOCAL_WORLD_SIZE": _int(1, MAX_WORLD_SIZE),
    "MASTER_PORT": _int(1, MAX_PORT),
    "SLURM_PROCID": _int(0, MAX_WORLD_SIZE - 1),
    "SLURM_NTASKS": _int(1, MAX_WORLD_SIZE),
    "SLURM_LOCALID": _int(0, MAX_WORLD_SIZE - 1),
    "SLURM_NODEID": _int(0, MAX_WORLD_SIZE - 1),
    "SLURM_NNODES": _int(1, MAX_WORLD_SIZE),
    "SLURM_STEP_NUM_NODES": _int(1, MAX_WORLD_SIZE),
    "OMP_NUM_THREADS": _int(1, MAX_THREADS),
    "PLEXUS_CACHE_MAX_GB": _real(0, MAX_GIB, open_lo=True),
}


def check_bound(name: str, value: Any, label: str | None = None) -> Any:
    """``value`` if it is within ``BOUNDS[name]`` (None passes: not given); `BoundError`
    naming ``label`` (default ``name``) otherwise. A float that is a whole number passes an
    integer bound and comes back as an int."""
    if value is None:
        return None
    bound = BOUNDS[name]
    label = label or name
    shown = str(value)[:40]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BoundError(f"{label} must be {bound.describe()}, got {shown}")
    if not math.isfinite(value):
        raise BoundError(f"{label} must be {bound.text or 'a finite number'}, got {shown}")
    if bound.integer and not float(value).is_integer():
        raise BoundError(f"{label} must be an integer, got {shown}")
    if not ((bound.lo < value if bound.open_lo else bound.lo <= value) and value <= bound.hi):
        raise BoundError(f"{label} must be {bound.problem(value)}, got {shown}")
    return int(value) if bound.integer else value


def flag_name(dest: str) -> str:
    """The flag of an argparse destination (``agg_chunks`` -> ``--agg-chunks``)."""
    return "--" + dest.replace("_", "-")


def check_options(options: Mapping[str, Any]) -> None:
    """Check every option of ``options`` (a parsed namespace's ``vars``) that the table bounds;
    `BoundError` naming the flag of the first out of bounds."""
    for dest, value in options.items():
        if dest in BOUNDS and not dest.isupper() and isinstance(value, (int, float)):
            check_bound(dest, value, flag_name(dest))


def env_number(environ: Mapping[str, str], name: str, default: Any = None) -> Any:
    """The variable ``name`` of ``environ`` as the table's number (``default`` when unset or
    empty); `BoundError` naming the variable for text that is no such number or one out of
    bounds."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    bound = BOUNDS[name]
    try:
        value: Any = int(text) if bound.integer else float(text)
    except ValueError:
        raise BoundError(f"environment variable {name}={text[:40]!r} is not "
                         f"{bound.describe()}") from None
    return check_bound(name, value, f"environment variable {name}")
