"""The torch code of every operator declared in `plexus.core.ops`, under the same name: the 3D
stage the engine runs, and the serial reference every distributed result is tested against.
Adding an operator: its declaration there, its module here, a line in each registry below."""

from __future__ import annotations

from . import batchnorm, dense, gat, gcn, gin, sage
from .base import (Stage3D, StageInputs, embed, extract, full_from_shards, padded_shape,
                   placement, shard_of_full, weight_block)
from .batchnorm import BatchNorm3D

STAGES: dict[str, type[Stage3D]] = {"gcn": gcn.GCNStage, "sage": sage.SAGEStage,
                                    "gin": gin.GINStage, "dense": dense.DenseStage,
                                    "gat": gat.GATStage}
SERIAL = {"gcn": gcn.serial, "sage": sage.serial, "gin": gin.serial, "dense": dense.serial,
          "gat": gat.serial}
NORM_STAGE, NORM_SERIAL = BatchNorm3D, batchnorm.serial

__all__ = ["STAGES", "SERIAL", "NORM_STAGE", "NORM_SERIAL", "Stage3D", "StageInputs",
           "BatchNorm3D", "embed", "extract", "padded_shape", "placement", "weight_block",
           "shard_of_full", "full_from_shards"]
