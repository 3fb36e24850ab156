"""Which runs a sweep asks for: the grids of each world size (listed, every factorization, or the
performance model's pick), the dataset of each world size (the same one for strong scaling, a
growing one for weak scaling), and the repetitions; each run with a stable id, so that a second
invocation finds the runs it already has."""

from __future__ import annotations

import hashlib
import os
import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

from plexus_partition.model.grid import GridError, GridShape
from plexus_partition.model.grid import parse_world_sizes as grid_world_sizes
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus_partition.model.model import DEFAULT_ACTIVATION
from plexus_partition.model.modelopts import (DEFAULT_DROPOUT, DEFAULT_HIDDEN, DEFAULT_LAYERS,
                                              DEFAULT_ORDER)

Sizes = tuple[int, int, int, int]  # nodes, nnz of Â, features, classes
GRID_WORDS = ("all", "auto")


class PlanError(ValueError):
    """A sweep request that cannot be planned (a one-line message)."""


@dataclass(frozen=True)
class ModelOptions:
    """The plexus-train options every run of a sweep shares (model, seed, engine)."""

    layers: int = DEFAULT_LAYERS
    hidden: int = DEFAULT_HIDDEN
    dropout: float = DEFAULT_DROPOUT
    order: str = DEFAULT_ORDER
    perm: str = DEFAULT_PERMUTATION
    seed: int = 0
    spmm: str = "torch"
    eval_every: int = 0  # evaluating inside timed epochs would blur the epoch times
    # torch threads per rank, the same on every grid: a 1-rank run left to take all the cores
    # would compare threads with ranks (super-linear "speed-ups")
    threads: int = 1
    extra: tuple[str, ...] = ()  # further plexus-train arguments, passed as they are
    comm_dtype: str = "fp32"  # --comm-dtype: the wire precision of the runs' messages
    sparse_comm: str = "auto"  # --sparse-comm: the aggregation's sums as sparse exchanges
    activation: str = DEFAULT_ACTIVATION  # --activation: between the layers

    def train_args(self) -> list[str]:
        """These options as plexus-train arguments."""
        return ["--layers", str(self.layers), "--hidden", str(self.hidden),
                "--dropout", str(self.dropout), "--order", self.order, "--perm", self.perm,
                "--seed", str(self.seed), "--spmm", self.spmm,
                "--eval-every", str(self.eval_every), "--threads", str(self.threads),
                "--comm-dtype", self.comm_dtype, "--sparse-comm", self.sparse_comm,
                "--activation", self.activation, *self.extra]


@dataclass(frozen=True)
class SweepRequest:
    """What a user asked ``plexus-sweep`` for."""

    dataset: str
    world_sizes: tuple[int, ...] = ()
    grids: str = "all"  # "all", "auto", or a comma-separated list of XxYxZ / all / auto
    epochs: int = 5
    repeats: int = 1
    weak: bool = False
    weak_datasets: tuple[str, ...] = ()  # one per world size; default: R-MAT scale + log2 G
    root: str | None = None
    model: ModelOptions = field(default_factory=ModelOptions)

    def common(self) -> dict[str, Any]:
        """What every run of a results folder must share to be compared (checked on resume)."""
        model = asdict(self.model)
        for key in ("comm_dtype", "sparse_comm", "activation"):  # at their defaults: as folders
            if model[key] == getattr(ModelOptions, key):  # written before these options record it
                del model[key]
        return {"epochs": self.epochs, "root": self.root, "model": model}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["model"]["extra"] = list(self.model.extra)
        return d


@dataclass(frozen=True)
class PlannedRun:
    """One plexus-train run of a sweep."""

    run_id: str
    dataset: str
    grid: GridShape
    repeat: int
    studies: tuple[str, ...]  # "strong" and/or "weak"
    picked_by: tuple[str, ...]  # "list", "all" and/or "auto" (the performance model's choice)

    @property
    def world_size(self) -> int:
        return self.grid.world_size

    def train_args(self, request: SweepRequest, log_json: str) -> list[str]:
        """The plexus-train arguments of this run, writing its JSON log to ``log_json``."""
        args = ["--grid", str(self.grid), "--dataset", self.dataset]
        if request.root:
            args += ["--root", request.root]
        return [*args, "--epochs", str(request.epochs), *request.model.train_args(), "--quiet",
                "--log-json", log_json]


