"""What every task of the out-of-core partitioner (`plexus_partition.stream`) shares: the
job's description, the distinct blocks of the model plan, and where node-sized arrays and pieces
live in the work directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import layer_plans
from plexus_datasets.canonical import Pieces
from plexus_datasets.npyio import load_npy

from .permutations import Permutation
from .plan import block_key


class PartitionError(ValueError):
    """The partitioner cannot go on (bad configuration, damaged work directory); one line."""


class PartitionInterrupted(RuntimeError):
    """A worker process died (a signal, the OOM killer); the work directory is kept, so that
    running the same partition again resumes it."""


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class BlockSpec:
    """One distinct Â block of the model plan, cut into ``nr`` x ``nc`` blocks of rs x cs."""

    key: str
    index: int
    adj: int
    a_rows: str
    a_cols: str
    nr: int
    nc: int
    rs: int
    cs: int


@dataclass(frozen=True)
class Job:
    """Everything a task needs (picklable: tasks of a process pool receive it)."""

    work: str
    shape: tuple[tuple[str, int], ...]
    num_stages: int
    orders: tuple[str, ...]
    aggregation: str
    name: str
    n: int
    npad: int
    fpad: int
    num_features: int
    num_classes: int
    directed: bool
    blocks: tuple[BlockSpec, ...]
    pieces: Pieces
    source: Any
    bucket_entries: int
    feature_rows: int
    model: str | None = None  # the kind the store is cut for (None: Â and orders only)

    @property
    def grid(self) -> GridShape:
        return GridShape.of(dict(self.shape))

    @property
    def plans(self):
        return layer_plans(self.num_stages, list(self.orders))

    def path(self, *parts: str) -> Path:
        return Path(self.work, *parts)

    def node(self, name: str, mmap: bool = True) -> np.ndarray:
        """A node-sized array of the permutation step (memory-mapped by default)."""
        return load_npy(self.path("node", f"{name}.npy"), PartitionError, "biuf", mmap=mmap)

    @property
    def feature_groups(self) -> int:
        first = self.plans[0]
        return dict(self.shape)[first.in_rows] * dict(self.shape)[first.depth]

    @property
    def group_rows(self) -> int:
        return self.npad // self.feature_groups

    def feature_pieces(self, piece_rows: int) -> int:
        """Pieces of ``piece_rows`` rows in one feature row group."""
        return -(-self.group_rows // piece_rows)

    def feature_folder(self, group: int, piece: int) -> Path:
        """Where the route puts the feature rows of one piece of a row group, a file per chunk."""
        return self.path("feat", f"{group}-{piece}")

    def block_folder(self, spec: BlockSpec, r: int, c: int) -> Path:
        """Where the sort puts block (r, c) of ``spec``, a set of files per sub-bucket."""
        return self.path("pc", str(spec.index), f"{r}-{c}")

    def permutation(self, meta: Mapping[str, Any]) -> Permutation:
        return Permutation(meta["kind"], meta["seed"], self.node("p1"), self.node("p2"),
                           meta["locality"])


def block_specs(shape: Mapping[str, int], plans, npad: int) -> tuple[BlockSpec, ...]:
    """The distinct Â blocks of a plan, in the order the store lists them."""
    out: list[BlockSpec] = []
    for plan in plans:
        key = block_key(plan)
        if plan.dense or any(b.key == key for b in out):
            continue
        nr, nc = shape[plan.a_rows], shape[plan.a_cols]
        out.append(BlockSpec(key, len(out), plan.adj, plan.a_rows, plan.a_cols, nr, nc,
                             npad // nr, npad // nc))
    return tuple(out)


def index_dtype(limit: int) -> np.dtype:
    return np.dtype(np.int32) if limit < np.iinfo(np.int32).max else np.dtype(np.int64)


def pos_dtype(npad: int) -> np.dtype:
    return np.dtype(np.int32) if npad < 2**31 else np.dtype(np.int64)


def routed_adjs(job: Job, same: bool) -> list[int]:
    """The adjacencies whose non-zeros are routed and sorted (Â2 is Â1 when p1 == p2)."""
    adjs = sorted({s.adj for s in job.blocks})
    return adjs[:1] if same and adjs else adjs


def route_of(spec: BlockSpec, meta: Mapping[str, Any]) -> int:
    """The routed adjacency a block is cut from."""
    return meta["first_adj"] if meta["same"] else spec.adj


def row_order_index(adj: int) -> int:
    """Â1's rows are in p1 order, Â2's in p2 order (`plexus_partition.plan.row_order`)."""
    return 1 if adj == 1 else 2


def col_order_index(adj: int) -> int:
    return 2 if adj == 1 else 1
