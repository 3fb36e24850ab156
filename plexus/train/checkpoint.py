"""Grid-independent training checkpoints: save on rank 0, load on every rank, any grid.

A checkpoint holds `plexus.engine.trainer.Trainer.full_state` (full unpadded parameters and the
optimizer's per-parameter state: Adam's moments or SGD's momentum, plus the epoch and the loop's
state: learning-rate schedule, rates, best epoch, early stop), the model and training
configuration, the dataset's identity (name, nodes, features, classes) and the run's
best-validation record. Only tensors and plain Python types
are stored, so it loads with ``torch.load(weights_only=True)``.

Writes are atomic: the new checkpoint goes to a temporary file in the same directory, is fsynced
and then renamed over the old one, so an interrupted save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.base.gate import UnsafeTargetError, open_trusted
from plexus_datasets.base.lockfile import FileLock, LockBusy, LockError, acquire
from plexus.api.training import TrainConfig, initial_parameters, initial_stats, split_name
from plexus_partition.model.cli import UsageError
from plexus_partition.model.model import ModelConfig

from .loopstate import LoopStateError, check_loop_state
from .plan import RunRequest
from plexus_datasets.base import owned

CHECKPOINT_NAME = "checkpoint.pt"
#: Held (flock) by the run that writes the directory's checkpoint: two runs never share one.
LOCK_NAME = "checkpoint.lock"
FORMAT_VERSION = 1
# The per-parameter state of each optimizer (AdamW's is Adam's)
_MOMENTS = {"adam": {"step", "exp_avg", "exp_avg_sq"}, "adamw": {"step", "exp_avg", "exp_avg_sq"},
            "sgd": {"momentum_buffer"}}
# Training fields a resumed run must share with its checkpoint: the optimizer's state and the
# schedule's are only meaningful for these (the epochs, patience and clipping may change); a
# new --lr is refused, not taken: the saved rates and schedule are those of the old one
_LOOP_KEYS = ("optimizer", "lr", "momentum", "lr_schedule", "lr_step", "lr_gamma",
              "lr_patience", "lr_min")
# Model fields that change the parameter set or shapes, or the function they compute (the
# activation): a checkpoint is only usable when they match.
_MODEL_KEYS = ("kind", "num_layers", "hidden", "bias", "learnable_features", "norm", "residual",
               "train_eps", "activation")


class CheckpointError(ValueError):
    """A missing, unreadable or incompatible checkpoint (a one-line message)."""


@dataclass(frozen=True)
class DatasetInfo:
    """What identifies the graph a model was trained on."""

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    sha256: str = ""  # the graph's content (`plexus_partition.store.graph_hash`)

    def describe(self) -> str:
        return (f"{self.name} (N={self.num_nodes}, F={self.num_features}, "
                f"C={self.num_classes})")


def checkpoint_path(directory: str | os.PathLike) -> Path:
    """The checkpoint file inside ``directory``."""
    return Path(directory) / CHECKPOINT_NAME


#: An exclusive lock on a checkpoint directory (`lock_directory`); ``release`` ends it, as does
#: the end of the process holding it, however it ends.
DirectoryLock = FileLock


def lock_directory(directory: str | os.PathLike) -> DirectoryLock:
    """Lock ``directory`` for this run's checkpoints (`plexus_datasets.base.lockfile`: no link
    followed, nothing truncated, only a regular file of one link written). Raises `CheckpointError`
    when another live run holds it (its saves would delete this run's temporary files, and the other
    way round) or the lock file is not one."""
    try:
        return acquire(Path(directory) / LOCK_NAME)
    except LockBusy as e:
        who = f" (pid {e.holder})" if e.holder is not None else ""
        raise CheckpointError(f"--checkpoint {directory}: in use by another running "
                              f"plexus-train{who}; wait for it to end or use another "
                              "directory") from None
    except LockError as e:
        raise CheckpointError(str(e)) from None


def make_checkpoint(full_state: dict, model: ModelConfig, train: TrainConfig,
                    dataset: DatasetInfo, extra: dict | None = None) -> dict:
    """The object `save_checkpoint` writes: ``full_state`` plus what a resume must check."""
    return {"format": FORMAT_VERSION, "state": full_state, "model": model.as_dict(),
            "train": asdict(train), "dataset": asdict(dataset), "extra": dict(extra or {})}


def save_checkpoint(directory: str | os.PathLike, payload: dict) -> Path:
    """Write ``payload`` to DIR/checkpoint.pt atomically; returns the path. Call on one rank."""
    target = checkpoint_path(directory)
    with atomic_file(target) as f:
        torch.save(payload, f)
    for stale in target.parent.glob(f".{CHECKPOINT_NAME}.*.tmp"):  # left by a killed save
        owned.remove_file(stale)
    return target


def load_checkpoint(directory: str | os.PathLike) -> dict:
    """Read DIR/checkpoint.pt (tensors on the CPU). Raises `CheckpointError` if it is missing,
    unreadable, or another user could have put it there (their file, their folder, a link of
    theirs on the way: `plexus_datasets.base.gate`, checked before it is opened)."""
    path = checkpoint_path(directory)
    try:  # the gate, before a byte is read: no checkpoint of another user, nor through their link
        f = open_trusted(path)
    except UnsafeTargetError as e:
        raise CheckpointError(f"--resume {e}") from None
    except OSError:
        raise CheckpointError(f"--resume: no checkpoint at {path}") from None
    try:
        with f:  # read from the descriptor the gate checked, whatever the name holds now
            payload = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, not a torch file, unexpected types
        text = " ".join(str(e).split())[:200]
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {text})") from None
    problem = _structure_problem(payload)
    if problem:
        raise CheckpointError(f"{path}: not a plexus-train checkpoint (format {FORMAT_VERSION}): "
                              f"{problem}")
    return payload


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _structure_problem(payload: Any) -> str | None:
    """What is wrong with the types of a loaded checkpoint's fields (None: nothing)."""
    if not isinstance(payload, dict):
        return f"a {type(payload).__name__}, not a dict"
    if payload.get("format") != FORMAT_VERSION or isinstance(payload.get("format"), bool):
        return f"format {payload.get('format')!r}"
    for key in ("state", "model", "train", "dataset"):
        if not isinstance(payload.get(key), dict):
            return f"{key} is missing or not a dict"
    state, dataset = payload["state"], payload["dataset"]
    if not _is_int(state.get("epoch")) or state["epoch"] < 0:
        return f"epoch {state.get('epoch')!r} is not a count of epochs"
    if not isinstance(state.get("params"), dict) or not isinstance(state.get("adam"), dict):
        return "params or adam is missing or not a dict"
    for key, what in (("params", "parameter"), ("stats", "running statistic")):
        if not isinstance(state.get(key, {}), dict):
            return f"{key} is not a dict"
        for name, value in state.get(key, {}).items():
            if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                return f"{what} {name!r} is not a tensor"
    for name, moments in state["adam"].items():
        if not isinstance(moments, dict) or set(moments) not in _MOMENTS.values():
            return (f"Adam state of {name!r} is not step, exp_avg and exp_avg_sq (nor SGD's "
                    "momentum_buffer)")
        if not (_is_number(moments.get("step", 0)) and moments.get("step", 0) >= 0) or not all(
                isinstance(v, torch.Tensor) for k, v in moments.items() if k != "step"):
            return f"optimizer state of {name!r} has fields of the wrong type"
    loop = state.get("loop", {})
    if (not isinstance(loop, dict) or not isinstance(loop.get("lrs", []), list)
            or not isinstance(loop.get("schedule") or {}, dict)
            or not (loop.get("stopped") is None or _is_int(loop["stopped"]))):
        return "the training loop's state has fields of the wrong type"
    if (set(dataset) - {"name", "num_nodes", "num_features", "num_classes", "sha256"}
            or not isinstance(dataset.get("name"), str)
            or not isinstance(dataset.get("sha256", ""), str)
            or not all(_is_int(dataset.get(k)) and dataset[k] >= 1
                       for k in ("num_nodes", "num_features", "num_classes"))):
        return "the dataset record has fields of the wrong type"
    model = payload["model"]
    if not (_is_int(model.get("num_layers")) and _is_int(model.get("hidden"))
            and isinstance(model.get("bias"), bool)
            and isinstance(model.get("learnable_features"), bool)):
        return "the model record has fields of the wrong type"
    extra = payload.get("extra", {})
    if not isinstance(extra, dict):
        return "extra is not a dict"
    kept = extra.get("best_params")
    if kept is not None and (not isinstance(kept, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in kept.items())):
        return "the best-validation weights are not a dict of tensors"
    best = extra.get("best")
    if best is not None:
        if not isinstance(best, dict) or set(best) - {"epoch", "val_acc", "test_acc", "train_acc"}:
            return "the best-validation record is not a dict of its fields"
        if not (best.get("epoch") is None or _is_int(best["epoch"])) or not all(
                best.get(k) is None or _is_number(best[k])
                for k in ("val_acc", "test_acc", "train_acc")):
            return "the best-validation record has fields of the wrong type"
    return None