SHORT_KEYS = {"scale": "s", "edge_factor": "e", "features": "f", "classes": "c"}


def slug(spec: str) -> str:
    """A file-name-safe, stable name for a dataset spec, e.g. ``rmat-s9-e4-f16-c4`` (long specs
    keep a hash)."""
    text = spec.strip().lower()
    for key, short in SHORT_KEYS.items():
        text = re.sub(rf"\b{key}=", short, text)
    text = re.sub(r"[^a-z0-9.]+", "-", text).strip("-") or "dataset"
    if len(text) > 48:
        text = text[:36] + "-" + hashlib.sha1(spec.encode()).hexdigest()[:8]
    return text


def run_id(dataset: str, grid: GridShape, repeat: int) -> str:
    """``<dataset slug>_<grid>_r<repeat>``: the run's log is ``runs/<id>.json``."""
    return f"{slug(dataset)}_{grid}_r{repeat}"


def parse_world_sizes(text: str) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4) (`plexus_partition.model.grid.parse_world_sizes`); raises PlanError."""
    try:
        return grid_world_sizes(text)
    except GridError as e:
        raise PlanError(f"world sizes {e}") from None


def grid_tokens(text: str) -> list[str | GridShape]:
    """"1x2x1,auto" -> [GridShape(1, 2, 1), "auto"]; raises PlanError."""
    out: list[str | GridShape] = []
    for token in (t.strip().lower() for t in text.split(",")):
        if not token:
            continue
        if token in GRID_WORDS:
            out.append(token)
            continue
        try:
            out.append(GridShape.parse(token))
        except GridError as e:
            raise PlanError(f"grid {token!r}: {e}; or use all/auto") from None
    if not out:
        raise PlanError("no grids given; use all, auto or a list like 1x2x1,2x1x1")
    return out


def weak_dataset(base: str, world_size: int) -> str:
    """The R-MAT spec of ``base`` with its scale grown by log2 ``world_size`` (the node count
    grows with G, edges per node fixed); raises PlanError for other datasets or a G that is not
    a power of two."""
    kind, _, rest = base.partition(":")
    if kind.strip().lower() != "rmat":
        raise PlanError(f"weak scaling grows R-MAT graphs only; for {base!r} give one dataset "
                        "per world size")
    step = math.log2(world_size)
    if step != int(step):
        raise PlanError(f"weak scaling by R-MAT scale needs powers of two, got world size "
                        f"{world_size}; or give one dataset per world size")
    from plexus_datasets import parse_rmat_params  # noqa: PLC0415 (validates the spec too)

    scale = int(parse_rmat_params(rest).get("scale", 0)) + int(step)
    items = [i for i in (s.strip() for s in rest.split(",")) if i]
    items = [i for i in items if i.partition("=")[0].strip().lower() != "scale"]
    return "rmat:" + ",".join([f"scale={scale}", *items])


def datasets_by_world(request: SweepRequest) -> dict[int, str]:
    """The dataset each world size runs: the same one (strong) or a growing one (weak)."""
    worlds = request.world_sizes
    if not request.weak:
        return {w: request.dataset for w in worlds}
    if request.weak_datasets:
        if len(request.weak_datasets) != len(worlds):
            raise PlanError(f"{len(request.weak_datasets)} weak-scaling datasets for "
                            f"{len(worlds)} world sizes; give one per world size")
        return dict(zip(worlds, request.weak_datasets))
    base = min(worlds)
    if base != 1:
        raise PlanError("weak scaling by R-MAT scale starts at world size 1 (the dataset as "
                        "given); add 1 to the world sizes")
    return {w: weak_dataset(request.dataset, w) for w in worlds}


def resolve_worlds(request: SweepRequest, tokens: Sequence[str | GridShape]) -> tuple[int, ...]:
    """The world sizes: as given, or those of the listed grids; every listed grid's size must be
    among them."""
    listed = [t.world_size for t in tokens if isinstance(t, GridShape)]
    if not request.world_sizes:
        if len(listed) != len(tokens):
            raise PlanError("all/auto need the world sizes (--world-sizes)")
        return tuple(sorted(set(listed)))
    for t in tokens:
        if isinstance(t, GridShape) and t.world_size not in request.world_sizes:
            raise PlanError(f"grid {t} has {t.world_size} ranks, not one of the world sizes "
                            f"{','.join(map(str, request.world_sizes))}")
    return request.world_sizes


def plan_runs(request: SweepRequest,
              auto_grid: Callable[[str, int], GridShape]) -> list[PlannedRun]:
    """Every run of ``request``: by repeat, then world size and grid; ``auto_grid(dataset, G)``
    is the performance model's pick (called only for ``auto``). Raises PlanError."""
    if request.epochs < 1 or request.repeats < 1:
        raise PlanError("epochs and repeats must be >= 1")
    tokens = grid_tokens(request.grids)
    worlds = resolve_worlds(request, tokens)
    request = replace(request, world_sizes=worlds)
    datasets = datasets_by_world(request)
    picks: dict[tuple[str, GridShape], list[str]] = {}
    for w in worlds:
        ds = datasets[w]
        for t in tokens:
            if isinstance(t, GridShape):
                grids, how = ([t] if t.world_size == w else []), "list"
            elif t == "all":
                grids, how = GridShape.factorizations(w), "all"
            else:
                grids, how = [auto_grid(ds, w)], "auto"
            for g in grids:
                picks.setdefault((ds, g), [])
                if how not in picks[(ds, g)]:
                    picks[(ds, g)].append(how)
    study = "weak" if request.weak else "strong"
    # repeats interleaved (every configuration once, then again): a change of the machine's load
    # during the sweep then hits every configuration alike
    return [PlannedRun(run_id(ds, g, r), ds, g, r, (study,), tuple(how))
            for r in range(request.repeats) for (ds, g), how in picks.items()]


