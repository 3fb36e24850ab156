"""Checks of a run's input that need no process group: paths, grids, datasets, memory.

The launching process runs them before any worker starts (so bad input costs nothing); under a
launcher each rank runs the cheap ones itself. Each raises a typed error with a one-line message.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from plexus.api.outputs import OutputsError, check_outputs_target
from plexus.api.memcheck import (available_memory, check_memory, check_partition_memory,
                                 predicted_peaks)
from plexus.core.atomic import UnsafeTargetError, output_target
from plexus.core.cli import UsageError
from plexus.core.grid import GridShape
from plexus.core.layout import grid_misfit
from plexus.core.model import ModelError, parse_order
from plexus.datasets import DatasetError, Graph, load_dataset
from plexus.core.model import ModelConfig
from plexus.partitioners import RankShard
from plexus.core.units import format_bytes, format_seconds
from plexus.perfmodel import Calibration, ModelSpec, choose_grid, pricing, rank_configs
from plexus.runtime.env import default_device

from .cache import reads_store
from .checkpoint import CHECKPOINT_NAME, lock_directory
from .epochlogs import check_targets
from .plan import GraphSizes, RunPlan

# Datasets up to this size are loaded once in the launching process to check them before any
# worker starts; bigger ones only have their paths checked there (each worker loads them anyway).
PRECHECK_MAX_BYTES = 64 << 20


def check_writable(path: Path, what: str) -> None:
    """Raise `UsageError` unless files can be created in directory ``path`` (made if missing)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror or e})") from None


def check_output_file(path: Path | str, what: str) -> Path:
    """Raise `UsageError` unless ``path`` is a regular file or absent (never a device, a FIFO,
    a directory or a symlink to one), with its temporary file ``path.tmp`` likewise, and files
    can be created beside it; returns the file that will be replaced."""
    path = Path(path).expanduser()
    try:
        target = output_target(path)
        output_target(path.with_name(path.name + ".tmp"))
    except UnsafeTargetError as e:
        raise UsageError(f"{what} {e}") from None
    check_writable(target.parent, what)
    return target


def check_outputs_dir(path: Path | str, what: str) -> Path:
    """Raise `UsageError` unless ``path`` can become an outputs directory
    (`plexus.api.outputs`): absent, empty, or an earlier one, with files creatable beside it.
    A name ending in .npz is refused: outputs are a directory of .npy files now."""
    path = Path(path).expanduser()
    if path.suffix.lower() == ".npz":
        raise UsageError(f"{what} {path}: outputs are a directory of .npy files (pred.npy, "
                         "logits.npy, embeddings.npy), written by every rank; give a directory "
                         f"name such as {path.with_suffix('')}")
    try:
        target = check_outputs_target(path)
    except OutputsError as e:
        raise UsageError(f"{what} {e}") from None
    check_writable(target.parent, what)
    return target


def check_log_path(path: str) -> None:
    """Raise `UsageError` unless the JSON log can be created at ``path`` (``--log-json``)."""
    check_output_file(Path(path).expanduser(), "--log-json")


def check_checkpoint_dir(path: str) -> None:
    """Raise `UsageError` unless ``path`` is (or can be made) a directory in which the
    checkpoint file can be written (``--checkpoint``)."""
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--checkpoint {path}: not a directory")
    check_writable(directory, "--checkpoint")
    check_output_file(directory / CHECKPOINT_NAME, "--checkpoint")


def check_output_paths(plan: RunPlan) -> None:
    """Raise `UsageError` unless rank 0 can write the run's checkpoint directory, its outputs
    directory and its weights export."""
    if plan.checkpoint:
        check_checkpoint_dir(plan.checkpoint)
    if plan.save_predictions:
        check_outputs_dir(plan.save_predictions, "--save-predictions")
    if plan.export:
        check_output_file(plan.export, "--export")