def parameter_shapes(model: ModelConfig, num_nodes: int, num_features: int,
                     num_classes: int) -> dict[str, tuple[int, ...]]:
    """Name -> full unpadded shape of every trainable tensor of ``model`` (the names of
    `plexus.engine.model.DistributedModel.named_shards`, by the engine's own initialization)."""
    plans = model.plans(num_features, num_classes)
    init = initial_parameters(0, plans, model.widths(num_features, num_classes))
    shapes: dict[str, tuple[int, ...]] = {k: tuple(v.shape) for k, v in init.items()}
    if model.learnable_features:
        shapes["features"] = (num_nodes, num_features)
    return shapes


def buffer_shapes(model: ModelConfig, num_features: int,
                  num_classes: int) -> dict[str, tuple[int, ...]]:
    """Name -> full shape of every buffer a model's state holds besides its parameters (the
    BatchNorm running statistics), from the engine's own set (`initial_stats`), so that a
    buffer a new layer kind adds is checked like the others."""
    plans = model.plans(num_features, num_classes)
    return {k: tuple(v.shape) for k, v in
            initial_stats(plans, model.widths(num_features, num_classes)).items()}


#: Buffers that hold a variance (by name, as `split_name` reads it): never negative.
NONNEGATIVE_BUFFERS = ("var",)