def model_auto_grid(request: SweepRequest) -> Callable[[str, int], GridShape]:
    """``auto_grid`` for `plan_runs`: the grid `plexus.perfmodel.choose_grid` predicts fastest,
    from the dataset's sizes (loaded once per dataset), as ``plexus-train --grid auto`` does."""
    from plexus_datasets import gcn_nnz, load_dataset  # noqa: PLC0415
    from plexus_partition.model.model import DTYPE_BYTES, ModelConfig  # noqa: PLC0415
    from plexus.perfmodel import ModelSpec, choose_grid, pricing  # noqa: PLC0415
    from plexus.perfmodel import resolve_calibration  # noqa: PLC0415

    # as each run's plexus-train prices --grid auto: $PLEXUS_CALIBRATION, a local world per host
    calibration = resolve_calibration(environ=os.environ)

    sizes: dict[str, Sizes] = {}
    m = request.model
    config = ModelConfig(num_layers=m.layers, hidden=m.hidden, dropout=m.dropout, order=m.order)

    def pick(dataset: str, world: int) -> GridShape:
        if dataset not in sizes:
            g = load_dataset(dataset, request.root, seed=m.seed)
            sizes[dataset] = (g.num_nodes, gcn_nnz(g), g.num_features, g.num_classes)
        n, nnz, f, c = sizes[dataset]
        spec = ModelSpec(n, nnz, f, c, config, sparse_comm=m.sparse_comm,
                         comm_dtype_bytes=DTYPE_BYTES[m.comm_dtype])
        per_host, placement = pricing(calibration, world)
        return GridShape.of(choose_grid(world, spec, calibration, ranks_per_host=per_host,
                                        placement=placement))

    return pick
