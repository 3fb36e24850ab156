"""One rank's model from its shard: the builder every user of the engine calls (the training
command, the benchmarks, the tests), so they all run the same engine."""

from __future__ import annotations

from plexus_partition import RankShard

from .comm import Comm
from .config import EngineConfig, ModelConfig
from .grid import Grid
from .ledger import Ledger
from .model import DistributedModel
from .timing import Timers


def build_model(grid: Grid, shard: RankShard, model: ModelConfig, seed: int,
                engine: EngineConfig | None = None, timers: Timers | None = None
                ) -> DistributedModel:
    """This rank's distributed model on ``grid`` from its ``shard``, with a fresh ledger and
    ``timers`` (default: the engine config's; pass your own to time differently)."""
    engine = engine or EngineConfig()
    timers = timers or Timers(grid.device, enabled=engine.timers)
    return DistributedModel(Comm(grid, Ledger(), timers), shard, model, seed, engine)
