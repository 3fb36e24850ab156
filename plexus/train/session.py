"""Phase 2 of a rank's set-up (collective: the grid, the model, the restored checkpoint) and
what happens after every epoch (divergence stop, best-validation record, log, checkpoint)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from plexus.api import GraphModel, model_from_shard
from plexus_datasets.base.atomic import UnsafeTargetError
from plexus.core.units import format_bytes
from plexus.api.training import DEFAULT_DTYPE, Comm, EpochStats, Grid, Trainer
from plexus_datasets.spec import feature_mode
from plexus_partition import RankShard, read_manifest, store_split
from plexus_partition.model.model import DEFAULT_ACTIVATION, ModelConfig
from plexus_partition.launch.env import THREADS_ENV, available_cores, env_threads
from plexus.runtime.progress import start_beacon
from plexus.runtime.memstats import (TensorTracker, peak_rss_bytes, reset_peak_rss,
                                     resident_storages)

from . import checkpoint as ckpt
from .errors import PROG, OutputFailed, TrainingDiverged, output_failure
from .jobfacts import JobFacts
from .plan import ResolvedRun
from .prepare import LocalSetup
from .results import BestWeights, needs_best_weights
from .runlog import BestRecord, RunLog, plural, precisions


@dataclass
class Run:
    """One rank's training run after set-up."""

    plan: ResolvedRun
    facts: JobFacts  # what the launch handed beside the run
    grid: Grid
    comm: Comm
    model: GraphModel
    trainer: Trainer
    shard: RankShard
    dataset: ckpt.DatasetInfo
    best: BestRecord
    log: RunLog | None  # rank 0 only
    saved_epoch: int | None = None  # the epoch of the newest checkpoint on disk
    resumed_epoch: int | None = None  # the epoch of the checkpoint this run resumed from
    best_weights: BestWeights | None = None  # kept when --export-best or the OGB metric needs them
    predicted_bytes: float = 0.0  # the performance model's training peak per rank
    predicted_setup_bytes: float = 0.0  # ... and its set-up peak
    tracker: TensorTracker | None = None  # tensor bytes of training (CPU runs)
    setup_peak_rss: int = 0  # peak RSS of loading and set-up, before training
    pending: OutputFailed | None = None  # rank 0: an output it could not write, not yet agreed
    # the timers' totals after this run's first epoch: the report leaves that warm-up epoch out
    timers_after_first: dict[str, float] | None = None
    # the model's training and set-up peaks for this rank's own coordinates (its blocks)
    predicted_rank_bytes: float = 0.0
    predicted_rank_setup_bytes: float = 0.0

    def check_finite(self, stats: EpochStats) -> None:
        """Raise `TrainingDiverged` on a NaN/Inf loss (every rank sees the same reduced loss, so
        every rank stops at the same epoch and none waits in a collective)."""
        if math.isfinite(stats.loss):
            return
        raise TrainingDiverged(f"loss is {stats.loss} at epoch {stats.epoch}; stopped; "
                               f"{self._last_good(stats.epoch)}")

    def _last_good(self, epoch: int) -> str:
        """What a stop at ``epoch`` leaves to resume from: every checkpoint this run wrote held
        a finite state (`agree` runs before each), and so did the one it resumed from
        (`plexus.train.checkpoint.check_state`), unless that one diverges at once."""
        if (self.saved_epoch is not None and self.saved_epoch == self.resumed_epoch
                and epoch == self.resumed_epoch + 1):
            # the state resumed from diverges at once: it is not a good checkpoint
            last = (f"the checkpoint resumed from, {ckpt.checkpoint_path(self.plan.checkpoint)} "
                    f"(epoch {self.resumed_epoch}), gives it at once: no good checkpoint to "
                    "resume from")  # type: ignore[arg-type]
        elif self.plan.checkpoint and self.saved_epoch is not None:
            last = (f"last good checkpoint: {ckpt.checkpoint_path(self.plan.checkpoint)} "
                    f"(epoch {self.saved_epoch}); resume from it with a lower --lr")
        else:
            last = "no checkpoint was written (--checkpoint DIR keeps one to resume from)"
        return last

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """This rank's shards of every parameter, running statistic and optimizer moment, by
        name."""
        out = dict(self.model.named_tensors())
        for name, p in self.trainer.params.items():
            for moment, value in self.trainer.opt.state.get(p, {}).items():
                if moment != "step" and isinstance(value, torch.Tensor):
                    out[f"{name} Adam {moment}"] = value
        return out

    def agree(self, stats: EpochStats | None) -> None:
        """Collective (one all-reduce): after epoch ``stats`` (None: at the end of training),
        every rank learns whether any rank's state holds NaN/Inf after the optimizer step, and
        whether rank 0 failed to write an output; all stop together (`TrainingDiverged`,
        `OutputFailed`) before anything more is written. Nothing non-finite reaches a
        checkpoint: this runs before every save."""
        tensors = self._state_tensors() if stats is not None else {}
        names = sorted(tensors)
        pending = torch.tensor([self.pending is not None], device=self.grid.device)
        flags = torch.cat([torch.stack([~torch.isfinite(tensors[n]).all() for n in names]),
                           pending]) if names else pending
        flags = flags.to(torch.int64)  # one tensor: a single device sync, a single all-reduce
        if self.grid.world_size > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        flags = [int(v) for v in flags.tolist()]
        if flags[-1]:
            raise self.pending or OutputFailed("rank 0 could not write an output")
        bad = [n for n, f in zip(names, flags) if f]
        if bad and stats is not None:
            shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
            raise TrainingDiverged(
                f"the optimizer step of epoch {stats.epoch} (loss {stats.loss:.4g} before it) left "
                f"NaN or infinite values in {shown}; stopped before saving that state; "
                f"{self._last_good(stats.epoch)}")

    def note_failure(self, error: BaseException, what: str) -> None:
        """Rank 0 could not write ``what``: remember it for the next `agree`, write no more."""
        if self.pending is None:
            self.pending = output_failure(error, what)

    def save_checkpoint(self) -> None:
        """Collective: assemble the full state; rank 0 writes it."""
        state = self.trainer.full_state()
        best_params = (self.best_weights.full(self.model) if self.best_weights is not None
                       else None)
        if self.grid.rank == 0:
            extra = {"best": self.best.as_dict(), "grid": str(self.grid)}
            if best_params is not None:
                extra["best_params"] = best_params
            payload = ckpt.make_checkpoint(state, self.plan.model, self.plan.train, self.dataset,
                                           extra)
            if self.pending is None:  # after a failed output, nothing more is written
                try:
                    ckpt.save_checkpoint(self.plan.checkpoint, payload)  # type: ignore[arg-type]
                except (OSError, UnsafeTargetError) as e:
                    self.note_failure(e, "the checkpoint")
                    return
        self.saved_epoch = self.trainer.epoch

    def on_epoch(self, stats: EpochStats) -> None:
        """After every epoch: stop on divergence (of the loss, or of the state the step left)
        or on an output rank 0 could not write, track the best validation epoch, report,
        checkpoint."""
        if self.facts.fault is not None:
            self.facts.fault.maybe_corrupt(self.grid.rank, stats.epoch, self.model.named_shards())
        self.check_finite(stats)
        if self.timers_after_first is None:
            self.timers_after_first = dict(self.comm.timers.seconds)
        self.agree(stats)
        self.best.update(stats)
        if self.best_weights is not None and self.best.epoch == stats.epoch:
            self.best_weights.capture(self.model, stats.epoch)
        if self.log is not None and self.pending is None:
            try:
                self.log.epoch(stats, self.comm.timers.seconds)
            except OutputFailed as e:
                self.pending = e
        if self.plan.checkpoint and (stats.epoch % self.plan.checkpoint_every == 0
                                     or stats.epoch == self.plan.train.epochs
                                     or self.trainer.stopped is not None):
            self.save_checkpoint()
        if self.facts.fault is not None:
            self.facts.fault.maybe_fire(self.grid.rank, stats.epoch)


