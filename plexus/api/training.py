"""What an application (`plexus.train`) drives the engine with, in one place: the run's
configurations, the training loop and its per-epoch figures, the grid and its communicator, the
timers and the ledger it reports, the checkpoint's view of the initial state, and OGB's
multi-label metric. The engine's own modules stay the definitions; applications import these
from here, so the engine's layout can change behind the API."""

from __future__ import annotations

from plexus.engine.comm import Comm, staged
from plexus.engine.config import (DEFAULT_DTYPE, LR_SCHEDULES, OPTIMIZERS, EngineConfig,
                                  TrainConfig, TrainConfigError)
from plexus.engine.grid import Grid
from plexus.engine.ledger import Ledger
from plexus.engine.rocauc import mean_rocauc
from plexus.engine.seeding import initial_parameters, initial_stats, split_name
from plexus.engine.spmm import BACKENDS, check_backend
from plexus.engine.timing import Timers
from plexus.engine.trainer import (BestEpoch, EpochStats, Trainer, make_schedule,
                                   needs_validation)

__all__ = [
    "Comm", "staged", "DEFAULT_DTYPE", "LR_SCHEDULES", "OPTIMIZERS", "EngineConfig",
    "TrainConfig", "TrainConfigError", "Grid", "Ledger", "mean_rocauc", "initial_parameters",
    "initial_stats", "split_name", "BACKENDS", "check_backend", "Timers", "BestEpoch",
    "EpochStats", "Trainer", "make_schedule", "needs_validation",
]
