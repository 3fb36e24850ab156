"""Phase 1 of a rank's set-up: everything local, with no communication, then an agreement.

A rank loads the dataset and cuts its shard (or reads its file from a shard store) and reads the
checkpoint to resume from. Then every rank learns whether any rank failed (`agree_on_failure`),
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

from plexus.core.atomic import UnsafeTargetError
from plexus.core.grid import GridShape
from plexus.core.layout import DEFAULT_PERMUTATION
from plexus.datasets import gcn_nnz, load_dataset
from plexus.api.training import TrainConfig
from plexus.core.model import ModelConfig
from plexus.api import cut_shard
from plexus.partitioners import RankShard, read_manifest, read_shard
from plexus.partitioners.plan import symmetric
from plexus.partitioners.store import graph_hash
from plexus.perfmodel import load_calibration

from . import checkpoint as ckpt
from .cache import PeerSetupFailed
from .checks import (auto_grid_choice, check_checkpoint_dir, check_grid_fits, check_log_path,
                     check_output_file, check_outputs_dir, shard_bytes)
from .epochlogs import EpochSink, open_sinks
from .errors import PROG, USER_ERRORS, OutputFailed, UsageError, error_line
from plexus.api.memcheck import available_memory, check_memory, predicted_peaks
from .options import RunOptions
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

    def release(self) -> None:
        """Let another run use the checkpoint directory (at the end of the run, on any path)."""
        if self.checkpoint_lock is not None:
            self.checkpoint_lock.release()
            self.checkpoint_lock = None


def open_json_log(path: str, resume: int | None = None) -> JsonLog:
    """Open the JSON log's temporary file now, so a bad path is a set-up error (``resume``: the
    epoch a resumed run starts after; the earlier log's epochs up to it are kept)."""
    check_log_path(path)
    try:
        return JsonLog(Path(path).expanduser(), resume)
    except UnsafeTargetError as e:  # the path changed since it was checked
        raise UsageError(f"--log-json {e}") from None
    except (OSError, OutputFailed) as e:
        raise UsageError(f"--log-json {path}: cannot write it "
                         f"({getattr(e, 'strerror', None) or e})") from None


