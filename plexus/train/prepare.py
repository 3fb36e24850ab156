"""Phase 1 of a rank's set-up: everything local, with no communication, then an agreement.

A rank loads the dataset and cuts its shard (or reads its file from a shard store), checks it
against the resolved run (`plexus.train.plan.ResolvedRun`: the grid and the graph's sizes are
the plan's, never chosen here) and reads the checkpoint to resume from. Then every rank learns whether any rank failed (`agree_on_failure`),
so a bad input on one rank ends the whole job cleanly (one error line, exit status 2) instead of
leaving the others waiting in a collective.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from plexus_datasets.base.atomic import UnsafeTargetError
from plexus_partition.model.grid import GridShape
from plexus_datasets import Graph, gcn_nnz
from plexus_datasets.trainable import check_trainable
from plexus.api import cut_shard
from plexus_partition import RankShard, read_manifest, read_shard
from plexus_partition.store import graph_hash

from .placing import grid_rank
from . import checkpoint as ckpt
from .fromrank0 import PeerSetupFailed
from .cachekeys import Source
from .checkpoint import load_resume
from .checks import needs_validation_flag
from .epochlogs import EpochSink, open_sinks
from .errors import PROG, USER_ERRORS, OutputFailed, UsageError, error_line
from .plan import ResolvedRun, rank_peaks
from .runlog import JsonLog


@dataclass
class LocalSetup:
    """What phase 1 produced on this rank."""

    grid: GridShape
    shard: RankShard
    dataset: ckpt.DatasetInfo
    resume_from: dict | None
    json_log: JsonLog | None = None  # rank 0 with --log-json
    sinks: list[EpochSink] = field(default_factory=list)  # rank 0: --log-csv, --tensorboard
    checkpoint_lock: ckpt.DirectoryLock | None = None  # rank 0 with --checkpoint: held to the end
    predicted_bytes: float = 0.0  # the performance model's training peak per rank (whole rank)
    predicted_setup_bytes: float = 0.0  # ... and its set-up peak (`plexus.perfmodel.setup`)
    predicted_rank_bytes: float = 0.0  # the same two for this rank's own coordinates
    predicted_rank_setup_bytes: float = 0.0
    local_ranks: int = 1  # the job's ranks on this machine (they share its cores)

    def release(self) -> None:
        """Let another run use the checkpoint directory (at the end of the run, on any path)."""
        if self.checkpoint_lock is not None:
            self.checkpoint_lock.release()
            self.checkpoint_lock = None


def open_json_log(path: str, resume: int | None = None) -> JsonLog:
    """Open the JSON log's temporary file now, so a bad path is a set-up error (``resume``: the
    epoch a resumed run starts after; the earlier log's epochs up to it are kept); the path was
    checked with the run's other outputs (`check_output_paths`)."""
    try:
        return JsonLog(Path(path).expanduser(), resume)
    except UnsafeTargetError as e:  # the path changed since it was checked
        raise UsageError(f"--log-json {e}") from None
    except (OSError, OutputFailed) as e:
        raise UsageError(f"--log-json {path}: cannot write it "
                         f"({getattr(e, 'strerror', None) or e})") from None


def load_local(plan: ResolvedRun, rank: int, world: int, device: torch.device,
               local_ranks: int, graph: Graph | None = None, cached: bool = False) -> LocalSetup:
    """This rank's shard (and checkpoint), with no communication, checked against the plan
    (``graph``: the whole graph where resolving the run loaded it on this rank; ``cached``:
    the plan's store is the cache's, found complete). Raises `USER_ERRORS`."""
    plan.grid.check_world(world)
    rank = grid_rank(plan.engine, plan.grid, rank)  # the shard of this process's grid rank
    shard, nnz, sha256 = load_shard(plan, rank, graph, cached)
    check_shard(plan, shard)
    # a store or a big graph was not seen by the launching process: the same check on each rank
    check_trainable(shard.name, shard.mask_counts, shard.num_classes, shard.labels.ndim == 2,
                    needs_validation_flag(plan.train))
    peaks, own = rank_peaks(plan, shard, nnz, device, local_ranks, plan.grid.coords(rank))
    info = ckpt.DatasetInfo(shard.name, shard.num_nodes, shard.num_features, shard.num_classes,
                            sha256)
    resume_from = load_resume(plan, info) if plan.resume else None
    json_log = lock = None
    sinks: list[EpochSink] = []
    if rank == 0:  # rank 0 writes the outputs
        json_log, sinks, lock = open_outputs(plan, resume_from)
    return LocalSetup(plan.grid, shard, info, resume_from, json_log, sinks, lock,
                      peaks.training, peaks.setup, own.training, own.setup, local_ranks)


