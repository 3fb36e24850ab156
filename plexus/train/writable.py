"""Whether a run can write where an option points, checked before any rank starts (the lowest
module of the checks: the epoch logs' own targets are checked with it too)."""

from __future__ import annotations

from pathlib import Path

from plexus_datasets.base.gate import UnsafeTargetError, probe_folder, run_folder
from plexus_partition.model.cli import UsageError


def check_writable(path: Path, what: str, own: bool = False) -> Path:
    """Raise `UsageError` unless files can be created in directory ``path`` (made if missing)
    and no other user could have chosen it (`plexus_datasets.base.gate`: checked before
    anything is made or written there); ``own``: a folder the run makes its own, never a
    folder of the system (`plexus_datasets.base.gate.run_folder`). Returns the directory
    written."""
    try:
        if own:
            run_folder(path)
        return probe_folder(path)
    except UnsafeTargetError as e:
        raise UsageError(f"{what} {e}") from None
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
