"""The end of a run: reduce timers and the communication ledger over ranks, hand back the
results (`plexus.train.results`: predictions, weights, the OGB evaluator's metric), and have rank
0 report the summary."""

from __future__ import annotations


import time
from typing import Mapping

import numpy as np
import torch
import torch.distributed as dist

from plexus_partition.model.grid import AXES
from plexus_partition.model.schedule import SETUP, volume_per_axis
from plexus_partition.model.topology import LINKS
from plexus.api.training import EpochStats, Ledger, Timers, staged
from plexus.runtime.memstats import cuda_peak_bytes, peak_rss_bytes

from .provenance import gather_provenance
from .results import end_of_run
from .runlog import BestRecord
from .walltime import WallTime
from .session import Run
from .traffic import collective_account, setup_declared, step_declared


def reduce_timers(timers: Timers | Mapping[str, float],
                  device: torch.device) -> dict[str, dict[str, float]]:
    """Per timer name: max and mean seconds over all ranks (collective); ``timers`` is a
    `Timers` or its seconds per name."""
    seconds = timers.seconds if isinstance(timers, Timers) else timers
    names: list[list[str]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(names, sorted(seconds))
    union = sorted(set().union(*names))
    if not union:
        return {}
    values = torch.tensor([seconds.get(n, 0.0) for n in union], dtype=torch.float64,
                          device=device)
    mx, total = values.clone(), values.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    world = dist.get_world_size()
    return {n: {"max": float(a), "mean": float(b) / world}
            for n, a, b in zip(union, mx.tolist(), total.tolist())}


def reduce_ledger(ledger: Ledger, device: torch.device, per: str = "axis"
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """Bytes moved per axis (``per`` "axis") or per link class ("link": intra, inter): summed
    over all ranks, and the largest single rank (collective)."""
    mine = ledger.per_axis("bytes") if per == "axis" else ledger.per_link()
    names = AXES if per == "axis" else LINKS
    values = torch.tensor([mine[a] for a in names], dtype=torch.float64, device=device)
    mx, total = values.clone(), values.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return dict(zip(names, total.tolist())), dict(zip(names, mx.tolist()))


def declared_max_rank(run: Run, epochs: int, evaluations: int) -> dict[str, float] | None:
    """Bytes per axis the schedule declares for this rank's run (``epochs`` training steps,
    ``evaluations`` evaluation passes), priced with the rows its sparse exchanges send
    (`plexus_partition.model.schedule.exact_rows`), the largest over the ranks (collective): what
    the busiest rank's ledger must show. None for a model that does not report its exchanges."""
    model = getattr(run.model, "net", run.model)  # the API's model wraps the engine's
    counts = getattr(model, "exchange_counts", None)
    if counts is None:
        return None
    engine, shape = run.plan.engine, run.grid.shape.as_dict()
    setup = volume_per_axis(setup_declared(model, shape, engine), engine.comm_bytes,
                            phases=(SETUP,))
    train, both = (volume_per_axis(step_declared(model, shape, engine, evaluate),
                                   engine.comm_bytes) for evaluate in (False, True))
    values = torch.tensor([setup.get(a, 0.0) + epochs * train[a]
                           + evaluations * (both[a] - train[a]) for a in AXES],
                          dtype=torch.float64, device=run.grid.device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return dict(zip(AXES, values.tolist()))


def gather_memory(run: Run, train_rss: int | None = None) -> dict:
    """Every rank's measured peaks, in rank order (collective), next to the model's prediction:
    ``peak_rss_bytes`` (the process, set-up included), ``train_peak_rss_bytes`` (from the end of
    set-up on; None where the kernel cannot restart the count), ``setup_peak_rss_bytes`` (up to
    the end of set-up: reading the shard and building the model; None likewise),
    ``tracked_peak_bytes`` (tensor
    storages: the rank's resident state plus training's high-water mark; None where not
    tracked) and ``cuda_peak_bytes`` (None off CUDA); ``predicted_bytes`` is the model's training
    peak, ``predicted_setup_bytes`` its set-up peak (`plexus.perfmodel.setup`), both for the rank
    that holds the most; ``predicted_bytes_per_rank`` and ``predicted_setup_bytes_per_rank`` the
    same for each rank's own coordinates (ranks on the grid's diagonal may share a block with its
    transpose). ``train_rss``: the peak RSS taken when training and its evaluations ended (default:
    now), before the end of the run's own work (OGB's evaluator imports ~0.2 GiB of libraries)."""
    cuda = cuda_peak_bytes(run.grid.device)
    tracked = run.tracker.peak_bytes if run.tracker is not None else -1
    if train_rss is None:  # since set-up when the kernel could restart the count
        train_rss = peak_rss_bytes()
    setup = run.setup_peak_rss
    mine = torch.tensor([max(peak_rss_bytes(), setup), tracked, -1 if cuda is None else cuda,
                         train_rss if setup else -1, setup if setup else -1,
                         int(run.predicted_rank_bytes), int(run.predicted_rank_setup_bytes)],
                        dtype=torch.int64,
                        # gloo gathers host tensors only (ranks sharing a GPU)
                        device="cpu" if staged(run.grid.device) else run.grid.device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    table = torch.stack(every).cpu().tolist()

    def column(i: int) -> list[int | None]:
        return [None if row[i] < 0 else int(row[i]) for row in table]

    cuda_col = column(2)
    return {"peak_rss_bytes": column(0), "tracked_peak_bytes": column(1),
            "cuda_peak_bytes": None if all(c is None for c in cuda_col) else cuda_col,
            "predicted_bytes": float(run.predicted_bytes),
            "predicted_setup_bytes": float(run.predicted_setup_bytes),
            "train_peak_rss_bytes": column(3), "setup_peak_rss_bytes": column(4),
            "predicted_bytes_per_rank": [float(b) for b in column(5)],
            "predicted_setup_bytes_per_rank": [float(b) for b in column(6)]}


def finish(run: Run, history: list[EpochStats], train_time_s: float,
           setup_s: float = 0.0, startup_s: float = 0.0,
           phases: dict[str, float] | None = None) -> None:
    """Collective: final evaluation if needed, timers, ledger, OGB metric; rank 0 reports.

    ``train_time_s`` is the training loop's wall time, ``setup_s`` the rank's set-up before it,
    ``startup_s`` the command's start-up before the rank began (`WallTime`); ``phases`` rank
    0's set-up in parts (process group, shard, model), for the JSON log."""
    begun = time.perf_counter()
    trainer = run.trainer
    final = history[-1].as_dict() if history else {"epoch": trainer.epoch}
    final_eval_s = 0.0
    # epochs 2..N of this run, before the final evaluation: the warm-up epoch left out
    first = run.timers_after_first if len(history) > 1 else None
    timed = None if first is None else {n: max(v - first.get(n, 0.0), 0.0)
                                         for n, v in run.comm.timers.seconds.items()}
    if final.get("test_acc") is None:  # never evaluated at the end (eval_every 0, or resumed at N)
        acc = trainer.evaluate()
        final_eval_s = time.perf_counter() - begun
        final.update(train_acc=acc["train"], val_acc=acc["val"], test_acc=acc["test"])
    if run.best.epoch is None:
        run.best = BestRecord(trainer.epoch, final["val_acc"], final["test_acc"],
                              final["train_acc"])
    timers = reduce_timers(run.comm.timers, run.grid.device)
    timers_timed = reduce_timers(timed, run.grid.device) if timed is not None else None
    comm_total, comm_max = reduce_ledger(run.comm.ledger, run.grid.device)
    link_total, link_max = reduce_ledger(run.comm.ledger, run.grid.device, "link")
    evaluations = sum(s.test_acc is not None for s in history) + (final_eval_s > 0)
    declared = declared_max_rank(run, len(history), evaluations)
    # training's peak, before the end of the run's own work: OGB's evaluator (its import: pandas,
    # scikit-learn) and the outputs are no part of what the memory model prices
    train_rss = peak_rss_bytes()
    results = end_of_run(run.plan, run.model, run.dataset.name, trainer.epoch, run.best.epoch,
                         run.best_weights)
    provenance = gather_provenance(run)
    memory = gather_memory(run, train_rss)
    if run.log is None:
        return
    failed = results.pop("output_error", None)
    if failed is not None:  # rank 0, after the last collective: the others end normally
        raise failed
    epoch_times = [s.epoch_time_s for s in history]
    wall = WallTime.of(history, setup_s, startup_s + setup_s + train_time_s
                       + time.perf_counter() - begun, final_eval_s, startup_s)
    summary = {
        "dataset": run.dataset.name, "grid": str(run.grid), "world_size": run.grid.world_size,
        "epochs": trainer.epoch, "epochs_run": len(history),
        "metric": run.model.metric_name,  # what the *_acc fields hold: "acc" or "rocauc"
        "best_epoch": run.best.epoch, "best_val_acc": run.best.val_acc,
        "best_test_acc": run.best.test_acc,
        "stopped_early": None if trainer.stopped is None else {
            "epoch": trainer.stopped, "patience": run.plan.train.patience},
        "final": {k: final.get(k) for k in ("epoch", "loss", "train_acc", "val_acc", "test_acc")},
        "train_time_s": train_time_s,
        "mean_epoch_time_s": float(np.mean(epoch_times)) if epoch_times else 0.0,
        "wall_time": wall.as_dict(), "evaluations": int(evaluations),
        "setup_phases": phases or None,
        "startup_from": run.facts.startup_origin(),
        "setup_script_s": run.facts.setup_script_s or None,
        "comm_bytes": comm_total, "comm_bytes_max_rank": comm_max,
        # the same bytes per link class: inside a node, across nodes (--gpus-per-node)
        "comm_bytes_per_link": link_total, "comm_bytes_per_link_max_rank": link_max,
        "gpus_per_node": run.comm.gpus_per_node, "collectives": run.plan.engine.collectives,
        "hierarchical_axes": sorted(run.comm.levels),
        # the schedule's bytes for the busiest rank, priced with its sparse exchanges' rows
        "comm_bytes_declared_max_rank": declared,
        "sparse_comm": run.plan.engine.sparse_comm,
        "comm_ledger": run.comm.ledger.summary(),  # rank 0's collectives by axis and operation
        "kept_input": run.model.net.kept_input,  # layer 0's features gathered once at set-up
        "dtype": run.plan.engine.dtype,  # the computation's precision
        "comm_dtype": run.plan.engine.comm_dtype,  # activations' and gradients' wire precision
        "spmm": run.plan.engine.spmm_backend,  # the sparse products' backend (--spmm)
        # ... and one by one, named where issued (set-up, training steps, evaluations)
        "comm_collectives": collective_account(
            run.comm.ledger.collectives, run.comm.ledger.names, run.grid.shape, len(history)),
        "timers": timers,
        # the same timers over epochs 2..N only (with their evaluations, if any), as plexus-report
        # selects epochs
        "timers_timed": None if timers_timed is None else {
            "epochs": len(history) - 1, "timers": timers_timed},
        "ogb": results.pop("ogb", None),
        "ogb_best": results.pop("ogb_best", None),
        "memory": memory,
        "cache": run.facts.cache,  # the cached shard store of a --dataset run, or None
        "model": {"kind": run.plan.model.kind, "layers": run.plan.model.num_layers,
                  "hidden": run.plan.model.hidden, "norm": run.plan.model.norm,
                  "residual": run.plan.model.as_dict()["residual"],  # the flat form's
                  "orders": list(run.shard.orders), "perm": run.shard.perm},
        **results,  # the files written (--save-predictions, --export)
    }
    summary["model"].update(dropout=run.plan.model.dropout, bias=run.plan.model.bias,
                            learnable_features=run.plan.model.learnable_features,
                            config=run.plan.model.as_dict())
    summary.update(provenance or {})
    run.log.finish(summary)
