"""What one rank of ``plexus-train`` does: get its shard, build grid/model/trainer, train, report.

Set-up runs in two phases. The first is local to the rank (load the dataset and cut this rank's
shard, or read its file from a shard store; read the checkpoint to resume from) and ends with an
agreement: every rank learns whether any rank failed, so a bad input on one rank ends the whole
job cleanly (one error line, exit status 2) instead of leaving the others waiting in a
collective. The second phase (grid, model, restoring the checkpoint) and training are collective.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from plexus.datasets import DatasetError, Graph, load_dataset
from plexus.partitioners import RankShard, ShardStoreError, read_manifest, read_shard, shard_graph
from plexus.partitioners.store import graph_hash

from . import checkpoint as ckpt
from .comm import Comm
from .config import EngineConfig, ModelConfig, TrainConfig
from .faults import Fault
from .grid import Grid
from .hostmem import enable_huge_pages
from .launch import (PEER_ERROR_GRACE_S, JobEnv, LaunchError, detect_environment,
                     die_with_launcher, init_process_group, is_peer_error)
from .ledger import Ledger
from .memcheck import MemoryCheckError, available_memory, check_memory, predicted_memory
from .model import DistributedGCN
from .runlog import BestRecord, JsonLog, RunLog, plural
from .schedule import AXES, grid_misfit, layer_plans
from .timing import Timers
from .trainer import EpochStats, Trainer

PROG = "plexus-train"
DEFAULT_PERM = "double"  # results do not depend on it; it balances the blocks of real graphs


class UsageError(ValueError):
    """Bad input found while setting up (a one-line message; exit status 2)."""


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite (a one-line message; exit status 1)."""


#: Exceptions that are the user's input, not a bug: reported as one line, exit status 2.
USER_ERRORS = (UsageError, DatasetError, ShardStoreError, ckpt.CheckpointError, LaunchError,
               MemoryCheckError)


@dataclass(frozen=True)
class RunOptions:
    """Everything a rank needs to know about the run (validated by `plexus.train`)."""

    grid: tuple[int, int, int] | None  # None: "auto", chosen by plexus.perfmodel
    dataset: str
    root: str | None
    model: ModelConfig
    train: TrainConfig
    engine: EngineConfig
    perm: str | None = None  # None: DEFAULT_PERM, or whatever the shard store was cut with
    shards: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 10
    resume: bool = False
    log_json: str | None = None
    quiet: bool = False
    timeout_s: float = 300.0
    check_memory: bool = True  # False: --force, or the launching process already checked
    fault: Fault | None = None  # --inject-fault (tests of failure handling)


def error_line(message: object) -> str:
    """``plexus-train: error: <message>`` on one line."""
    text = " ".join(str(message).split()) or "unknown error"
    return f"{PROG}: error: {text}"