def data_note(plan: ResolvedRun, cached: bool = False) -> str:
    """What the first line says of the data a --dataset run made: its features' scaling
    (--features, resolved for the format) and a --split-seed apart from --seed; of a --shards
    store, the split it carries (its features are what its partitioner read; '' for the
    cache's store of a --dataset run: ``cached``)."""
    if plan.shards:
        return ("" if cached else
            f", {store_split(read_manifest(plan.shards))}")
    mode = feature_mode(plan.dataset, plan.features)
    text = ", features row-normalized" if mode == "row" else ", features raw"
    text += " (--features auto)" if plan.features == "auto" else ""
    if plan.split_seed is not None:
        text += f", split seed {plan.split_seed}"
    return text

def threads_origin(requested: int | None) -> str:
    """Where a rank's thread count came from, as the run's first line says it."""
    if requested is not None:
        return "--threads"
    asked = env_threads()
    return f"{THREADS_ENV}={asked}" if asked is not None else "the cores shared by the ranks"


def crowding_note(local_ranks: int, cores: int) -> str | None:
    """The note for CPU ranks that outnumber this machine's cores (its affinity mask), or None.
    Their epochs measure the sharing, not the grid: say so once, even under --quiet."""
    if local_ranks <= cores:
        return None
    return (f"{PROG}: note: {local_ranks} ranks share this machine's {plural(cores, 'core')} "
            f"(os.sched_getaffinity), so they take turns: epochs take longer than with a core "
            f"per rank, and their times measure the sharing, not the grid; use at most {cores} "
            "ranks here for timings")