def _check_tensors(tensors: dict, wanted: dict[str, tuple[int, ...]], where: str,
                   what: str, nonnegative: frozenset[str] = frozenset()) -> None:
    """Exactly the names of ``wanted``, each a dense float tensor of its shape, finite, and
    non-negative where named in ``nonnegative``; one `CheckpointError` line for the first
    problem."""
    if set(tensors) != set(wanted):
        missing, unknown = sorted(set(wanted) - set(tensors)), sorted(set(tensors) - set(wanted))
        raise CheckpointError(f"{where} does not hold this model's {what} (missing "
                              f"{missing or 'none'}, unknown {unknown or 'none'})")
    for name, shape in wanted.items():
        t = tensors[name]
        if t.layout != torch.strided or not t.is_floating_point() or tuple(t.shape) != shape:
            raise CheckpointError(f"{where}: {name} is a {t.layout} {t.dtype} tensor of shape "
                                  f"{tuple(t.shape)}; the model needs a dense float tensor of "
                                  f"shape {shape}")
        if not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{where}: {name} holds NaN or infinite values; it is no state "
                                  "to resume from")
        if name in nonnegative and bool((t < 0).any()):
            raise CheckpointError(f"{where}: {name} has negative values; it holds a variance")


def check_state(payload: dict, model: ModelConfig, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` unless the checkpoint holds exactly ``model``'s tensors at their
    full shapes for the checkpoint's dataset, finite: the parameters, Adam moments of the same
    shapes (exp_avg_sq non-negative), every buffer (`buffer_shapes`: running means, variances
    non-negative) and the best-validation weights when kept (a checkpoint that
    `load_checkpoint` returned, checked by `check_model`)."""
    d = payload["dataset"]
    wanted = parameter_shapes(model, d["num_nodes"], d["num_features"], d["num_classes"])
    buffers = buffer_shapes(model, d["num_features"], d["num_classes"])
    state = payload["state"]
    params, adam = state["params"], state["adam"]
    _check_tensors(params, wanted, where, "parameters")
    if adam and set(adam) != set(params):  # Adam keeps state for all of them or none
        raise CheckpointError(f"{where} has Adam state for {sorted(adam)}, not for every "
                              f"parameter {sorted(params)}")
    for name in adam:
        moments = [k for k in adam[name] if k != "step"]
        optimizer = "SGD" if moments == ["momentum_buffer"] else "Adam"
        _check_tensors({f"{name} {optimizer} {k}": adam[name][k] for k in moments},
                       {f"{name} {optimizer} {k}": wanted[name] for k in moments},
                       where, f"{optimizer} state", frozenset({f"{name} Adam exp_avg_sq"}))
    variances = frozenset(n for n in buffers if split_name(n)[0] in NONNEGATIVE_BUFFERS)
    _check_tensors(state.get("stats", {}), buffers, where, "running statistics", variances)
    kept = extra(payload).get("best_params")
    if kept is not None:
        _check_tensors(kept, {**wanted, **buffers}, where, "best-validation weights", variances)


def check_epochs(payload: dict, epochs: int, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` if the checkpoint is already past ``epochs``."""
    done = saved_epoch(payload)
    if done > epochs:
        raise CheckpointError(f"{where} is at epoch {done}, past --epochs {epochs}; give "
                              f"--epochs {done} or more to continue it")


def check_seed(payload: dict, seed: int, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` if the run would continue with another seed than the checkpoint
    was trained with: the dropout masks of every later epoch follow the seed (a resume replays
    the uninterrupted run exactly), so a changed seed is refused, not silently taken."""
    saved = payload.get("train", {}).get("seed")
    if _is_int(saved) and saved != seed:
        raise CheckpointError(f"--seed {seed} but {where} was trained with --seed {saved}: the "
                              "dropout masks of the epochs to come follow the seed; give "
                              f"--seed {saved} to continue it, or start a new --checkpoint "
                              "directory")


def check_loop(payload: dict, train: TrainConfig, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` if the run would continue with another optimizer or schedule
    than the checkpoint holds the state of (older checkpoints: Adam at a constant rate)."""
    saved, default = payload.get("train", {}), asdict(TrainConfig())
    wanted = asdict(train)
    diffs = [f"--{k.replace('_', '-')} {saved.get(k, default[k])!r:.20} (now {wanted[k]!r})"
             for k in _LOOP_KEYS if not _same_value(saved.get(k, default[k]), wanted[k])]
    if train.lr_schedule == "cosine" and saved.get("epochs") != train.epochs:
        diffs.append(f"--epochs {saved.get('epochs')!r:.20} (now {train.epochs}; the cosine "
                     "schedule anneals over them)")
    if diffs:
        raise CheckpointError(f"{where} was trained with " + ", ".join(diffs) + ": its "
                              "optimizer and schedule state are for those; give the same "
                              "options to continue it, or start a new --checkpoint directory")


def check_model(payload: dict, model: ModelConfig, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` if the checkpoint's model has other parameters than ``model``."""
    saved = payload.get("model", {})
    # the configs' values in the flat form (another kind's option: its default), with the
    # activation the flat form leaves out at ReLU; a field an older checkpoint lacks: the default
    def values(cfg: ModelConfig) -> dict:
        return {**cfg.as_dict(), "activation": cfg.activation}

    wanted, default = values(model), values(ModelConfig())
    diffs = [f"{k} {saved.get(k, default[k])!r:.60} (now {wanted[k]!r})" for k in _MODEL_KEYS
             if not _same_value(saved.get(k, default[k]), wanted[k])]
    if diffs:
        raise CheckpointError(f"{where} is from an incompatible model: " + ", ".join(diffs)
                              + "; use a new --checkpoint directory or matching options")


def _same_value(saved: Any, wanted: Any) -> bool:
    """Whether a checkpoint's field equals the run's (a field of another type never does, and
    comparing never raises: a damaged checkpoint may hold a tensor where a flag belongs)."""
    return type(saved) is type(wanted) and saved == wanted


def check_dataset(payload: dict, dataset: DatasetInfo, where: str = "checkpoint") -> None:
    """Raise `CheckpointError` if the checkpoint was trained on another graph."""
    saved = payload.get("dataset", {})
    if saved == asdict(dataset):
        return
    try:
        old = DatasetInfo(**saved)
    except TypeError:
        raise CheckpointError(f"{where} was trained on {saved!r}, this run uses "
                              f"{dataset.describe()}") from None
    if old.describe() == dataset.describe():  # same name and sizes, other content
        raise CheckpointError(f"{where} was trained on another {dataset.describe()}: the "
                              "graph's content differs (its files, or the --seed that "
                              "generated its features, labels or split)")
    raise CheckpointError(f"{where} was trained on {old.describe()}, this run uses "
                          f"{dataset.describe()}")


def saved_epoch(payload: dict) -> int:
    """Epochs completed when the checkpoint was written."""
    return int(payload["state"].get("epoch", 0))


def extra(payload: dict) -> dict[str, Any]:
    """The run's own record stored with the state (best validation so far, ...)."""
    value = payload.get("extra", {})
    return value if isinstance(value, dict) else {}


def load_resume(plan: RunRequest, dataset: DatasetInfo | None) -> dict:
    """The checkpoint of ``plan`` to resume from, checked against its model, epochs, seed,
    optimizer and schedule, (when known) the dataset, and for --export-best that it holds the
    best epoch's weights. Raises `CheckpointError` or `UsageError`."""
    assert plan.checkpoint is not None
    payload = load_checkpoint(plan.checkpoint)
    where = str(checkpoint_path(plan.checkpoint))
    check_model(payload, plan.model, where)
    check_epochs(payload, plan.train.epochs, where)
    check_seed(payload, plan.train.seed, where)
    check_loop(payload, plan.train, where)
    if dataset is not None:
        check_dataset(payload, dataset, where)
    check_state(payload, plan.model, where)
    try:
        check_loop_state(payload, plan.train, 1 if plan.train.weight_decay_scope == "all" else 2,
                         where)
    except LoopStateError as e:
        raise CheckpointError(str(e)) from None
    if plan.export_best:
        check_best_kept(payload, where)
    return payload


def check_best_kept(payload: dict, where: str) -> None:
    """--export-best after a resume needs the best epoch's weights in the checkpoint (written by
    runs with --export-best or on an OGB dataset) unless no epoch was evaluated yet."""
    kept = extra(payload)
    best = kept.get("best") or {}
    if best.get("epoch") is not None and "best_params" not in kept:
        raise UsageError(f"--export-best: {where} does not hold the weights of its best "
                         f"validation epoch {best['epoch']} (it was written without "
                         "--export-best); resume without --export-best, or start afresh")