def rank_coords(rank: int, dims: tuple[int, int, int]) -> dict[str, int]:
    """Grid coordinates of ``rank`` (rank = (x·Y + y)·Z + z, as `plexus.grid`)."""
    _, y, z = dims
    return {"x": rank // (y * z), "y": (rank // z) % y, "z": rank % z}


def auto_grid(world_size: int, num_nodes: int, nnz: int, num_features: int, num_classes: int,
              model: ModelConfig, name: str = "") -> tuple[int, int, int]:
    """The grid `plexus.perfmodel.choose_grid` predicts fastest for this graph and model."""
    try:
        from plexus.perfmodel import ModelSpec, choose_grid  # noqa: PLC0415
    except ImportError:
        raise UsageError("--grid auto needs plexus.perfmodel, which is not installed; "
                         "give --grid XxYxZ") from None
    spec = ModelSpec.from_config(num_nodes, nnz, num_features, num_classes, model, name=name)
    return tuple(choose_grid(world_size, spec))  # type: ignore[return-value]


def graph_nnz(graph: Graph) -> int:
    """Non-zeros of the GCN-normalized Â (one self loop per node), without building it."""
    self_loops = int((graph.adj.diagonal() != 0).sum())
    return int(graph.adj.nnz) - self_loops + graph.num_nodes


def check_world(dims: tuple[int, int, int], world: int) -> None:
    """Raise `UsageError` unless the grid has exactly ``world`` ranks."""
    if dims[0] * dims[1] * dims[2] != world:
        raise UsageError(f"grid {'x'.join(map(str, dims))} has {dims[0] * dims[1] * dims[2]} "
                         f"ranks but the job has {world}; make X·Y·Z equal the world size")


def check_grid_fits(dims: tuple[int, int, int], model: ModelConfig, num_nodes: int,
                    num_features: int, num_classes: int) -> None:
    """Raise `UsageError` when an axis has more ranks than the dimension it cuts (see
    `plexus.schedule.grid_misfit`)."""
    plans = layer_plans(model.num_layers, model.orders(num_features, num_classes))
    problem = grid_misfit(dict(zip(AXES, dims)), plans, num_nodes,
                          model.widths(num_features, num_classes))
    if problem:
        raise UsageError(problem)


def shard_bytes(shard: RankShard) -> int:
    """Bytes of the arrays a rank's shard holds (its Â blocks and features)."""
    total = shard.features.nbytes
    for blk in shard.blocks.values():
        total += blk.data.nbytes + blk.indices.nbytes + blk.indptr.nbytes
    return total


# ---- phase 1: local set-up ----------------------------------------------------------------
@dataclass
class LocalSetup:
    """What phase 1 produced on this rank."""

    dims: tuple[int, int, int]
    shard: RankShard
    dataset: ckpt.DatasetInfo
    resume_from: dict | None
    json_log: JsonLog | None = None  # rank 0 with --log-json


def check_writable(path: Path, what: str) -> None:
    """Raise `UsageError` unless files can be created in directory ``path`` (made if missing)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror or e})") from None


def check_log_path(path: str) -> None:
    """Raise `UsageError` unless the JSON log can be created at ``path``."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UsageError(f"--log-json {path}: is a directory; give a file name")
    check_writable(target.parent, "--log-json")


def open_json_log(path: str) -> JsonLog:
    """Open the JSON log's temporary file now, so a bad path is a set-up error."""
    check_log_path(path)
    try:
        return JsonLog(Path(path).expanduser())
    except OSError as e:
        raise UsageError(f"--log-json {path}: cannot write it ({e.strerror or e})") from None


def load_local(opts: RunOptions, rank: int, world: int, device: torch.device,
               local_ranks: int) -> LocalSetup:
    """This rank's shard (and checkpoint), with no communication. Raises `USER_ERRORS`."""
    model = opts.model
    if opts.shards:
        manifest = read_manifest(opts.shards)
        dims = opts.grid or tuple(int(manifest["grid"][a]) for a in AXES)  # type: ignore
        check_world(dims, world)  # type: ignore[arg-type]
        orders = model.orders(int(manifest["num_features"]), int(manifest["num_classes"]))
        shard = read_shard(opts.shards, dict(zip(AXES, dims)), rank_coords(rank, dims),
                           model.num_layers, orders=orders, perm=opts.perm)
        nnz, sha256 = int(manifest["nnz"]), str(manifest["graph_sha256"])
    else:
        graph = load_dataset(opts.dataset, opts.root, seed=opts.train.seed)
        dims = opts.grid or auto_grid(world, graph.num_nodes, graph_nnz(graph),
                                      graph.num_features, graph.num_classes, model, graph.name)
        check_world(dims, world)
        check_grid_fits(dims, model, graph.num_nodes, graph.num_features, graph.num_classes)
        orders = model.orders(graph.num_features, graph.num_classes)
        # the content hash identifies the graph in checkpoints; hashing a big graph takes time
        sha256 = graph_hash(graph) if opts.checkpoint else ""
        nnz = graph_nnz(graph)
        shard = shard_graph(graph, dict(zip(AXES, dims)), rank_coords(rank, dims),
                            model.num_layers, orders, opts.perm or DEFAULT_PERM,
                            seed=opts.train.seed)
        del graph
    if opts.check_memory:
        predicted = predicted_memory(dims, model, shard.num_nodes, nnz,  # type: ignore[arg-type]
                                     shard.num_features, shard.num_classes, shard.perm)
        if device.type == "cpu":  # the shard already sits in host memory: count the rest
            predicted -= shard_bytes(shard)
        check_memory(predicted, available_memory(device, local_ranks), dims)  # type: ignore
    info = ckpt.DatasetInfo(shard.name, shard.num_nodes, shard.num_features, shard.num_classes,
                            sha256)
    resume_from = (load_resume(opts.checkpoint, model, opts.train.epochs, info)  # type: ignore
                   if opts.resume else None)
    json_log = None
    if rank == 0:  # rank 0 writes the outputs: check them before anything runs
        if opts.checkpoint:
            check_writable(Path(opts.checkpoint).expanduser(), "--checkpoint")
        if opts.log_json:
            json_log = open_json_log(opts.log_json)
    return LocalSetup(tuple(dims), shard, info, resume_from, json_log)  # type: ignore[arg-type]


def load_resume(checkpoint: str, model: ModelConfig, epochs: int,
                dataset: ckpt.DatasetInfo | None) -> dict:
    """The checkpoint in directory ``checkpoint`` to resume from, checked against the model,
    --epochs and (when known) the dataset. Raises `ckpt.CheckpointError`."""
    payload = ckpt.load_checkpoint(checkpoint)
    where = str(ckpt.checkpoint_path(checkpoint))
    ckpt.check_model(payload, model, where)
    ckpt.check_epochs(payload, epochs, where)
    if dataset is not None:
        ckpt.check_dataset(payload, dataset, where)
    return payload


def agree_on_failure(error: BaseException | None, device: torch.device) -> int:
    """Collective: 0 if no rank failed; otherwise 2 for a user error anywhere, else 1.

    One rank reports (one line for a user error, the traceback for a bug), so a failure shows
    once, not once per rank.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
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


# ---- phase 2: collective set-up -----------------------------------------------------------
@dataclass
class Run:
    """One rank's training run after set-up."""

    opts: RunOptions
    grid: Grid
    comm: Comm
    model: DistributedGCN
    trainer: Trainer
    shard: RankShard
    dataset: ckpt.DatasetInfo
    best: BestRecord
    log: RunLog | None  # rank 0 only
    saved_epoch: int | None = None  # the epoch of the newest checkpoint on disk

    def check_finite(self, stats: EpochStats) -> None:
        """Raise `TrainingDiverged` on a NaN/Inf loss (every rank sees the same reduced loss, so
        every rank stops at the same epoch and none waits in a collective)."""
        if math.isfinite(stats.loss):
            return
        if self.opts.checkpoint and self.saved_epoch is not None:
            last = (f"last good checkpoint: {ckpt.checkpoint_path(self.opts.checkpoint)} "
                    f"(epoch {self.saved_epoch}); resume from it with a lower --lr")
        else:
            last = "no checkpoint was written (--checkpoint DIR keeps one to resume from)"
        raise TrainingDiverged(f"loss is {stats.loss} at epoch {stats.epoch}; stopped; {last}")

    def save_checkpoint(self) -> None:
        """Collective: assemble the full state; rank 0 writes it."""
        state = self.trainer.full_state()
        if self.grid.rank == 0:
            payload = ckpt.make_checkpoint(state, self.opts.model, self.opts.train, self.dataset,
                                           {"best": self.best.as_dict(),
                                            "grid": str(self.grid)})
            ckpt.save_checkpoint(self.opts.checkpoint, payload)  # type: ignore[arg-type]
        self.saved_epoch = self.trainer.epoch

    def on_epoch(self, stats: EpochStats) -> None:
        """After every epoch: stop on divergence, track the best validation epoch, report,
        checkpoint."""
        self.check_finite(stats)
        self.best.update(stats)
        if self.log is not None:
            self.log.epoch(stats)
        if self.opts.checkpoint and (stats.epoch % self.opts.checkpoint_every == 0
                                     or stats.epoch == self.opts.train.epochs):
            self.save_checkpoint()
        if self.opts.fault is not None:
            self.opts.fault.maybe_fire(self.grid.rank, stats.epoch)


def build_run(opts: RunOptions, setup: LocalSetup, device: torch.device) -> Run:
    """Collective set-up: grid, model, trainer, restored checkpoint, rank 0's reporter."""
    grid = Grid.create(setup.dims, device)
    comm = Comm(grid, Ledger(), Timers(device, enabled=opts.engine.timers))
    model = DistributedGCN(comm, setup.shard, opts.model, opts.train.seed, opts.engine)
    trainer = Trainer(model, opts.train)
    best = BestRecord()
    if setup.resume_from is not None:
        trainer.load_full_state(setup.resume_from["state"])
        best = BestRecord.from_dict(ckpt.extra(setup.resume_from).get("best"))
    log = None
    if grid.rank == 0:
        log = RunLog(opts.train.epochs, trainer.epoch, opts.quiet, setup.json_log)
        log.message(f"{PROG}: {setup.dataset.describe()} on grid {grid} "
                    f"({plural(grid.world_size, 'rank')}, {device.type}), "
                    f"{plural(opts.model.num_layers, 'layer')}, orders "
                    f"{','.join(setup.shard.orders)}, permutation {setup.shard.perm}")
        if setup.resume_from is not None:
            log.message(f"{PROG}: resumed from {ckpt.checkpoint_path(opts.checkpoint)} at epoch "
                        f"{trainer.epoch}")  # type: ignore[arg-type]
    saved = ckpt.saved_epoch(setup.resume_from) if setup.resume_from is not None else None
    return Run(opts, grid, comm, model, trainer, setup.shard, setup.dataset, best, log, saved)


# ---- the end of the run -------------------------------------------------------------------
def reduce_timers(timers: Timers, device: torch.device) -> dict[str, dict[str, float]]:
    """Per timer name: max and mean seconds over all ranks (collective)."""
    names: list[list[str]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(names, sorted(timers.seconds))
    union = sorted(set().union(*names))
    if not union:
        return {}
    values = torch.tensor([timers.seconds.get(n, 0.0) for n in union], dtype=torch.float64,
                          device=device)
    mx, total = values.clone(), values.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    world = dist.get_world_size()
    return {n: {"max": float(a), "mean": float(b) / world}
            for n, a, b in zip(union, mx.tolist(), total.tolist())}


def reduce_ledger(ledger: Ledger,
                  device: torch.device) -> tuple[dict[str, float], dict[str, float]]:
    """Bytes moved per axis: summed over all ranks, and the largest single rank (collective)."""
    per_axis = ledger.per_axis("bytes")
    values = torch.tensor([per_axis[a] for a in AXES], dtype=torch.float64, device=device)
    mx, total = values.clone(), values.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return dict(zip(AXES, total.tolist())), dict(zip(AXES, mx.tolist()))


@torch.no_grad()
def gather_predictions(run: Run) -> dict[str, np.ndarray] | None:
    """Global predicted class, label and test mask of every node, on rank 0 (None elsewhere).

    Predictions are complete on every rank of the class axis and replicated over the third axis,
    so only the ranks at coordinate 0 of both send their rows: together they cover every node
    exactly once. Rank 0 receives them one by one (memory O(N) on rank 0 only).
    """
    model, grid = run.model, run.grid
    model.eval()
    pred = model.predict(model())
    last = model.plans[-1]
    rows = torch.stack([torch.from_numpy(run.shard.output_ids).to(pred.device), pred,
                        model.labels, model.masks["test"].to(torch.int64)])
    senders = [r for r in range(grid.world_size)
               if rank_coords(r, grid.dims)[last.out_cols] == 0
               and rank_coords(r, grid.dims)[last.out_replicated] == 0]
    if grid.rank != 0:
        if grid.rank in senders:
            dist.send(rows.contiguous(), dst=0)
        return None
    n = run.shard.num_nodes
    out = {"pred": np.full(n, -1, np.int64), "label": np.full(n, -1, np.int64),
           "test": np.zeros(n, bool)}
    for src in senders:
        if src != 0:
            dist.recv(rows, src=src)
        ids, p, y, t = rows.cpu().numpy()
        real = ids >= 0
        out["pred"][ids[real]], out["label"][ids[real]] = p[real], y[real]
        out["test"][ids[real]] = t[real].astype(bool)
    return out


def ogb_metric(name: str, gathered: dict[str, np.ndarray]) -> dict | None:
    """The official OGB evaluator's test metric for ``name`` (None if it has no accuracy)."""
    from ogb.nodeproppred import Evaluator  # noqa: PLC0415 (only for OGB datasets)

    evaluator = Evaluator(name)
    if evaluator.eval_metric != "acc":
        return None
    test = gathered["test"]
    result = evaluator.eval({"y_true": gathered["label"][test].reshape(-1, 1),
                             "y_pred": gathered["pred"][test].reshape(-1, 1)})
    return {"name": name, "metric": "acc", "value": float(result["acc"])}


def finish(run: Run, history: list[EpochStats], train_time_s: float) -> None:
    """Collective: final evaluation if needed, timers, ledger, OGB metric; rank 0 reports."""
    trainer = run.trainer
    final = history[-1].as_dict() if history else {"epoch": trainer.epoch}
    if final.get("test_acc") is None:  # never evaluated at the end (eval_every 0, or resumed at N)
        acc = trainer.evaluate()
        final.update(train_acc=acc["train"], val_acc=acc["val"], test_acc=acc["test"])
    if run.best.epoch is None:
        run.best = BestRecord(trainer.epoch, final["val_acc"], final["test_acc"],
                              final["train_acc"])
    timers = reduce_timers(run.comm.timers, run.grid.device)
    comm_total, comm_max = reduce_ledger(run.comm.ledger, run.grid.device)
    ogb = None
    if run.dataset.name.startswith("ogbn-"):
        gathered = gather_predictions(run)
        if gathered is not None:
            ogb = ogb_metric(run.dataset.name, gathered)
    if run.log is None:
        return
    epoch_times = [s.epoch_time_s for s in history]
    summary = {
        "dataset": run.dataset.name, "grid": str(run.grid), "world_size": run.grid.world_size,
        "epochs": trainer.epoch, "epochs_run": len(history),
        "best_epoch": run.best.epoch, "best_val_acc": run.best.val_acc,
        "best_test_acc": run.best.test_acc,
        "final": {k: final.get(k) for k in ("epoch", "loss", "train_acc", "val_acc", "test_acc")},
        "train_time_s": train_time_s,
        "mean_epoch_time_s": float(np.mean(epoch_times)) if epoch_times else 0.0,
        "comm_bytes": comm_total, "comm_bytes_max_rank": comm_max,
        "comm_ledger": run.comm.ledger.summary(),  # rank 0's collectives by axis and operation
        "timers": timers,
        "ogb": ogb,
        "model": {"layers": run.opts.model.num_layers, "hidden": run.opts.model.hidden,
                  "orders": list(run.shard.orders), "perm": run.shard.perm},
    }
    run.log.finish(summary)


# ---- entry points -------------------------------------------------------------------------
def run_rank(opts: RunOptions, env: JobEnv) -> int:
    """Everything one rank does, from joining the job to the summary; returns the exit status."""
    if opts.engine.huge_pages:
        enable_huge_pages()  # before this process's first CPU tensor
    try:
        device = init_process_group(env, opts.timeout_s)
    except LaunchError as e:  # e.g. a local rank without a GPU: the same on every such rank
        print(error_line(f"rank {env.rank}: {e}"), file=sys.stderr, flush=True)
        return 2
    error: BaseException | None = None
    setup = None
    try:
        setup = load_local(opts, dist.get_rank(), dist.get_world_size(), device,
                           env.local_world_size)
    except Exception as e:  # noqa: BLE001 — every rank must learn of it, see agree_on_failure
        error = e
    code = agree_on_failure(error, device)
    if code:
        if setup is not None and setup.json_log is not None:
            setup.json_log.discard()
        dist.destroy_process_group()
        return code
    assert setup is not None
    run = build_run(opts, setup, device)
    try:
        start = time.perf_counter()
        history = run.trainer.fit(callback=run.on_epoch)
        finish(run, history, time.perf_counter() - start)
    except TrainingDiverged as e:  # on every rank at the same epoch: a clean stop, one line
        if run.log is not None:
            run.log.abandon()
            print(error_line(e), file=sys.stderr, flush=True)
        dist.destroy_process_group()
        return 1
    except BaseException as e:
        # Other ranks may be waiting in a collective: leave without tearing the group down; the
        # launcher ends them when this process exits with an error.
        if run.log is not None:
            run.log.abandon()
        if is_peer_error(e):  # let the launcher see the peer's failure first: it is the cause
            time.sleep(PEER_ERROR_GRACE_S)
        raise
    dist.destroy_process_group()
    return 0


def local_worker(opts: RunOptions) -> int:
    """Entry point of a worker started by `plexus.launch.launch_local` (torchrun-style env)."""
    die_with_launcher()
    env = detect_environment()
    if env is None:
        raise LaunchError("worker started without RANK/WORLD_SIZE in its environment")
    return run_rank(opts, env)


