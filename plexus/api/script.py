"""Scripts built on the API report bad input as the command-line tools do: one line,
``PROG: error: <message>``, exit status 2, instead of a traceback.

    if __name__ == "__main__":
        plexus.run_script(main)

The errors that are the user's to fix (a missing dataset, a bad grid, a recipe or an output
path that cannot be used, a launch outside a job) are one line; a failed worker is one line
after its traceback (status 1, as plexus-train); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn

from plexus_datasets.base.atomic import UnsafeTargetError
from plexus_partition.model.cli import UsageError, report_error
from plexus_partition.model.grid import GridError
from plexus_partition.model.model import ModelError
from plexus_datasets import DatasetError
from plexus_partition.launch.env import LaunchError
from plexus.runtime.local import LocalJobFailed

from .export import ExportError
from .memcheck import MemoryCheckError
from .outputs import OutputsError
from .recipes import RecipeError
from .results import GatherTooLargeError

#: Library errors that are bad input, not bugs: the message says what to fix.
USER_ERRORS = (UsageError, GridError, ModelError, DatasetError, RecipeError, LaunchError,
               UnsafeTargetError, OutputsError, GatherTooLargeError, MemoryCheckError,
               ExportError)


def run_script(main: Callable[[], object], prog: str | None = None) -> NoReturn:
    """Run ``main()`` as a command and exit: with its return value (None: 0); a user error
    (`USER_ERRORS`) as one line and status 2; a failed local worker as its traceback and one
    line, status 1; Ctrl-C as one line, status 130. ``prog`` defaults to the script's name."""
    prog = prog or os.path.basename(sys.argv[0]) or "plexus"
    try:
        code = main()
    except USER_ERRORS as e:
        sys.exit(report_error(prog, e))
    except LocalJobFailed as e:
        root = e.failures[0] if e.failures else None
        if root is not None and root.traceback and not any(
                name in root.traceback.splitlines()[-1] for name in _USER_ERROR_NAMES):
            print(root.traceback.rstrip(), file=sys.stderr)  # a bug in a worker: show where
        sys.exit(report_error(prog, e, 1))
    except KeyboardInterrupt:
        sys.exit(report_error(prog, "interrupted (SIGINT)", 130))
    sys.exit(0 if code is None else code)


_USER_ERROR_NAMES = tuple(f"{cls.__name__}:" for cls in USER_ERRORS)
