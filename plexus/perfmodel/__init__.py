"""The performance model: what one epoch of 3D-parallel training costs per rank on every grid.

`spec` (the problem: graph sizes, model, how a run holds it), `model` (communication volume from
`plexus_partition.model.schedule`, compute and time, grid and order ranking), `memory` (bytes per
rank at the step's peak), `calibration` (the machine rates it prices time with, and measuring them
on CPUs), `gpucal` (measuring a GPU and its cluster's links), `placement` (which link each grid axis
crosses on a cluster), `profiles` (built-in GPU nodes; what prices a prediction), `cli`
(``plexus-model`` and ``plexus-bench``). Pure arithmetic apart from calibration: it answers
instantly for billion-edge graphs.
"""

import warnings
from typing import Any

from plexus_partition.model.schedule import OPS, Collective

from .calibration import (CALIBRATION_ENV, UNCALIBRATED, Calibration, CalibrationError,
                          find_calibration, load_calibration)
from .memory import Memory
from .model import (CommVolume, Compute, Prediction, choose_grid, choose_orders, collective_time,
                    collectives, epoch_compute, epoch_memory, epoch_volume, factorizations,
                    estimate, rank_configs, setup_volume)
from .placement import Placement, pricing
from .profiles import load_profile, profile_names, resolve_calibration
from .spec import ModelSpec, normalize_grid
from .setup import SetupMemory, partition_memory, read_memory, run_peak, setup_memory

__all__ = ["OPS", "Collective", "CALIBRATION_ENV", "UNCALIBRATED", "Calibration",
           "CalibrationError", "find_calibration", "load_calibration", "Placement", "pricing",
           "load_profile", "profile_names", "resolve_calibration", "CommVolume", "Compute",
           "Memory", "ModelSpec", "Prediction", "choose_grid", "choose_orders", "collective_time",
           "collectives", "epoch_compute", "epoch_memory", "epoch_volume", "factorizations",
           "normalize_grid", "estimate", "predict", "rank_configs", "setup_volume",
           "SetupMemory", "partition_memory", "read_memory", "run_peak", "setup_memory"]


def predict(*args: Any, **kwargs: Any) -> Prediction:
    """Deprecated name of `estimate` (the performance model's epoch time, volume and memory of a
    grid), renamed so that it is not mistaken for a trained model's predictions
    (`plexus.infer`); it warns and calls `estimate` (deprecated in 0.2.0, removed in 0.3.0)."""
    warnings.warn("plexus.perfmodel.predict is renamed estimate (the performance model's "
                  "estimate of an epoch; a trained model's predictions are plexus.infer; the old "
                  "name is removed in 0.3.0)",
                  DeprecationWarning, stacklevel=2)
    return estimate(*args, **kwargs)
