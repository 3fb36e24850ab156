"""The one 3D stage (`Stage3D`: parameter shards and the stage toolkit, running the kind's torch
code from `plexus.core.ops`, BatchNorm's too) and where each declared parameter's shard sits. A
kind's torch code and serial reference live in its one file in `plexus.core.ops`; the engine runs
every kind through `Stage3D` and `serial_of`."""

from __future__ import annotations

from typing import Callable

from plexus.core.ops import OPERATORS

from .base import (ShardMap, Stage3D, StageInputs, embed, extract, full_from_shards, padded_shape,
                   placement, shard_of_full, weight_block)


def serial_of(op: str) -> Callable:
    """Operator ``op``'s serial reference: ``(model, plan, H, step) -> OUT`` before the bias."""
    return OPERATORS[op].serial

__all__ = ["serial_of", "ShardMap", "Stage3D", "StageInputs", "embed", "extract",
           "padded_shape", "placement", "weight_block", "shard_of_full", "full_from_shards"]