def load_local(opts: RunOptions, rank: int, world: int, device: torch.device,
               local_ranks: int) -> LocalSetup:
    """This rank's shard (and checkpoint), with no communication. Raises `USER_ERRORS`."""
    model = opts.model
    if opts.shards:
        manifest = read_manifest(opts.shards)
        grid = opts.grid or GridShape.of(manifest["grid"])
        grid.check_world(world)
        orders = model.orders(int(manifest["num_features"]), int(manifest["num_classes"]))
        # A cached store was found complete by the launcher (manifest, every file's size) and
        # every member's CRC-32 is checked as it is read: its sha256 pass, a second full read
        # of the file on every rank, is for stores brought from elsewhere (--shards).
        shard = read_shard(opts.shards, rank, shape=grid, num_layers=model.num_stages,
                           orders=orders, perm=opts.perm, verify=opts.cache is None)
        nnz, sha256 = int(manifest["nnz"]), str(manifest["graph_sha256"])
    else:
        graph = load_dataset(opts.dataset, opts.root, seed=opts.train.seed)
        if opts.symmetrize:
            graph = graph.to_undirected()
        nnz = gcn_nnz(graph)
        grid = opts.grid
        if grid is None:  # --grid auto under a launcher: every rank computes the same choice
            grid, why = auto_grid_choice(
                world, graph.num_nodes, nnz, graph.num_features, graph.num_classes, model,
                graph.name, calibration=load_calibration(opts.calibration),
                ranks_per_host=local_ranks, perm=opts.perm or DEFAULT_PERMUTATION,
                dtype_bytes=opts.engine.dtype_bytes, recompute=opts.engine.recompute,
                multilabel=graph.multilabel, symmetric=symmetric(graph, model.aggregation))
            if rank == 0 and not opts.quiet:
                print(f"{PROG}: {why}", flush=True)
        grid.check_world(world)
        check_grid_fits(grid, model, graph.num_nodes, graph.num_features, graph.num_classes)
        # the content hash identifies the graph in checkpoints; hashing a big graph takes time
        sha256 = graph_hash(graph) if opts.checkpoint else ""
        shard = cut_shard(graph, grid, grid.coords(rank), model, opts.perm or DEFAULT_PERMUTATION,
                          opts.train.seed)
        del graph
    sizes = (grid, model, shard.num_nodes, nnz, shard.num_features, shard.num_classes,
             shard.perm, opts.engine.dtype_bytes)
    # the task kind and whether a block's transpose is another block: as the engine builds them
    kind = {"from_store": bool(opts.shards), "recompute": opts.engine.recompute,
            "multilabel": shard.multilabel, "symmetric": bool(shard.meta.get("symmetric")),
            "device": device.type}
    peaks = predicted_peaks(*sizes, **kind)
    own = predicted_peaks(*sizes, **kind, coords=grid.coords(rank))  # this rank's, for the report
    if opts.check_memory:  # set-up is behind this rank now: what training needs
        predicted = peaks.training
        if device.type == "cpu":  # the shard already sits in host memory: count the rest
            predicted -= shard_bytes(shard)
        check_memory(predicted, available_memory(device, local_ranks), grid)
    info = ckpt.DatasetInfo(shard.name, shard.num_nodes, shard.num_features, shard.num_classes,
                            sha256)
    resume_from = (load_resume(opts.checkpoint, model, opts.train.epochs, info,  # type: ignore
                               opts.train.seed, opts.train) if opts.resume else None)
    if resume_from is not None and opts.export_best:
        check_best_kept(resume_from, str(ckpt.checkpoint_path(opts.checkpoint)))  # type: ignore
    json_log = lock = None
    sinks: list[EpochSink] = []
    if rank == 0:  # rank 0 writes the outputs: check them before anything runs
        if opts.checkpoint:
            check_checkpoint_dir(opts.checkpoint)
        if opts.save_predictions:
            check_outputs_dir(opts.save_predictions, "--save-predictions")
        if opts.export:
            check_output_file(opts.export, "--export")
        resumed = ckpt.saved_epoch(resume_from) if resume_from is not None else None
        if opts.log_json:
            json_log = open_json_log(opts.log_json, resumed)
        try:
            sinks = open_sinks(opts.log_csv, opts.tensorboard,
                               lambda text: print(f"{PROG}: note: {text}", file=sys.stderr,
                                                  flush=True), resumed)
        except UsageError:
            if json_log is not None:
                json_log.discard()
            raise
        if opts.checkpoint:  # last: nothing after it may fail and leave the lock held
            try:
                lock = ckpt.lock_directory(Path(opts.checkpoint).expanduser())
            except ckpt.CheckpointError:
                if json_log is not None:
                    json_log.discard()
                raise
    return LocalSetup(grid, shard, info, resume_from, json_log, sinks, lock, peaks.training,
                      peaks.setup, own.training, own.setup)


def load_resume(checkpoint: str, model: ModelConfig, epochs: int,
                dataset: ckpt.DatasetInfo | None, seed: int = 0,
                train: TrainConfig | None = None) -> dict:
    """The checkpoint in directory ``checkpoint`` to resume from, checked against the model,
    --epochs, --seed, the optimizer and schedule of ``train`` (when given) and (when known) the
    dataset. Raises `ckpt.CheckpointError`."""
    payload = ckpt.load_checkpoint(checkpoint)
    where = str(ckpt.checkpoint_path(checkpoint))
    ckpt.check_model(payload, model, where)
    ckpt.check_epochs(payload, epochs, where)
    ckpt.check_seed(payload, seed, where)
    if train is not None:
        ckpt.check_loop(payload, train, where)
    if dataset is not None:
        ckpt.check_dataset(payload, dataset, where)
    ckpt.check_state(payload, model, where)
    return payload


def check_best_kept(payload: dict, where: str) -> None:
    """--export-best after a resume needs the best epoch's weights in the checkpoint (written by
    runs with --export-best or on an OGB dataset) unless no epoch was evaluated yet."""
    extra = ckpt.extra(payload)
    best = extra.get("best") or {}
    if best.get("epoch") is not None and "best_params" not in extra:
        raise UsageError(f"--export-best: {where} does not hold the weights of its best "
                         f"validation epoch {best['epoch']} (it was written without "
                         "--export-best); resume without --export-best, or start afresh")


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
