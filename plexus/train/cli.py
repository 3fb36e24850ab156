"""``plexus-train``: train a GCN with 3D tensor parallelism on an X×Y×Z grid of processes.

    plexus-train                                    # --grid auto: a rank per local core or GPU
    plexus-train --grid 2x2x2                       # 8 local workers, embedded Cora
    torchrun --nproc-per-node 4 -m plexus.train --grid 1x2x2 --dataset cora
    srun plexus-train --grid 4x4x4 --dataset ogbn-products --root data/

Outside a launcher it starts X·Y·Z local workers itself (`plexus.train.entry.run_local`); under
torchrun or srun every process is one rank of the job it is in (`plexus.train.entry.run_rank`).
This module is the command line: the checks of the options (`plexus.train.parser` defines
them) and turning them into the run's request (`RunRequest`, `build_plan`; what they say of the
problem, a ``--shards`` store's manifest included, is `plexus.train.problem`), which the
launching process resolves once (`plexus.train.resolve`). Bad input ends with
one line ``plexus-train: error: ...`` on stderr and exit status 2, before any worker starts
where it can be checked up front.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from plexus.api.recipes import RecipeError
from plexus.api.training import (DEFAULT_DTYPE, EngineConfig, TrainConfig, TrainConfigError,
                                 check_backend)
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus.core.timing import command_start_time
from plexus_partition.model.modelopts import model_config
from plexus.engine.flags import comm_dtype_bytes
from plexus.perfmodel import (CALIBRATION_ENV, Calibration, CalibrationError, find_calibration,
                              resolve_calibration)
from plexus.runtime.child import ChildDied
from plexus_partition.launch.env import (JobEnv, LaunchError, default_device, detect_environment,
                                         env_threads)

from .cachedir import default_cache_dir
from .cachecli import cache_command, from_cache
from .cacheuse import StoreUse
from .entry import reserve_standard_fds, run_local, run_rank
from .errors import PROG, USER_ERRORS, UsageError, error_line
from .faults import Fault
from .jobfacts import JobFacts
from .outputs import check_claims, dataset_files, run_claims
from .parser import build_parser
from .problem import problem_shape
from .plan import CHECKPOINT_EVERY, RunRequest
from .resolve import resolve_at_launch
from .linktask import link_main, refuse_link_options
from .runlog import console_line


# ---- checks --------------------------------------------------------------------------------
# The options come typed and bounded from the parser (plexus.train.options: the one table of
# bounds, a recipe's values included); what is left here is the options' relations.


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` of the options; `UsageError` naming the flag of a value it refuses."""
    try:
        return TrainConfig(
            epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed,
            eval_every=args.eval_every, weight_decay_scope=args.weight_decay_on,
            optimizer=args.optimizer, momentum=args.momentum, clip_grad_norm=args.clip_grad_norm,
            lr_schedule=args.lr_schedule, lr_step=args.lr_step, lr_gamma=args.lr_gamma,
            lr_patience=args.lr_patience, lr_min=args.lr_min, patience=args.patience)
    except TrainConfigError as e:
        problem = e.problem.replace("eval_every", "--eval-every")  # the one other field named
        raise UsageError(f"--{e.field.replace('_', '-')} {problem}") from None


def check_numbers(args: argparse.Namespace) -> TrainConfig:
    """The options' relations (their ranges are the parser's); returns the checked
    `TrainConfig`."""
    train = train_config(args)
    if args.threads is None:
        try:
            env_threads()  # a bad OMP_NUM_THREADS is refused before any worker starts
        except LaunchError as e:
            raise UsageError(f"{e}, or give --threads N") from None
    if args.resume not in (True, False, "auto"):
        raise UsageError(f"--resume takes no value or 'auto', got {args.resume!r}")
    if args.resume and not args.checkpoint:
        raise UsageError("--resume needs --checkpoint DIR (where the checkpoint is)")
    if args.checkpoint_every is not None and not args.checkpoint:
        raise UsageError("--checkpoint-every needs --checkpoint DIR")
    if args.save_embeddings and not args.save_predictions:
        raise UsageError("--save-embeddings needs --save-predictions DIR (where they go)")
    if args.export_best and not args.export:
        raise UsageError("--export-best needs --export FILE.pt (where the weights go)")
    if args.cache and args.no_cache:
        raise UsageError("--cache DIR and --no-cache contradict each other; give one")
    if args.shards and (args.cache or args.no_cache):
        raise UsageError("--shards DIR is a store already; --cache/--no-cache apply to "
                         "--dataset runs")
    if args.symmetrize and args.shards:
        raise UsageError("--symmetrize changes the graph, but a --shards store was cut from it "
                         "already; drop --symmetrize (or cut a store from a symmetrized graph)")
    return train



