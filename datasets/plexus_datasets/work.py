"""The datasets' out-of-core work (conversions, and the partitioner built on them): the generic
runner of resumable phases, `plexus_datasets.base.tasks`, whose damaged work directory (an edited
marker, a changed file) is a `DatasetError` like any other bad input of a dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plexus_datasets.base import tasks

from .errors import DatasetError


class MarkerError(DatasetError, tasks.MarkerError):
    """A marker file or a work directory's record that this code did not write as it is
    (edited, truncated, planted); one line naming it."""


class Runner(tasks.Runner):
    """`plexus_datasets.base.tasks.Runner` raising `MarkerError` for a damaged work directory."""

    error = MarkerError


def read_marker(path: Path) -> Any:
    """The result a finished task recorded in ``path`` (`plexus_datasets.base.tasks.read_marker`);
    `MarkerError` for anything else."""
    return tasks.read_marker(path, MarkerError)