def activation_note(model: ModelConfig) -> str:
    """The first line's word on the activation, where it is not the default ReLU."""
    return "" if model.activation == DEFAULT_ACTIVATION else f" ({model.activation} between)"


def communication_lines(plan: ResolvedRun, model: GraphModel, grid: Grid) -> list[str]:
    """What the run's first lines say of its traffic: whether layer 0's input features are
    gathered once and kept or in every forward (and why), and the messages' precision."""
    lines = []
    net = model.net
    depth = net.plans[0].depth
    if grid.shape[depth] > 1:
        if net.kept_input:
            size = format_bytes(net.features.numel() * net.features.element_size())
            lines.append(f"layer 0's input features gathered over {depth} once at set-up and "
                         f"kept ({size} per rank; --keep-input off: in every forward)")
        elif plan.model.learnable_features:
            lines.append(f"layer 0's input features learn: gathered over {depth} in every "
                         "forward")
        elif plan.engine.keep_input == "off":
            lines.append(f"layer 0's input features gathered over {depth} in every forward "
                         "(--keep-input off)")
        else:
            lines.append(f"layer 0's input features gathered over {depth} in every forward: "
                         "kept, they would exceed a pass's memory budget (--keep-input on "
                         "keeps them anyway)")
    comm = model.net.comm
    if comm.gpus_per_node is not None:
        where = {a: ("in two levels" if a in comm.levels else
                     "inside a node" if comm.spans[a].link == "intra" else "across nodes")
                 for a in ("x", "y", "z") if grid.shape[a] > 1}
        origin = "--gpus-per-node" if plan.engine.gpus_per_node else "the launcher's nodes"
        block = (f", each a {'x'.join(map(str, grid.node))} block of the grid (--placement "
                 f"{plan.placement})" if grid.node else "")
        lines.append(f"ranks on nodes of {comm.gpus_per_node} ({origin}{block}), --collectives "
                     f"{plan.engine.collectives}: "
                     + ", ".join(f"{a} {w}" for a, w in where.items()))
    if plan.engine.wire_dtype() is not None:
        lines.append(f"activation, gradient and gathered-weight messages in "
                     f"{plan.engine.comm_dtype} (--comm-dtype), summed in fp32; statistics "
                     "and master weights fp32")
    return lines