def check_launch_outputs(plan: RunPlan) -> None:
    """Every output of the run checked by the launching process before any worker starts: the
    JSON log (the file itself is opened by rank 0; an existing one stays until the end), rank
    0's paths, the checkpoint directory not held by another run (rank 0 locks it for the run),
    the CSV and TensorBoard targets."""
    if plan.log_json:
        check_log_path(plan.log_json)
    check_output_paths(plan)
    if plan.checkpoint:
        lock_directory(Path(plan.checkpoint).expanduser()).release()
    check_targets(plan.log_csv, plan.tensorboard)


def auto_grid(world_size: int, spec: ModelSpec) -> GridShape:
    """The grid `plexus.perfmodel.choose_grid` predicts fastest for ``spec``."""
    return GridShape.of(choose_grid(world_size, spec))


def auto_grid_choice(world_size: int, spec: ModelSpec, ranks_note: str = "",
                     calibration: Calibration | None = None,
                     ranks_per_host: int | None = None) -> tuple[GridShape, str]:
    """`auto_grid`'s grid and one line saying why: its predicted epoch time and training peak
    per rank, the runner-up's, and what priced them (``--grid auto`` prints it, so the choice
    is never silent). ``spec``: the run as its summary prices it (`RunPlan.spec`), so the peak
    printed is the one the summary predicts. ``ranks_note`` follows the rank count (where it
    came from, when nobody gave it). ``calibration``: the machine's rates
    (`plexus.perfmodel.resolve_calibration`; None: the built-in GPU rates, said as
    uncalibrated); ``ranks_per_host``: ranks of this job on one host
    (`plexus.perfmodel.pricing`)."""
    cal = calibration or Calibration()
    per_host, placement = pricing(cal, ranks_per_host)
    ranked = rank_configs(world_size, spec, cal, ranks_per_host=per_host, placement=placement)
    best = ranked[0]
    grid = GridShape.of(best.grid)
    assert grid == GridShape.of(choose_grid(world_size, spec, cal, ranks_per_host=per_host,
                                            placement=placement))  # one rule for both

    def figures(p) -> str:
        return (f"predicted epoch {format_seconds(p.time_s)}, training peak "
                f"{format_bytes(p.memory.total)} per rank")

    line = f"--grid auto: chose {grid} for {world_size} ranks{ranks_note} ({figures(best)})"
    if len(ranked) > 1:
        line += f"; runner-up {GridShape.of(ranked[1].grid)} ({figures(ranked[1])})"
    else:
        line += "; no other grid of that size"
    if cal.calibrated:
        return grid, line + f"; priced with {cal.label}; plexus-model ranks them all"
    return grid, (line + f"; {cal.label}: the times are not this machine's (plexus-bench "
                  "calibrate --out FILE, then --calibration FILE)")


def choose_run_grid(plan: RunPlan, sizes: GraphSizes, world: int,
                    calibration: Calibration | None, ranks_per_host: int | None,
                    ranks_note: str = "") -> tuple[GridShape, str]:
    """The grid of a ``--grid auto`` run on a graph of ``sizes`` and the line saying why
    (`auto_grid_choice`): the launching process's, or under torchrun/srun each rank's (the same
    on every rank)."""
    return auto_grid_choice(world, plan.spec(sizes, reads_store(plan, world)), ranks_note,
                            calibration, ranks_per_host)


def check_grid_fits(grid: GridShape, model: ModelConfig, sizes: GraphSizes) -> None:
    """Raise `UsageError` when an axis has more ranks than the dimension it cuts (see
    `plexus.core.layout.grid_misfit`)."""
    f, c = sizes.num_features, sizes.num_classes
    problem = grid_misfit(grid, model.plans(f, c), sizes.num_nodes, model.widths(f, c))
    if problem:
        raise UsageError(problem)


def check_order(order: str, num_layers: int) -> None:
    """--order is agg, combine, auto or one of those two per layer (`plexus.core.model.parse_order`,
    the one parser)."""
    try:
        parse_order(order, num_layers)
    except ModelError as e:
        raise UsageError(f"--order: {e}") from None


