"""This machine's rates, for ``--grid auto`` on CPUs: measured once, kept, reused.

The built-in rates are a GPU node's: on a CPU they predict microseconds for steps of seconds and
rank grids by terms that are not this machine's. A CPU run that chooses its grid, with no
calibration given (``--calibration``, ``$PLEXUS_CALIBRATION``), measures this machine instead:
``plexus-bench calibrate``'s quick measurement (`plexus.perfmodel.measure.calibrate`: SpMM, GEMM
and elementwise rates on one thread, the collectives of a local gloo world of the run's ranks),
some seconds, written in the calibration file format to the user's private cache
(``$PLEXUS_MACHINE_CACHE``, else ``$XDG_CACHE_HOME/plexus/machine``, else
``~/.cache/plexus/machine``; a folder only its owner may open, files only its owner may write)
and read from there by the next run of the same host, core count and rank count.
``PLEXUS_MACHINE_CACHE=off`` turns it off (the built-in rates then price, and say so).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from plexus_partition.launch.env import available_cores
from plexus_partition.model.bounds import CALIBRATION_RANKS_PER_CORE
from plexus_datasets.base import gate

from .calibration import Calibration, CalibrationError, load_calibration, write_calibration

MACHINE_CACHE_ENV = "PLEXUS_MACHINE_CACHE"
#: the value of `MACHINE_CACHE_ENV` that turns the measurement off
OFF = "off"


def machine_cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where this machine's measured rates are kept (None: turned off)."""
    env = os.environ if environ is None else environ
    given = env.get(MACHINE_CACHE_ENV)
    if given is not None:
        return None if given.strip().lower() in (OFF, "") else Path(given).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "plexus" / "machine"


@dataclass(frozen=True)
class MachineRates:
    """This machine's calibration, its file, and whether this call measured it (and in how
    many seconds) or read it back."""

    calibration: Calibration
    path: Path
    measured_s: float | None  # None: read from the cache

    @property
    def said(self) -> str:
        """How the grid line names the rates."""
        if self.measured_s is None:
            return f"this machine's rates (measured before, kept in {self.path})"
        return (f"this machine's rates (measured now in {self.measured_s:.0f} s, kept in "
                f"{self.path} for the next run)")


def _private_dir(folder: Path) -> None:
    """Make ``folder`` (owner only) or check that it is: another user's or a group-writable
    folder could hand a run rates that choose a bad grid."""
    try:
        gate.make_folder(folder, mode=0o700)
    except gate.UnsafeTargetError as e:
        raise CalibrationError(f"{folder}: not a folder of this user's that only they may write "
                               f"({str(e).removeprefix(f'{folder}: ').split(';')[0]}); remove "
                               f"it, or set {MACHINE_CACHE_ENV} to another folder ({OFF}: "
                               "built-in rates)") from None
    st = os.lstat(folder)
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        raise CalibrationError(f"{folder}: not a folder of this user's that only they may "
                               f"write; remove it, or set {MACHINE_CACHE_ENV} to another "
                               f"folder ({OFF}: built-in rates)")


def _trusted(path: Path) -> bool:
    """Whether the kept file is this user's, a regular file, and written by nobody else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def machine_file(folder: Path, world: int) -> Path:
    """The file of this host's rates for ``world`` local ranks (its collectives are those)."""
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.uname().nodename)[:64] or "host"
    return folder / f"cpu-{host}-{available_cores()}cores-{world}ranks.json"


def machine_rates(world: int, folder: Path,
                  measure: Callable[..., dict[str, Any]] | None = None,
                  say: Callable[[str], None] | None = None) -> MachineRates:
    """This machine's rates for ``world`` local ranks: read from ``folder`` when kept there,
    else measured (``measure``: `plexus.perfmodel.measure.calibrate`'s signature; quick, one
    thread per rank), announced first through ``say``, and kept. Raises `CalibrationError` for
    a folder that is not private, or a ``world`` past `CALIBRATION_RANKS_PER_CORE` per core (the
    bound of ``plexus-bench calibrate --world-size``: checked before anything is measured)."""
    cores = available_cores()
    top = CALIBRATION_RANKS_PER_CORE * cores
    if not 1 <= world <= top:
        raise CalibrationError(f"--grid auto for {world} ranks: this machine's rates are measured "
                               f"on a local world of at most {top} ranks "
                               f"({CALIBRATION_RANKS_PER_CORE} per core of {cores}); give "
                               "--calibration FILE (plexus-bench calibrate on the ranks' "
                               "machines) or a --grid")
    _private_dir(folder)
    path = machine_file(folder, world)
    if _trusted(path):
        try:
            return MachineRates(load_calibration(path), path, None)
        except CalibrationError:
            pass  # damaged (a crash cannot leave one: writes are atomic): measured again
    if measure is None:
        from .measure import calibrate as measure  # noqa: PLC0415 (imports torch)
    if say is not None:
        say(f"measuring this machine's rates for {world} ranks once (kept in {folder})")
    start = time.perf_counter()
    doc = measure(world_size=world, threads=1, quick=True)
    doc["note"] = "measured by plexus-train --grid auto (plexus.perfmodel.machine)"
    write_calibration(doc, path)
    os.chmod(path, 0o600)
    return MachineRates(load_calibration(path), path, time.perf_counter() - start)
