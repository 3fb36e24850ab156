"""How ``plexus-train`` fails: its typed errors, which of them are the user's input, and the one
line it prints for each (``plexus-train: error: ...``)."""

from __future__ import annotations

from plexus.api.outputs import OutputsError
from plexus_datasets.base.atomic import UnsafeTargetError
from plexus_partition.model.cli import UsageError
from plexus_partition.model.cli import error_line as _error_line
from plexus_partition.model.grid import GridError
from plexus_datasets import DatasetError
from plexus_partition import ShardStoreError
from plexus_partition.launch.env import LaunchError

from .checkpoint import CheckpointError
from plexus.api.memcheck import MemoryCheckError

PROG = "plexus-train"


class CacheError(ValueError):
    """The cache directory cannot be used, or the dataset's source cannot be fingerprinted (a
    one-line message)."""


class RunStopped(RuntimeError):
    """A run that stops part-way, on every rank at the same epoch (a one-line message, printed
    by rank 0; exit status 1)."""


class TrainingDiverged(RunStopped):
    """The training loss, or the state after an optimizer step, became NaN or infinite."""


class OutputFailed(RunStopped):
    """An output could not be written (a full disk, a quota, an I/O error, a path that changed
    under the run): nothing half-written stays, the previous checkpoint is intact."""


def output_failure(error: BaseException, what: str) -> OutputFailed:
    """`OutputFailed` naming the file and the cause of an `OSError` or `UnsafeTargetError`
    raised while writing ``what`` (e.g. "the checkpoint")."""
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else ""
        return OutputFailed(f"cannot write {what}{where}: {error.strerror or error}")
    return OutputFailed(f"cannot write {what}: {error}")


#: Exceptions that are the user's input, not a bug: reported as one line, exit status 2.
USER_ERRORS = (UsageError, GridError, DatasetError, ShardStoreError, CheckpointError, LaunchError,
               MemoryCheckError, UnsafeTargetError, OutputsError, CacheError)

#: What the command line adds to a library error: the option that changes the outcome.
_HINTS = {MemoryCheckError: "or --force to run anyway"}


def error_line(error: object) -> str:
    """``plexus-train: error: <message>`` on one line, with the option that helps, if any."""
    hint = next((h for kind, h in _HINTS.items() if isinstance(error, kind)), None)
    return _error_line(PROG, f"{error}; {hint}" if hint else error)


__all__ = ["PROG", "UsageError", "RunStopped", "TrainingDiverged", "OutputFailed",
           "output_failure", "USER_ERRORS", "error_line"]
