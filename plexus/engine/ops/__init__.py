"""The one 3D stage (`Stage3D`: parameter shards and the stage toolkit, running the kind's torch
code from `plexus.core.ops`), where each declared parameter's shard sits, and BatchNorm's stage.
A kind's torch code and serial reference live in its one file in `plexus.core.ops`; the
engine runs every kind through `stage_class` and `serial_of`."""

from __future__ import annotations

from typing import Callable

from plexus.core.ops import OPERATORS

from . import batchnorm
from .base import (ShardMap, Stage3D, StageInputs, embed, extract, full_from_shards, padded_shape,
                   placement, shard_of_full, weight_block)
from .batchnorm import BatchNorm3D

NORM_STAGE, NORM_SERIAL = BatchNorm3D, batchnorm.serial


def serial_of(op: str) -> Callable:
    """Operator ``op``'s serial reference: ``(model, plan, H, step) -> OUT`` before the bias."""
    return OPERATORS[op].serial

__all__ = ["serial_of", "ShardMap", "NORM_STAGE", "NORM_SERIAL", "Stage3D", "StageInputs",
           "BatchNorm3D", "embed", "extract", "padded_shape", "placement", "weight_block",
           "shard_of_full", "full_from_shards"]
