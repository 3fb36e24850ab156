"""What every Plexus command line shares: one-line errors and their exit status.

Each tool (plexus-train, plexus-partition, plexus-model, plexus-bench, ...) parses with
`ArgumentParser`, whose errors raise `UsageError` instead of printing a usage dump; the tool's
``main`` turns any typed error into one line, ``PROG: error: ...``, on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import NoReturn

from .bounds import BoundError, check_options
from plexus_datasets.base.values import one_line

EXIT_USAGE = 2


class UsageError(ValueError):
    """Bad command-line input (a one-line message; exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors raise `UsageError` (one line) rather than exiting with usage, and
    which checks every numeric option against the one table of bounds
    (`plexus_partition.model.bounds.BOUNDS`) before the tool does anything with them."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, rest = super().parse_known_args(args, namespace)
        try:
            check_options(vars(parsed))
        except BoundError as e:
            raise UsageError(str(e)) from None
        return parsed, rest

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        raise UsageError(message)


def error_line(prog: str, message: object) -> str:
    """``PROG: error: <message>`` on one line (newlines and runs of spaces collapsed). A library
    error that names an argument of the API (e.g. ``root``) says it in the tools' terms where it
    has a ``command_line()`` form."""
    in_flags = getattr(message, "command_line", None)
    text = one_line(in_flags() if callable(in_flags) else message) or "unknown error"
    return f"{prog}: error: {text}"


def report_error(prog: str, message: object, status: int = EXIT_USAGE) -> int:
    """Print `error_line` to stderr and return ``status`` (for ``return report_error(...)``)."""
    try:
        print(error_line(prog, message), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the status still says it failed
        pass
    return status


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The destinations of the options ``argv`` gives explicitly (a preset such as a recipe
    fills only the others). ``parser``'s defaults are left alone: a copy parses with none."""
    shadow = copy.deepcopy(parser)
    for action in shadow._actions:  # noqa: SLF001 — argparse has no public way to list them
        action.default = argparse.SUPPRESS
    given, _ = shadow.parse_known_args(argv)
    return set(vars(given))