def shard_bytes(shard: RankShard) -> int:
    """Bytes of the arrays a rank's shard holds (its Â blocks and features)."""
    total = shard.features.nbytes
    for blk in shard.blocks.values():
        total += blk.data.nbytes + blk.indices.nbytes + blk.indptr.nbytes
    return total


def precheck_dataset(spec: str, root: str | None, seed: int) -> Graph | None:
    """Check a dataset spec before workers start; return the graph when it was cheap to load.

    Small inputs (the embedded Cora, files up to 64 MiB) are loaded, so any problem in them shows
    here; for bigger ones only the spec and the paths are checked and the workers load them.
    """
    kind, colon, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if root is not None and not Path(root).expanduser().is_dir():
        raise DatasetError(f"--root {root}: not a directory")
    if not colon and kind.startswith("ogbn-"):
        if root is None:
            raise DatasetError(f"{spec}: OGB datasets are read from --root DIR (never "
                               "downloaded); give the directory holding the dataset")
        from plexus.datasets.ogb_loader import check_files  # noqa: PLC0415 (imports ogb)

        check_files(spec.strip(), root)  # the loader's own offline check: file existence only
        return None
    if colon and kind in ("npz", "mtx", "edgelist", "planetoid") and rest.strip():
        path = Path(rest.strip()).expanduser()
        if not path.exists() and root is not None and not path.is_absolute():
            path = Path(root).expanduser() / path
        if path.is_file() and path.stat().st_size > PRECHECK_MAX_BYTES:
            return None
        if not path.exists() and kind != "planetoid":
            raise DatasetError(f"{spec}: {path} not found")
    if kind == "rmat":
        from plexus.datasets import parse_rmat_params  # noqa: PLC0415

        params = parse_rmat_params(rest if colon else "", seed)
        if int(params["scale"]) > 16:  # a big synthetic graph: the parameters are checked
            return None
    return load_dataset(spec, root, seed=seed)


def spec_sizes(spec: str, seed: int) -> GraphSizes | None:
    """The sizes of a dataset that was not loaded, where the spec alone tells them (R-MAT: nnz
    is the upper bound, every generated edge distinct, both directions, self loops); None
    otherwise."""
    kind, colon, rest = spec.strip().partition(":")
    if kind.strip().lower() != "rmat":
        return None
    from plexus.datasets import parse_rmat_params  # noqa: PLC0415

    p = parse_rmat_params(rest if colon else "", seed)
    n = 1 << int(p["scale"])
    return GraphSizes(n, n * (2 * int(p["edge_factor"]) + 1), int(p["features"]),
                      int(p["classes"]))


def precheck_resources(grid: GridShape, spec: ModelSpec, force: bool,
                       device: str | None = None) -> None:
    """Before any worker starts: unless ``force``, the predicted peak per rank of ``spec`` (the
    run as `RunPlan.spec` prices it), set-up included, fits what the local ranks will have."""
    if force:
        return
    where = default_device(device)
    peaks = predicted_peaks(replace(spec, device=where.type), grid)
    if where.type == "cuda":  # training on the GPUs, set-up (reading or cutting) in host RAM
        check_memory(peaks.training, available_memory(where, grid.world_size), grid)
        check_memory(peaks.setup, available_memory(torch.device("cpu"), grid.world_size), grid)
    else:
        check_memory(peaks.run, available_memory(where, grid.world_size), grid)


def precheck_partition(spec: str, seed: int, model: ModelConfig, perm: str) -> None:
    """Before partitioning the graph into a store in one process: its predicted peak fits the
    host (checked where the spec alone tells the graph's sizes)."""
    sizes = spec_sizes(spec, seed)
    if sizes is None:
        return
    priced = ModelSpec(sizes.num_nodes, sizes.nnz, sizes.num_features, sizes.num_classes, model,
                       perm=perm, from_store=True)
    check_partition_memory(predicted_peaks(priced, (1, 1, 1)).partition,
                           available_memory(torch.device("cpu"), 1))
