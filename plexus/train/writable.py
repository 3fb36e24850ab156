"""Whether a run can write where an option points, checked before any rank starts (the lowest
module of the checks: the epoch logs' own targets are checked with it too)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from plexus_partition.model.cli import UsageError


def check_writable(path: Path, what: str) -> None:
    """Raise `UsageError` unless files can be created in directory ``path`` (made if missing)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
