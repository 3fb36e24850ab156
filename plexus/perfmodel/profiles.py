"""Built-in profiles of common GPU nodes: published peak rates and link bandwidths in the
calibration file format (`plexus.perfmodel.calibration`), each file naming its source.

They price a cluster nobody has calibrated yet and are used only when no calibration is given;
every prediction made with one names it (`Calibration.label`). A measured calibration
(``plexus-bench calibrate --device cuda``) always replaces them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping

from .calibration import Calibration, CalibrationError, find_calibration, load_calibration

PROFILE_DIR = Path(__file__).parent / "node_profiles"


def profile_names() -> list[str]:
    """The built-in profiles' names, sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> Calibration:
    """The built-in profile ``name``; raises `CalibrationError` naming the known ones."""
    path = PROFILE_DIR / f"{name}.json"
    if name not in profile_names():
        raise CalibrationError(f"unknown profile {name!r}; built-in profiles: "
                               f"{', '.join(profile_names())}")
    cal = load_calibration(path)
    if cal.profile != name or not cal.reference:
        raise CalibrationError(f"profile file {path}: must name itself ({name!r}) and its "
                               "source (reference)")
    return replace(cal, source=f"profile {name}")


def profile_for_node(gpus_per_node: int) -> str | None:
    """The one built-in profile with ``gpus_per_node`` GPUs per node, preferring the one whose
    constants cite measurements over published peaks (``perlmutter-a100`` over
    ``perlmutter-a100-peak``); None where there is none, or several alike: the user picks."""
    found = [load_profile(n) for n in profile_names()]
    matches = [p for p in found if p.gpus_per_node == gpus_per_node]
    measured = [p for p in matches if p.citations]
    pick = measured if measured else matches
    return pick[0].profile if len(pick) == 1 else None


def resolve_calibration(path: str | None = None, profile: str | None = None,
                        gpus_per_node: int | None = None,
                        environ: Mapping[str, str] | None = None) -> Calibration:
    """What prices a tool's predictions: the calibration file ``path``, else the one
    ``environ``'s $PLEXUS_CALIBRATION names (`find_calibration`), else the built-in ``profile``
    (or, given ``gpus_per_node``, the one profile of a node that size), else the built-in GPU
    rates; `Calibration.label` says which. A found file wins over a profile."""
    found = path or find_calibration(environ or {})
    if found:
        return load_calibration(found)
    name = profile or (profile_for_node(gpus_per_node) if gpus_per_node else None)
    return load_profile(name) if name else Calibration()
