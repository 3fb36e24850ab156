"""How ``plexus-train`` fails: its typed errors, which of them are the user's input, and the one
line it prints for each (``plexus-train: error: ...``)."""

from __future__ import annotations

from plexus.api.outputs import OutputsError
from plexus.core.atomic import UnsafeTargetError
from plexus.core.cli import UsageError
from plexus.core.cli import error_line as _error_line
from plexus.core.grid import GridError
from plexus.datasets import DatasetError
from plexus.partitioners import ShardStoreError
from plexus.runtime.env import LaunchError

from .cache import CacheError
from .checkpoint import CheckpointError
from .memcheck import MemoryCheckError

PROG = "plexus-train"


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite (a one-line message; exit status 1)."""


#: Exceptions that are the user's input, not a bug: reported as one line, exit status 2.
USER_ERRORS = (UsageError, GridError, DatasetError, ShardStoreError, CheckpointError, LaunchError,
               MemoryCheckError, UnsafeTargetError, OutputsError, CacheError)

#: What the command line adds to a library error: the option that changes the outcome.
_HINTS = {MemoryCheckError: "or --force to run anyway"}


def error_line(error: object) -> str:
    """``plexus-train: error: <message>`` on one line, with the option that helps, if any."""
    hint = next((h for kind, h in _HINTS.items() if isinstance(error, kind)), None)
    return _error_line(PROG, f"{error}; {hint}" if hint else error)


__all__ = ["PROG", "UsageError", "TrainingDiverged", "USER_ERRORS", "error_line"]
