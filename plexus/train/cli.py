"""``plexus-train``: train a GCN with 3D tensor parallelism on an X×Y×Z grid of processes.

    plexus-train                                    # --grid auto: a rank per local core or GPU
    plexus-train --grid 2x2x2                       # 8 local workers, embedded Cora
    torchrun --nproc-per-node 4 -m plexus.train --grid 1x2x2 --dataset cora
    srun plexus-train --grid 4x4x4 --dataset ogbn-products --root data/

Outside a launcher it starts X·Y·Z local workers itself (`plexus.train.entry.run_local`); under
torchrun or srun every process is one rank of the job it is in (`plexus.train.entry.run_rank`).
This module is the command line: the options, their checks, and turning them into
`RunOptions`. Bad input ends with one line ``plexus-train: error: ...`` on stderr and exit
status 2, before any worker starts where it can be checked up front.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from plexus.api.recipes import RECIPES, RecipeError, get_recipe
from plexus.core.cli import ArgumentParser
from plexus.core.grid import MAX_WORLD_SIZE, GridError, GridShape
from plexus.core.layout import DEFAULT_PERMUTATION
from plexus.core.model import MAX_SEED
from plexus.core.timing import command_start_time
from plexus.core.units import format_bytes
from plexus.core.modelopts import (ModelOptionsText, add_model_options, add_precision_options,
                                   check_model_options, model_config, resolve_layers,
                                   resolve_order)
from plexus.core.ops import KINDS
from plexus.datasets import gcn_nnz, load_dataset
from plexus.engine.config import (LR_SCHEDULES, OPTIMIZERS, EngineConfig, TrainConfig,
                                  TrainConfigError)
from plexus.engine.spmm import BACKENDS, check_backend
from plexus.partitioners import PERMUTATIONS
from plexus.perfmodel import (CALIBRATION_ENV, Calibration, CalibrationError, find_calibration,
                              resolve_calibration)
from plexus.partitioners.plan import symmetric
from plexus.partitioners.store import graph_hash
from plexus.runtime.child import ChildDied
from plexus.runtime.env import (DEVICES, JobEnv, LaunchError, check_local_devices,
                                default_device, detect_environment, env_threads,
                                local_world_size)
from plexus.runtime.group import DEFAULT_TIMEOUT_S

from . import checkpoint as ckpt
from .cache import CACHE_ENV, Cache, cached_options, default_cache_dir, uses_cache
from .cacheuse import MAX_GB_ENV, StoreUse, cap_bytes, entries, evict
from .checks import (auto_grid_choice, check_checkpoint_dir, check_grid_fits, check_log_path,
                     check_order, check_output_file, check_outputs_dir, precheck_dataset,
                     precheck_resources, spec_sizes)
from .entry import reserve_standard_fds, run_local, run_rank
from .epochlogs import check_targets
from .errors import PROG, USER_ERRORS, UsageError, error_line
from .faults import Fault
from .options import RunOptions
from .outputs import check_claims, dataset_files, run_claims
from .prepare import check_best_kept, load_resume
from .runlog import console_line


def build_parser() -> argparse.ArgumentParser:
    """All plexus-train options."""
    p = ArgumentParser(prog=PROG, description="Train a GNN (GCN, GraphSAGE, GIN) with 3D tensor "
                       "parallelism (Plexus). "
                       "Outside a launcher it starts X·Y·Z local workers; under torchrun or srun "
                       "it joins the job.")
    run = p.add_argument_group("job")
    run.add_argument("--grid", metavar="XxYxZ|auto",
                     help="process grid, e.g. 2x2x4 (X·Y·Z ranks); 'auto' (the default, or the "
                          "store's grid with --shards) lets the performance model choose for "
                          "--world-size ranks and says what it chose")
    run.add_argument("--world-size", type=int, metavar="G",
                     help="number of ranks for --grid auto (default: the launcher's size; "
                          "outside one, one rank per local GPU, or per CPU core)")
    run.add_argument("--calibration", metavar="FILE",
                     help="this machine's rates for --grid auto (plexus-bench calibrate; "
                          "default: $PLEXUS_CALIBRATION if set, else the built-in GPU rates, "
                          "said as uncalibrated)")
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                     help="process-group timeout: how long a collective may wait (default "
                          f"{DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--device", choices=DEVICES,
                     help="cuda: one GPU per local rank, NCCL (more local ranks than GPUs "
                          "share them, gloo); cpu: gloo on the CPU (default: cuda where it is "
                          "available, else cpu)")
    run.add_argument("--threads", type=int, metavar="N",
                     help="torch (and BLAS) threads per rank (default: $OMP_NUM_THREADS when "
                          "set, else the node's cores shared evenly among its ranks); the "
                          "run's first line says how many it uses")
    run.add_argument("--force", action="store_true",
                     help="run even when the performance model predicts more memory per rank "
                          "than is available")
    # Tests of failure handling: KIND:RANK:EPOCH makes one rank raise, SIGKILL itself or hang.
    run.add_argument("--inject-fault", metavar="KIND:RANK:EPOCH", help=argparse.SUPPRESS)
    data = p.add_argument_group("data")
    data.add_argument("--dataset", metavar="SPEC",
                      help="dataset spec: cora (embedded; the default), citeseer, pubmed, "
                           "ogbn-arxiv, ogbn-products, ogbn-papers100M, npz:PATH, mtx:PATH, "
                           "edgelist:PATH, planetoid:DIR, rmat:scale=S,...")
    data.add_argument("--root", metavar="DIR", help="directory holding the dataset's files")
    data.add_argument("--shards", metavar="DIR",
                      help="read this rank's shard from a plexus-partition store instead of "
                           "loading and cutting the dataset; its manifest fixes the dataset, "
                           "grid, layers, orders and permutation")
    data.add_argument("--cache", metavar="DIR",
                      help="where --dataset runs keep the shard stores they partition the graph "
                           "into once (reused while the graph's files, grid, layers, orders, "
                           f"permutation, seed and aggregation match; default ${CACHE_ENV}, "
                           "else ~/.cache/plexus/stores); a 1x1x1 run uses it only when given")
    data.add_argument("--cache-max-gb", type=float, metavar="G",
                      help="cap the cache at G GiB: once a run has its store, the least "
                           "recently used stores that no run holds are removed (default "
                           f"${MAX_GB_ENV}, else no cap)")
    data.add_argument("--cache-list", action="store_true",
                      help="list the cache's stores and converted graphs (size, last use, in "
                           "use) and exit")
    data.add_argument("--cache-clean", action="store_true",
                      help="remove what the cache holds that no run is using (with "
                           "--cache-max-gb: only the least recently used, down to the cap) "
                           "and exit")
    data.add_argument("--no-cache", action="store_true",
                      help="every rank loads the whole dataset and cuts its own shard (no "
                           "store on disk)")
    data.add_argument("--perm", choices=PERMUTATIONS, default=None,
                      help=f"load-balancing node permutation (default {DEFAULT_PERMUTATION}, or the "
                           "store's with --shards); results do not depend on it")
    add_model_options(p, ModelOptionsText(store_note=", or the store's with --shards"))
    train = p.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=200,
                       help="training epochs, full batch (default 200)")
    train.add_argument("--lr", type=float, default=0.01,
                       help="learning rate (default 0.01; the start of a --lr-schedule)")
    train.add_argument("--weight-decay", type=float, default=5e-4,
                       help="L2 weight decay (default 5e-4)")
    train.add_argument("--weight-decay-on", choices=("all", "first"), default="all",
                       help="decay every parameter (default) or the first layer's only "
                            "(Kipf & Welling)")
    train.add_argument("--seed", type=int, default=0,
                       help="seed of weights, dropout masks and the permutation (default 0)")
    train.add_argument("--eval-every", type=int, default=1, metavar="N",
                       help="evaluate every N epochs (default 1; 0: only at the end)")
    d = TrainConfig()
    train.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer,
                       help=f"torch.optim's Adam, AdamW (decoupled weight decay) or SGD "
                            f"(default {d.optimizer})")
    train.add_argument("--momentum", type=float, default=d.momentum,
                       help=f"SGD's momentum (default {d.momentum})")
    train.add_argument("--clip-grad-norm", type=float, default=None, metavar="MAX",
                       help="scale the gradient down to this 2-norm when above it (the norm of "
                            "the whole model's gradient: the same on every grid)")
    train.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=d.lr_schedule,
                       help="cosine (to --lr-min over --epochs), step (times --lr-gamma every "
                            "--lr-step epochs), plateau (times --lr-gamma after --lr-patience "
                            f"evaluations without a better validation metric; default "
                            f"{d.lr_schedule})")
    train.add_argument("--lr-step", type=int, default=d.lr_step, metavar="N",
                       help=f"step schedule's period in epochs (default {d.lr_step})")
    train.add_argument("--lr-gamma", type=float, default=d.lr_gamma,
                       help=f"step and plateau schedules' factor (default {d.lr_gamma})")
    train.add_argument("--lr-patience", type=int, default=d.lr_patience, metavar="N",
                       help=f"plateau schedule's patience in evaluations (default "
                            f"{d.lr_patience})")
    train.add_argument("--lr-min", type=float, default=d.lr_min,
                       help=f"cosine schedule's last rate, plateau's floor (default {d.lr_min})")
    train.add_argument("--patience", type=int, default=None, metavar="N",
                       help="early stopping: stop after N epochs without a better validation "
                            "metric; the best epoch's metrics are reported (and its weights "
                            "exported with --export-best)")
    out = p.add_argument_group("checkpoints and output")
    out.add_argument("--checkpoint", metavar="DIR",
                     help="save DIR/checkpoint.pt (grid-independent) every --checkpoint-every "
                          "epochs and at the end")
    out.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                     help="epochs between checkpoints (default 10)")
    out.add_argument("--resume", nargs="?", const=True, default=False, metavar="auto",
                     help="continue from DIR/checkpoint.pt of --checkpoint (any grid); "
                          "'--resume auto' continues if that file exists and starts afresh if "
                          "not (a requeued batch job needs no shell guard)")
    out.add_argument("--log-json", metavar="FILE",
                     help="JSON lines: one object per epoch, then a summary object")
    out.add_argument("--log-csv", metavar="FILE",
                     help="CSV, one row per epoch (loss, accuracies, step and evaluation time), "
                          "flushed every epoch: tail -f FILE follows the run")
    out.add_argument("--tensorboard", metavar="DIR",
                     help="TensorBoard scalars in DIR: loss, accuracies, epoch time, time per "
                          "timer (needs the tensorboard package; without it, one note)")
    out.add_argument("--quiet", action="store_true", help="print only the summary")
    res = p.add_argument_group("results and OGB recipes")
    res.add_argument("--save-predictions", metavar="DIR",
                     help="write the final model's predicted class of every node (DIR/pred.npy, "
                          "original node order) and its logits (DIR/logits.npy); every rank "
                          "writes its own rows (plexus.api.load_outputs reads them)")
    res.add_argument("--save-embeddings", action="store_true",
                     help="add the last hidden layer's output (DIR/embeddings.npy) to "
                          "--save-predictions")
    res.add_argument("--export", metavar="FILE.pt",
                     help="write the unsharded weights under the parameter names of the matching "
                          "PyG model (a ModuleList 'convs' of GCNConv) with the model "
                          "configuration; loads with torch.load(weights_only=True)")
    res.add_argument("--export-best", action="store_true",
                     help="--export the weights of the best-validation epoch instead of the "
                          "final ones")
    res.add_argument("--symmetrize", action="store_true",
                     help="make the graph undirected (every edge both ways) before training, as "
                          "OGB's arxiv example does")
    res.add_argument("--recipe", choices=sorted(RECIPES), metavar="NAME",
                     help="settings of the official OGB examples (sources: "
                          "ogb/examples/nodeproppred/arxiv/gnn.py and products/gnn.py): "
                          "ogbn-arxiv-gcn (3 layers, hidden 256, BatchNorm, dropout 0.5 on hidden "
                          "layers, lr 0.01, no weight decay, 500 epochs, --symmetrize), "
                          "ogbn-products-gcn and ogbn-products-sage (the same without BatchNorm, "
                          "300 epochs), ogbn-arxiv-gat (the OGB leaderboard's GAT, DGL's "
                          "ogbn-arxiv/gat.py: 3 layers, 3 heads of 250, BatchNorm, dropout 0.75, "
                          "lr 0.002, 2000 epochs, --symmetrize); and of the Plexus paper "
                          "(hpcgroup/plexus examples/train.py): ogbn-papers100M-gcn (3 layers, hidden 128, no "
                          "bias, no dropout, learnable input features, lr 0.003, no weight "
                          "decay, 10 epochs); it also picks the dataset; flags given explicitly "
                          "win")
    eng = p.add_argument_group("engine (results never depend on these, except --dtype by "
                               "rounding)")
    eng.add_argument("--spmm", choices=BACKENDS, default="torch",
                     help="SpMM backend (default torch; scipy: CPU only)")
    eng.add_argument("--agg-chunks", type=int, default=1, metavar="K",
                     help="cut each aggregation into K row chunks (default 1)")
    eng.add_argument("--overlap", action="store_true",
                     help="overlap each chunk's all-reduce with the next chunk's SpMM")
    eng.add_argument("--tune-gemms", action="store_true",
                     help="time the GEMM formulations once per call site and keep the fastest "
                          "(runs then differ in the last bits; default: a fixed rule by shape)")
    eng.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True,
                     help="large CPU tensors on transparent huge pages: far fewer page faults "
                          "(default on)")
    eng.add_argument("--no-timers", dest="timers", action="store_false",
                     help="do not time kernels and collectives (no timing breakdown)")
    add_precision_options(eng)
    return p


# ---- checks --------------------------------------------------------------------------------
MAX_TIMEOUT_S = 365 * 86400  # a year: longer is no timeout, and timedelta overflows past ~1e14 s
# Adam's step moves every weight by about the learning rate: far above these a run can only
# diverge (or overflow float32 before the loss shows it), so they are typing mistakes
MAX_LR = 1e3
MAX_WEIGHT_DECAY = 1e3


def train_config(a: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` of the options; `UsageError` naming the flag of a value it refuses."""
    try:
        return TrainConfig(
            epochs=a.epochs, lr=a.lr, weight_decay=a.weight_decay, seed=a.seed,
            eval_every=a.eval_every, weight_decay_scope=a.weight_decay_on,
            optimizer=a.optimizer, momentum=a.momentum, clip_grad_norm=a.clip_grad_norm,
            lr_schedule=a.lr_schedule, lr_step=a.lr_step, lr_gamma=a.lr_gamma,
            lr_patience=a.lr_patience, lr_min=a.lr_min, patience=a.patience)
    except TrainConfigError as e:
        problem = e.problem.replace("eval_every", "--eval-every")  # the one other field named
        raise UsageError(f"--{e.field.replace('_', '-')} {problem}") from None