# ---- options -> RunRequest --------------------------------------------------------------------


def _check_launcher_world(grid: GridShape | None, args: argparse.Namespace, env: JobEnv | None
                           ) -> None:
    """Under a launcher, the grid and --world-size against the ranks it started (checked on
    every rank before the process group forms: a wrong grid cuts no store); a local run's count
    of workers is its launch's (`plexus.train.resolve.local_world`)."""
    if env is None:
        return
    if args.world_size is not None and args.world_size != env.world_size:
        raise UsageError(f"--world-size {args.world_size} but the launcher started "
                         f"{env.world_size} ranks")
    if grid is not None:
        grid.check_world(env.world_size, "the launcher started")


def _comm_options(args: argparse.Namespace) -> dict:
    """``comm_dtype`` and ``keep_input`` of the options, checked against the others."""
    comm_dtype_bytes(args)  # --comm-dtype against --dtype
    if args.keep_input == "on" and args.learnable_features:
        raise UsageError("--keep-input on needs fixed input features: --learnable-features "
                         "change every step (use --keep-input auto or off)")
    return {"comm_dtype": args.comm_dtype, "keep_input": args.keep_input}


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The `EngineConfig` of the options, checked against the device the ranks will use."""
    engine = EngineConfig(spmm_backend=args.spmm, agg_chunks=args.agg_chunks,
                          overlap=args.overlap, sparse_comm=args.sparse_comm,
                          tune_gemms=args.tune_gemms, timers=args.timers,
                          huge_pages=args.huge_pages, dtype=args.dtype, recompute=args.recompute,
                          collectives=args.collectives, gpus_per_node=args.gpus_per_node,
                          **_comm_options(args))
    try:
        device = default_device(args.device)
    except LaunchError as e:  # --device cuda where there is none
        raise UsageError(f"--device {args.device}: {e}") from None
    try:
        check_backend(args.spmm, device, engine.torch_dtype())
    except ValueError as e:  # the library's message names no flag
        if args.dtype != DEFAULT_DTYPE:
            raise UsageError(f"--spmm {args.spmm} with --dtype {args.dtype}: {e}") from None
        raise
    return engine


def build_plan(args: argparse.Namespace, env: JobEnv | None) -> RunRequest:
    """Validate the parsed options into the run's `RunRequest`, which is resolved once per job
    (`plexus.train.resolve`): by a local run's launching process before any worker starts
    (`resolve_at_launch`, where it learns the graph's sizes cheaply), else by rank 0 once the
    ranks have joined. Under a launcher (``env`` set) every rank runs this, so it stays cheap.
    """
    train = check_numbers(args)
    if args.dataset is not None and not args.dataset.strip():  # '' must not quietly mean cora
        raise UsageError("--dataset is empty; give a spec such as cora, ogbn-arxiv or npz:PATH")
    # every output resolved and compared before anything is read or written (cheap: stats)
    check_claims(run_claims(args.checkpoint, args.log_json, args.log_csv, args.tensorboard,
                            args.save_predictions, args.export,
                            dataset_files(args.dataset, args.root, args.shards),
                            None if args.no_cache else args.cache))
    shape = problem_shape(args)
    if shape.note and not args.quiet and (env is None or env.rank == 0):
        console_line(f"{PROG}: {shape.note}")
    _check_launcher_world(shape.grid, args, env)
    calibration = run_calibration(args.calibration)
    # "auto" collectives priced with the calibration's link classes, as the model prices them
    engine = replace(engine_config(args), link_rates=calibration.calibration.links)
    model = model_config(args, num_layers=shape.layers, order=shape.order,
                         **args.recipe_model)
    if args.save_embeddings and model.num_layers < 2:
        raise UsageError("--save-embeddings needs a hidden layer (--layers 2 or more)")
    cache_dir = None if args.no_cache or args.shards else Path(args.cache or default_cache_dir())
    request = RunRequest(
        grid=shape.grid, dataset=shape.dataset, root=args.root, model=model, train=train,
        engine=engine, perm=shape.perm or args.perm or DEFAULT_PERMUTATION, shards=args.shards,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every or CHECKPOINT_EVERY, resume=args.resume,
        log_json=args.log_json, quiet=args.quiet, verbose=args.verbose,
        heartbeat_s=args.heartbeat,
        timeout_s=args.timeout,
        force=args.force,
        save_predictions=args.save_predictions, save_embeddings=args.save_embeddings,
        export=args.export, export_best=args.export_best, symmetrize=args.symmetrize,
        split_seed=args.split_seed, features=args.features,
        log_csv=args.log_csv, tensorboard=args.tensorboard,
        cache_dir=cache_dir and str(cache_dir.expanduser()), cache_explicit=bool(args.cache),
        device=args.device, calibration=calibration.path, threads=args.threads,
        world_size=args.world_size, placement=args.placement,
        cache_max_bytes=args.cache_max_bytes)
    return request


@dataclass(frozen=True)
class _RunCalibration:
    path: str | None  # the file, given or found ($PLEXUS_CALIBRATION)
    calibration: Calibration


def run_calibration(path: str | None) -> _RunCalibration:
    """``--calibration FILE``, else the file $PLEXUS_CALIBRATION names, loaded and checked
    (`UsageError` naming the option for a bad one); neither: the built-in rates."""
    found = path or find_calibration(os.environ)
    try:
        return _RunCalibration(found, resolve_calibration(found))
    except CalibrationError as e:
        option = "--calibration" if path else f"${CALIBRATION_ENV}"
        raise UsageError(f"{option}: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``plexus-train``; returns the exit status (0 ok, 2 bad input, 1 failure).

    The run's wall time counts from this process's start when it is the command (``argv``
    None; after ``./run``'s set-up where ``./run`` started it), from this call otherwise."""
    launched_at, script_s = command_start_time() if argv is None else (None, 0.0)
    launched_at = launched_at or time.time()
    reserve_standard_fds()
    env: JobEnv | None = None
    hold: StoreUse | None = None
    try:
        env = detect_environment()
        args = build_parser().parse_args(argv)
        if args.cache_list or args.cache_clean:
            return cache_command(args)
        if args.task == "link":
            return link_main(args, env)
        refuse_link_options(args)
        plan = build_plan(args, env)
        if env is None:  # a local run: resolved here where cheap, else by its rank 0
            plan = resolve_at_launch(plan)
        # what the ranks are handed beside the run: the launch's facts, the cache's store, a
        # test's fault (under torchrun/srun start-up counts from each rank's own start)
        facts = JobFacts(None if env is not None else launched_at,
                         0.0 if env is not None else script_s,
                         fault=Fault.parse(args.inject_fault) if args.inject_fault else None)
        if env is None and plan.uses_cache(None):
            plan, summary, hold = from_cache(plan, args.force)
            facts = replace(facts, cache=summary)
    except (*USER_ERRORS, RecipeError, ValueError, OSError) as e:
        # Under a launcher every rank checks the same options: rank 0 speaks for them all.
        if env is None or env.rank == 0:
            print(error_line(e), file=sys.stderr, flush=True)
        return 2
    except ChildDied as e:  # the partitioning child was killed (the OOM killer, a signal)
        print(error_line(e), file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:  # checking the options, resolving the run or cutting its store
        if env is None or env.rank == 0:
            print(error_line(f"interrupted (SIGINT) (pid {os.getpid()}) before the run "
                             "started; nothing was started"), file=sys.stderr, flush=True)
        return 130
    try:
        if env is not None:  # a rank of torchrun/srun
            return run_rank(plan, env, facts)
        return run_local(plan, facts)
    finally:
        if hold is not None:  # the store may be evicted once the run is over
            hold.release()


if __name__ == "__main__":
    sys.exit(main())
