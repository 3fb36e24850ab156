"""The two values a stage is built from, for built-in kinds and users' layers alike: the model's
`StageContext` (what all its stages share) and each stage's `StageSpec` (what is its own).
`plexus.engine.graph3d.StageGraph` (the stage toolkit) and `plexus.engine.stage.Stage3D` (a
built-in stage) take them instead of a bag of parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from plexus_partition.model.layout import LayerPlan

from .blocks import GraphBlocks
from .comm import Comm
from .gemm import GemmTuner


@dataclass(frozen=True)
class StageContext:
    """What every stage of one model shares: the communicator, this rank's blocks of Â, the
    seed of the dropout masks, the compute precision, the GEMM tuner, the model's config (a
    built-in kind's options; None for users' networks), the engine's (chunks, overlap, sparse
    exchanges; None for users' networks) and the graph's node count (BatchNorm's statistics)."""

    comm: Comm
    graph: GraphBlocks
    seed: int = 0
    dtype: torch.dtype = torch.float32
    tuner: GemmTuner = field(default_factory=GemmTuner)
    model: Any = None  # plexus_partition.model.model.ModelConfig
    engine: Any = None  # plexus.engine.config.EngineConfig
    num_nodes: int = 0


@dataclass(frozen=True)
class StageSpec:
    """One stage's own: its plan, the original ids of the rows of its input (-1: padding; the
    dropout masks are keyed by them), its padded input and output widths (``real``: the real
    ones, default the padded), the original ids of its output rows and the dropout rate on its
    input."""

    plan: LayerPlan
    input_ids: torch.Tensor
    d_in: int
    d_out: int
    real: tuple[int, int] | None = None
    output_ids: torch.Tensor | None = None
    rate: float = 0.0