def load_shard(plan: ResolvedRun, rank: int, graph: Graph | None = None,
               cached: bool = False) -> tuple[RankShard, int, str]:
    """This rank's shard on the plan's grid, the graph's nnz of Â and content hash ('' where no
    checkpoint needs it): read from the plan's store, or cut from the whole graph (``graph``,
    else loaded here)."""
    model, grid = plan.model, plan.grid
    if plan.shards:
        manifest = read_manifest(plan.shards)
        orders = model.orders(plan.sizes.num_features, plan.sizes.num_classes)
        # A cached store was found complete by the launcher (manifest, every file's size) and
        # every member's CRC-32 is checked as it is read: its sha256 pass, a second full read
        # of the file on every rank, is for stores brought from elsewhere (--shards).
        shard = read_shard(plan.shards, rank, shape=grid, num_stages=model.num_stages,
                           orders=orders, perm=plan.perm, verify=not cached)
        return shard, int(manifest["nnz"]), str(manifest["graph_sha256"])
    if graph is None:
        graph = Source.of_run(plan).load()
    # the content hash identifies the graph in checkpoints; hashing a big graph takes time
    sha256 = graph_hash(graph) if plan.checkpoint else ""
    shard = cut_shard(graph, grid, grid.coords(rank), model, plan.perm, plan.train.seed)
    return shard, gcn_nnz(graph), sha256


def check_shard(plan: ResolvedRun, shard: RankShard) -> None:
    """Raise `UsageError` unless ``shard`` is of the graph ``plan`` was resolved for (a store
    or a dataset changed on disk since, or another seed's graph)."""
    sizes = plan.sizes
    held = (shard.num_nodes, shard.num_features, shard.num_classes)
    if held != (sizes.num_nodes, sizes.num_features, sizes.num_classes):
        where = plan.shards or plan.dataset
        raise UsageError(f"{where}: this rank's shard is of a graph of {held[0]} nodes, "
                         f"{held[1]} features and {held[2]} classes, but the run was resolved "
                         f"for {sizes.num_nodes}, {sizes.num_features} and "
                         f"{sizes.num_classes}; it changed since: run again")


def open_outputs(plan: ResolvedRun, resume_from: dict | None
                 ) -> tuple[JsonLog | None, list[EpochSink], ckpt.DirectoryLock | None]:
    """Rank 0's outputs (checked when the run was resolved), opened before anything runs: the
    JSON log, the CSV and TensorBoard sinks, and the checkpoint directory's lock."""
    resumed = ckpt.saved_epoch(resume_from) if resume_from is not None else None
    json_log = open_json_log(plan.log_json, resumed) if plan.log_json else None
    try:
        sinks = open_sinks(plan.log_csv, plan.tensorboard,
                           lambda text: print(f"{PROG}: note: {text}", file=sys.stderr,
                                              flush=True), resumed)
    except UsageError:
        if json_log is not None:
            json_log.discard()
        raise
    lock = None
    if plan.checkpoint:  # last: nothing after it may fail and leave the lock held
        try:
            lock = ckpt.lock_directory(Path(plan.checkpoint).expanduser())
        except ckpt.CheckpointError:
            if json_log is not None:
                json_log.discard()
            raise
    return json_log, sinks, lock


def agree_on_failure(error: BaseException | None, device: torch.device) -> int:
    """Collective: 0 if no rank failed; otherwise 2 for a user error anywhere, else 1.

    One rank reports (one line for a user error, the traceback for a bug), so a failure shows
    once, not once per rank.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if isinstance(error, PeerSetupFailed):  # rank 0 failed first and reports its own error
        error = None
    code = 0 if error is None else (2 if isinstance(error, USER_ERRORS) else 1)
    worst = torch.tensor([code], dtype=torch.int64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if int(worst) == 0:
        return 0
    # The lowest rank with the worst failure reports it (user errors outrank bugs: they say what
    # to fix).
    first = torch.tensor([rank if code == int(worst) else world], dtype=torch.int64,
                         device=device)
    dist.all_reduce(first, op=dist.ReduceOp.MIN)
    if int(first) == rank and error is not None:
        if code == 1:
            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        print(error_line(error if code == 2 else f"rank {rank} failed: "
                         f"{type(error).__name__}: {error}"), file=sys.stderr, flush=True)
    return int(worst)