def check_numbers(a: argparse.Namespace) -> None:
    """Range checks of the numeric options."""
    rules = [
        (a.epochs >= 0, f"--epochs must be >= 0, got {a.epochs}"),
        (0 < a.lr <= MAX_LR, f"--lr must be > 0 and at most {MAX_LR:g}, got {a.lr}"),
        (0 <= a.weight_decay <= MAX_WEIGHT_DECAY,  # both false for NaN
         f"--weight-decay must be >= 0 and at most {MAX_WEIGHT_DECAY:g}, got {a.weight_decay}"),
        (a.eval_every >= 0, f"--eval-every must be >= 0, got {a.eval_every}"),
        (a.checkpoint_every is None or a.checkpoint_every >= 1,
         f"--checkpoint-every must be >= 1, got {a.checkpoint_every}"),
        (0 < a.timeout <= MAX_TIMEOUT_S,  # also false for NaN; inf overflows timedelta
         f"--timeout must be > 0 and at most {MAX_TIMEOUT_S} seconds, got {a.timeout}"),
        (a.agg_chunks >= 1, f"--agg-chunks must be >= 1, got {a.agg_chunks}"),
        (a.world_size is None or 1 <= a.world_size <= MAX_WORLD_SIZE,
         f"--world-size must be in [1, {MAX_WORLD_SIZE}], got {a.world_size}"),
        (0 <= a.seed <= MAX_SEED, f"--seed must be in [0, 2**63 - 1], got {a.seed}"),
        (a.threads is None or a.threads >= 1, f"--threads must be >= 1, got {a.threads}"),
    ]
    for ok, message in rules:
        if not ok:
            raise UsageError(message)
    check_model_options(a)
    train_config(a)
    if a.threads is None:
        try:
            env_threads()  # a bad OMP_NUM_THREADS is refused before any worker starts
        except LaunchError as e:
            raise UsageError(f"{e}, or give --threads N") from None
    if a.resume not in (True, False, "auto"):
        raise UsageError(f"--resume takes no value or 'auto', got {a.resume!r}")
    if a.resume and not a.checkpoint:
        raise UsageError("--resume needs --checkpoint DIR (where the checkpoint is)")
    if a.checkpoint_every is not None and not a.checkpoint:
        raise UsageError("--checkpoint-every needs --checkpoint DIR")
    if a.save_embeddings and not a.save_predictions:
        raise UsageError("--save-embeddings needs --save-predictions DIR (where they go)")
    if a.export_best and not a.export:
        raise UsageError("--export-best needs --export FILE.pt (where the weights go)")
    if a.cache and a.no_cache:
        raise UsageError("--cache DIR and --no-cache contradict each other; give one")
    if a.shards and (a.cache or a.no_cache):
        raise UsageError("--shards DIR is a store already; --cache/--no-cache apply to "
                         "--dataset runs")
    if a.symmetrize and a.shards:
        raise UsageError("--symmetrize changes the graph, but a --shards store was cut from it "
                         "already; drop --symmetrize (or cut a store from a symmetrized graph)")