def build_run(plan: ResolvedRun, setup: LocalSetup, device: torch.device,
              facts: JobFacts = JobFacts()) -> Run:
    """Collective set-up: grid, model, trainer, restored checkpoint, rank 0's reporter."""
    engine = plan.engine
    grid = Grid.create(setup.grid, device, plan.timeout_s,
                       engine.gpus_per_node if engine.node_block else None, engine.node_block)
    model = model_from_shard(grid, setup.shard, plan.model, plan.train.seed, plan.engine)
    if plan.engine.dtype != DEFAULT_DTYPE:
        # the model holds Â's values and the features in its own precision: the shard's float32
        # arrays would only add to every rank's peak (nothing reads them after the build)
        setup.shard.release_values()
    trainer = Trainer(model, plan.train)
    # collectives entered so far: the launcher names the rank that stopped (a stuck peer)
    start_beacon(grid.rank, lambda: sum(model.comm.ledger.calls.values()))
    best = BestRecord()
    best_weights = BestWeights() if needs_best_weights(plan, setup.dataset.name) else None
    if setup.resume_from is not None:
        trainer.load_full_state(setup.resume_from["state"])
        best = BestRecord.from_dict(ckpt.extra(setup.resume_from).get("best"))
        kept = ckpt.extra(setup.resume_from).get("best_params")
        if best_weights is not None and kept is not None and best.epoch is not None:
            best_weights.restore(model, best.epoch, kept)
    log = None
    if grid.rank == 0:
        log = RunLog(plan.train.epochs, trainer.epoch, plan.quiet, setup.json_log,
                     sinks=setup.sinks, heartbeat_s=plan.heartbeat_s, verbose=plan.verbose)
        log.message(f"{PROG}: {setup.dataset.describe()} on grid {grid} "
                    f"({plural(grid.world_size, 'rank')}, {device.type}, "
                    f"{plural(torch.get_num_threads(), 'thread')} per rank, "
                    f"{threads_origin(plan.threads)}), "
                    f"{plural(plan.model.num_layers, 'layer')}{activation_note(plan.model)}, orders "
                    f"{','.join(setup.shard.orders)}, permutation {setup.shard.perm}"
                    f"{data_note(plan, facts.cache is not None)}, "
                    f"{precisions(plan.engine.dtype, plan.engine.comm_dtype)}")
        if device.type == "cpu":
            crowded = crowding_note(setup.local_ranks, available_cores())
            if crowded:
                log.note(crowded)
        for line in communication_lines(plan, model, grid):
            log.message(f"{PROG}: {line}")
        if setup.resume_from is not None:
            log.message(f"{PROG}: resumed from {ckpt.checkpoint_path(plan.checkpoint)} at epoch "
                        f"{trainer.epoch}")  # type: ignore[arg-type]
    saved = ckpt.saved_epoch(setup.resume_from) if setup.resume_from is not None else None
    # CPU runs count tensor bytes (CUDA's allocator counts its own): what the rank holds now,
    # then what training allocates on top
    tracker = TensorTracker(resident_storages(model, setup.shard)) if device.type == "cpu" else None
    # loading holds the whole graph for a moment; training's own peak is counted from here
    setup_peak = peak_rss_bytes()
    if not reset_peak_rss():
        setup_peak = 0
    return Run(plan, facts, grid, model.comm, model, trainer, setup.shard, setup.dataset, best,
               log, saved, saved, best_weights, setup.predicted_bytes, setup.predicted_setup_bytes,
               tracker, setup_peak, predicted_rank_bytes=setup.predicted_rank_bytes,
               predicted_rank_setup_bytes=setup.predicted_rank_setup_bytes)
