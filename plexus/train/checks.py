"""Checks of a run's input that need no process group: paths, outputs, datasets (the
checks that price the run from the graph's sizes are the plan's: `plexus.train.plan`).

The launching process runs them before any worker starts (so bad input costs nothing); under a
launcher each rank runs the cheap ones itself. Each raises a typed error with a one-line message.
"""

from __future__ import annotations

from pathlib import Path

from plexus.api.outputs import OutputsError, check_outputs_target
from plexus.api.training import TrainConfig, needs_validation
from plexus_datasets.base import owned
from plexus_datasets.base.atomic import UnsafeTargetError, output_target
from plexus_datasets.base.gate import write_target
from plexus_partition.model.cli import UsageError
from plexus_datasets import DatasetError, Graph, load_dataset, spec_paths
from plexus_datasets.spec import spec_files

from .checkpoint import CHECKPOINT_NAME, lock_directory
from .epochlogs import check_targets
from .plan import RunRequest
from .writable import check_writable

# Datasets up to this size are loaded once in the launching process to check them before any
# worker starts; bigger ones only have their paths checked there (each worker loads them anyway).
PRECHECK_MAX_BYTES = 64 << 20


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
    check_writable(directory, "--checkpoint", own=True)
    check_output_file(directory / CHECKPOINT_NAME, "--checkpoint")


def check_output_paths(plan: RunRequest) -> None:
    """Raise `UsageError` unless rank 0 can write the run's JSON log (the file itself is opened
    by rank 0; an existing one stays until the end), checkpoint directory, outputs directory and
    weights export."""
    if plan.log_json:
        check_log_path(plan.log_json)
    if plan.checkpoint:
        check_checkpoint_dir(plan.checkpoint)
    if plan.save_predictions:
        check_outputs_dir(plan.save_predictions, "--save-predictions")
    if plan.export:
        check_output_file(plan.export, "--export")
    check_key_folder()


def check_key_folder() -> None:
    """Raise `UsageError` unless the folder of this user's Plexus key (`owned.config_dir`:
    ``$PLEXUS_CONFIG_DIR``, else the XDG config folder), where the seals' key is made on first
    use, is one no other user could have chosen (`plexus_datasets.base.gate`)."""
    try:
        write_target(owned.config_dir(), directory=True)
    except UnsafeTargetError as e:
        raise UsageError(f"the folder of this user's Plexus key ${owned.CONFIG_ENV}: {e} (set "
                         f"${owned.CONFIG_ENV} to a private folder of yours)") from None


def check_launch_outputs(plan: RunRequest) -> None:
    """Every output of the run checked by the launching process before any worker starts: rank
    0's paths, the checkpoint directory not held by another run (rank 0 locks it for the run),
    the CSV and TensorBoard targets."""
    check_output_paths(plan)
    if plan.checkpoint:
        lock_directory(Path(plan.checkpoint).expanduser()).release()
    check_targets(plan.log_csv, plan.tensorboard)


def precheck_dataset(spec: str, root: str | None, seed: int, features: str = "auto"
                     ) -> Graph | None:
    """Check a dataset spec before workers start; return the graph when it was cheap to load.

    Small inputs (the embedded Cora, files up to 64 MiB) are loaded, so any problem in them shows
    here; for bigger ones only the spec and the paths are checked and the workers load them.
    """
    scheme, colon, rest = spec.strip().partition(":")
    scheme = scheme.strip().lower()
    if root is not None and not Path(root).expanduser().is_dir():
        raise DatasetError(f"--root {root}: not a directory")
    if not colon and scheme.startswith("ogbn-"):
        if root is None:
            raise DatasetError(f"{spec}: OGB datasets are read from --root DIR (never "
                               "downloaded); give the directory holding the dataset")
        from plexus_datasets.ogb_loader import check_files  # noqa: PLC0415 (imports ogb)

        check_files(spec.strip(), root)  # the loader's own offline check: file existence only
        return None
    if colon and rest.strip():  # the files the spec itself says it reads, whatever the format
        spec_paths(spec, root)  # a malformed spec: its one line (a missing file: the loader's)
        if sum(f.stat().st_size for f in spec_files(spec, root)) > PRECHECK_MAX_BYTES:
            return None
    if scheme == "rmat":
        from plexus_datasets import parse_rmat_params  # noqa: PLC0415

        params = parse_rmat_params(rest if colon else "", seed)
        if int(params["scale"]) > 16:  # a big synthetic graph: the parameters are checked
            return None
    return load_dataset(spec, root, seed=seed, features=features)


#: The option behind each of `needs_validation`'s answers (the rule is the trainer's).
_VALIDATION_FLAGS = {"early stopping (patience)": "--patience",
                     "the plateau schedule": "--lr-schedule plateau"}


def needs_validation_flag(train: TrainConfig) -> str | None:
    """The option of ``train`` that needs the validation metric (None: none)."""
    reason = needs_validation(train)
    return None if reason is None else _VALIDATION_FLAGS[reason]