# ---- recipes ------------------------------------------------------------------------------
# Recipe field -> the option that sets it (a field without an option is set on the model).
_RECIPE_FLAGS = {"num_layers": "layers", "kind": "model"}


def explicit_options(argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options given on the command line (a recipe does not override
    them)."""
    shadow = build_parser()
    for action in shadow._actions:  # noqa: SLF001 — argparse has no public way to list them
        action.default = argparse.SUPPRESS
    given, _ = shadow.parse_known_args(argv)
    return set(vars(given))


def apply_recipe(a: argparse.Namespace, explicit: set[str]) -> dict:
    """Set the recipe's values on the options not given explicitly; return the model fields no
    option sets (applied to the `ModelConfig`). Raises `RecipeError` (a user error) when the
    engine lacks a model option the recipe needs."""
    recipe = get_recipe(a.recipe)
    recipe.check()
    rest = {}
    values = {**recipe.model, **recipe.train, "symmetrize": recipe.symmetrize,
              "dataset": recipe.dataset}
    for field, value in values.items():
        dest = _RECIPE_FLAGS.get(field, field)
        if dest in explicit or (dest == "dataset" and a.shards):  # a store fixes its dataset
            continue
        if hasattr(a, dest):
            setattr(a, dest, value)
        else:
            rest[field] = value
    return rest


# ---- options -> RunOptions ------------------------------------------------------------
@dataclass
class _Shape:
    """What the options say about the problem before the model is built."""

    grid: GridShape | None
    layers: int | None
    order: str | None
    dataset: str


def _from_store(a: argparse.Namespace, shape: _Shape) -> _Shape:
    """With --shards the store's manifest fixes the grid, layers, orders, permutation and dataset;
    flags may repeat them but not contradict them."""
    from plexus.partitioners import read_manifest, store_aggregation  # noqa: PLC0415

    if a.dataset or a.root:
        raise UsageError("--shards DIR already fixes the dataset; drop --dataset/--root")
    manifest = read_manifest(a.shards)
    store_grid = GridShape.of(manifest["grid"])
    if shape.grid is not None and shape.grid != store_grid:
        raise UsageError(f"--grid {shape.grid} but {a.shards} was cut for grid {store_grid}")
    held, decl = store_aggregation(manifest), KINDS[a.model]
    if decl.aggregation != held:
        raise UsageError(f"{a.shards} holds Â normalized for the {held} aggregation, --model "
                         f"{a.model} needs {decl.aggregation}: cut a store for it with "
                         f"plexus-partition --aggregation {decl.aggregation}, or train a model "
                         f"of the {held} aggregation from this one")
    # the manifest counts stages: a layer of some kinds is several (GIN's: agg, then dense)
    stages, per = int(manifest["num_stages"]), len(decl.stage_ops)
    if stages % per:
        raise UsageError(f"{a.shards} was cut for {stages} stages, not a whole number of --model "
                         f"{a.model} layers ({per} stages each); cut it for {per} stages per "
                         "layer")
    layers = stages // per
    if shape.layers is not None and shape.layers != layers:
        raise UsageError(f"--layers {shape.layers} but {a.shards} was cut for {layers} layers")
    kind = manifest["permutation"]["kind"]
    if a.perm is not None and a.perm != kind:
        raise UsageError(f"--perm {a.perm} but {a.shards} was cut with permutation {kind}")
    store_orders = ",".join(manifest["orders"])
    order = shape.order or ",".join(manifest["orders"][::per])  # each layer's first stage
    check_order(order, layers)
    store_model = model_config(a, num_layers=layers, order=order)
    resolved = ",".join(store_model.orders(int(manifest["num_features"]),
                                           int(manifest["num_classes"])))
    if resolved != store_orders:
        raise UsageError(f"--order {order} gives layer orders {resolved} but {a.shards} was cut "
                         f"for {store_orders}")
    check_grid_fits(store_grid, store_model, int(manifest["num_nodes"]),
                    int(manifest["num_features"]),
                    int(manifest["num_classes"]))
    dataset = str(manifest.get("dataset", a.shards))
    return _Shape(store_grid, layers, order, dataset)


def _check_world(grid: GridShape | None, a: argparse.Namespace, env: JobEnv | None
                 ) -> tuple[int | None, str]:
    """The job's world size (None: not known yet), consistent with the grid and --world-size,
    and for --grid auto with no size given (outside a launcher: one rank per local GPU or CPU
    core) the words saying where the size came from ('' otherwise)."""
    world = env.world_size if env is not None else None
    if a.world_size is not None and world is not None and a.world_size != world:
        raise UsageError(f"--world-size {a.world_size} but the launcher started {world} ranks")
    world = world if world is not None else a.world_size
    if grid is None and world is None:
        per = "GPU" if default_device(a.device).type == "cuda" else "CPU core"
        return local_world_size(a.device), f", one per {per} here"
    if grid is not None and world is not None:
        grid.check_world(world, "the launcher started" if env is not None else "--world-size is")
    return world, ""


def build_options(a: argparse.Namespace, env: JobEnv | None) -> RunOptions:
    """Validate the parsed options and turn them into `RunOptions`.

    Under a launcher (``env`` set) every rank runs this, so it stays cheap there; the launching
    process of a local run (``env`` None) also checks the dataset, the checkpoint to resume from
    and the output paths before any worker starts.
    """
    recipe_fields = apply_recipe(a, getattr(a, "explicit", set())) if a.recipe else {}
    check_numbers(a)
    if a.dataset is not None and not a.dataset.strip():  # '' must not quietly mean cora
        raise UsageError("--dataset is empty; give a spec such as cora, ogbn-arxiv or npz:PATH")
    # every output resolved and compared before anything is read or written (cheap: stats)
    check_claims(run_claims(a.checkpoint, a.log_json, a.log_csv, a.tensorboard,
                            a.save_predictions, a.export,
                            dataset_files(a.dataset, a.root, a.shards),
                            None if a.no_cache else a.cache))
    a.resume = resolve_resume(a, env is None or env.rank == 0)
    # no --grid (and no store to take it from) is --grid auto
    grid = None if a.grid is None or a.grid.strip().lower() == "auto" else _parse_grid(a.grid)
    shape = _Shape(grid, a.layers, a.order, a.dataset or "cora")
    if a.shards:
        shape = _from_store(a, shape)
    layers = resolve_layers(shape.layers)
    order = resolve_order(shape.order)
    check_order(order, layers)
    engine = EngineConfig(spmm_backend=a.spmm, agg_chunks=a.agg_chunks, overlap=a.overlap,
                          tune_gemms=a.tune_gemms, timers=a.timers, huge_pages=a.huge_pages,
                          dtype=a.dtype, recompute=a.recompute)
    try:
        device = default_device(a.device)
    except LaunchError as e:  # --device cuda where there is none
        raise UsageError(f"--device {a.device}: {e}") from None
    try:
        check_backend(a.spmm, device, engine.torch_dtype())
    except ValueError as e:  # the library's message names no flag
        if a.dtype != "fp32":
            raise UsageError(f"--spmm {a.spmm} with --dtype {a.dtype}: {e}") from None
        raise
    world, world_note = _check_world(shape.grid, a, env)
    calibration = run_calibration(a.calibration)
    model = model_config(a, num_layers=layers, order=order, **recipe_fields)
    if a.save_embeddings and model.num_layers < 2:
        raise UsageError("--save-embeddings needs a hidden layer (--layers 2 or more)")
    grid = shape.grid
    fault = Fault.parse(a.inject_fault) if a.inject_fault else None
    memory_checked = a.force
    cache_dir = None if a.no_cache or a.shards else Path(a.cache or default_cache_dir())
    if env is None:
        graph = None
        if not a.shards:
            graph = precheck_dataset(shape.dataset, a.root, a.seed)
            if graph is not None and a.symmetrize:
                graph = graph.to_undirected()
            ranks = grid.world_size if grid is not None else world
            # how the run will hold the model, for every prediction printed before it starts
            # (the --grid auto line, the memory check): as the workers' summary prices it
            run = {"perm": a.perm or DEFAULT_PERMUTATION, "dtype_bytes": engine.dtype_bytes,
                   "recompute": engine.recompute,
                   "from_store": cache_dir is not None and (bool(a.cache) or ranks > 1)}
            if graph is not None:
                run.update(multilabel=graph.multilabel,
                           symmetric=symmetric(graph, model.aggregation))
            if grid is None:  # the performance model needs the graph's sizes
                if graph is None:
                    graph = load_dataset(shape.dataset, a.root, seed=a.seed)
                    graph = graph.to_undirected() if a.symmetrize else graph
                    run.update(multilabel=graph.multilabel,
                               symmetric=symmetric(graph, model.aggregation))
                grid, why = auto_grid_choice(world, graph.num_nodes,  # type: ignore[arg-type]
                                             gcn_nnz(graph), graph.num_features,
                                             graph.num_classes, model, graph.name,
                                             world_note, calibration.calibration,
                                             world, **run)
                if not a.quiet:
                    console_line(f"{PROG}: {why}")
            sizes = ((graph.num_nodes, gcn_nnz(graph), graph.num_features, graph.num_classes)
                     if graph is not None else spec_sizes(shape.dataset, a.seed))
            if sizes is not None:  # otherwise every worker checks once it has its shard
                run_opts = {k: v for k, v in run.items() if k != "perm"}
                precheck_resources(grid, model, sizes, run["perm"], a.force,  # type: ignore
                                   device=a.device, **run_opts)
                memory_checked = True
        check_local_devices(grid.world_size, a.device)  # type: ignore[union-attr]
        if a.resume:  # the dataset is checked here when it was loaded, else by the workers
            dataset = None if graph is None else ckpt.DatasetInfo(
                graph.name, graph.num_nodes, graph.num_features, graph.num_classes,
                graph_hash(graph))
            payload = load_resume(a.checkpoint, model, a.epochs, dataset, a.seed,
                                  train=train_config(a))
            if a.export_best:
                check_best_kept(payload, str(ckpt.checkpoint_path(a.checkpoint)))
        if a.log_json:  # the file itself is opened by rank 0 (an existing one stays until the end)
            check_log_path(a.log_json)
        if a.checkpoint:
            check_checkpoint_dir(a.checkpoint)
            # refused now if another run holds the directory; rank 0 locks it for the run
            ckpt.lock_directory(Path(a.checkpoint).expanduser()).release()
        if a.save_predictions:
            check_outputs_dir(a.save_predictions, "--save-predictions")
        if a.export:
            check_output_file(a.export, "--export")
        check_targets(a.log_csv, a.tensorboard)
    opts = RunOptions(
        grid=grid, dataset=shape.dataset, root=a.root, model=model,
        train=train_config(a),
        engine=engine,
        perm=a.perm, shards=a.shards, checkpoint=a.checkpoint,
        checkpoint_every=a.checkpoint_every or 10, resume=a.resume, log_json=a.log_json,
        quiet=a.quiet, timeout_s=a.timeout, check_memory=not memory_checked, fault=fault,
        save_predictions=a.save_predictions, save_embeddings=a.save_embeddings, export=a.export,
        export_best=a.export_best, symmetrize=a.symmetrize, log_csv=a.log_csv,
        tensorboard=a.tensorboard, cache_dir=cache_dir and str(cache_dir.expanduser()),
        cache_explicit=bool(a.cache), device=a.device, calibration=calibration.path,
        threads=a.threads, cache_max_bytes=cache_cap(a))
    return opts


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


def from_cache(opts: RunOptions, force: bool) -> tuple[RunOptions, StoreUse | None]:
    """The launching process finds or builds the store of the run's dataset in the cache (once,
    for all ranks, after every cheap check has passed) and says which in one line; the ranks
    then read their shards from it. Returns the options and the hold on the store against
    eviction (keep it until the run ends)."""
    def say(text: str) -> None:
        if not opts.quiet:
            console_line(f"{PROG}: {text}")

    assert opts.grid is not None  # the launching process has resolved --grid auto
    opts, store = cached_options(opts, Cache(Path(opts.cache_dir), say),  # type: ignore
                                 opts.grid.world_size, force=force)
    say(store.line())
    return opts, store.hold


def cache_cap(a: argparse.Namespace) -> int | None:
    """The cache's size cap in bytes (--cache-max-gb, else the environment's; None: none)."""
    if a.cache_max_gb is not None and not 0 < a.cache_max_gb < float("inf"):
        raise UsageError(f"--cache-max-gb must be a number of GiB > 0, got {a.cache_max_gb}")
    return cap_bytes(a.cache_max_gb)


def cache_command(a: argparse.Namespace) -> int:
    """``--cache-list`` / ``--cache-clean``: the cache directory's contents, or what no run
    holds removed; status 0."""
    root = Path(a.cache or default_cache_dir()).expanduser()
    cap = cache_cap(a)
    if a.cache_clean:
        gone = evict(root, cap or 0)
        freed = sum(e.bytes for e in gone)
        print(f"{PROG}: removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} "
              f"({format_bytes(freed)}) from {root}"
              + (f", down to the cap of {format_bytes(cap)}" if cap else "")
              + "; what runs hold stays")
    found = entries(root)
    if a.cache_list or not a.cache_clean:
        for e in reversed(found):  # most recently used first
            used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
            print(f"{format_bytes(e.bytes):>10}  {e.kind:<5}  last used {used}"
                  f"{'  IN USE' if e.in_use else ''}  {e.path}")
    total = sum(e.bytes for e in found)
    print(f"{PROG}: cache {root}: {len(found)} entr{'y' if len(found) == 1 else 'ies'}, "
          f"{format_bytes(total)}" + (f" (cap {format_bytes(cap)})" if cap else
                                         f" (no cap: --cache-max-gb or ${MAX_GB_ENV})"))
    return 0


def resolve_resume(a: argparse.Namespace, speak: bool) -> bool:
    """``--resume auto``: resume when the checkpoint file exists, else start at epoch 0 (said
    once when ``speak``). Every rank decides before the process group forms, so before any
    checkpoint of this run can appear: all decide alike."""
    if a.resume != "auto":
        return bool(a.resume)
    path = ckpt.checkpoint_path(Path(a.checkpoint).expanduser())
    if path.is_file():
        return True
    if speak and not a.quiet:
        print(f"{PROG}: --resume auto: no checkpoint at {path} yet; starting from epoch 0",
              flush=True)
    return False


def _parse_grid(text: str) -> GridShape:
    try:
        return GridShape.parse(text)
    except GridError as e:
        raise UsageError(f"--grid: {e}; or 'auto' with --world-size") from None


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
        args.explicit = explicit_options(argv)
        if args.cache_list or args.cache_clean:
            return cache_command(args)
        opts = build_options(args, env)
        if env is None and uses_cache(opts, None):
            opts, hold = from_cache(opts, args.force)
    except (*USER_ERRORS, RecipeError, ValueError, OSError) as e:
        # Under a launcher every rank checks the same options: rank 0 speaks for them all.
        if env is None or env.rank == 0:
            print(error_line(e), file=sys.stderr, flush=True)
        return 2
    except ChildDied as e:  # the partitioning child was killed (the OOM killer, a signal)
        print(error_line(e), file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    try:
        if env is not None:  # a rank of torchrun/srun: start-up counts from its own start
            return run_rank(opts, env)
        return run_local(dataclasses.replace(opts, launched_at=launched_at,
                                             setup_script_s=script_s))
    finally:
        if hold is not None:  # the store may be evicted once the run is over
            hold.release()


if __name__ == "__main__":
    sys.exit(main())
