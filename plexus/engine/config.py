"""Configuration objects passed through the runtime (no module-level configuration state):
training (`TrainConfig`), how the engine runs (`EngineConfig`), and the model's
(`plexus.core.model.ModelConfig`, re-exported here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plexus.core.model import DTYPE_BYTES, DTYPES, ModelConfig, ModelError
from plexus.core.ops import KINDS, NORMS

# the model's configuration is a plain value of plexus.core (the performance model reads it too)
MODEL_KINDS = tuple(KINDS)
__all__ = ["ModelConfig", "ModelError", "MODEL_KINDS", "NORMS", "TrainConfig", "EngineConfig",
           "DTYPES", "DTYPE_BYTES"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimization: Adam with L2 weight decay (on every parameter, or on the first layer's only
    as Kipf & Welling), full-batch epochs."""

    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    weight_decay_scope: str = "all"  # "all" parameters or the "first" layer's only (Kipf)
    seed: int = 0
    eval_every: int = 1  # 0: never evaluate during training


_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class EngineConfig:
    """How the distributed engine runs. Results never depend on these, except ``dtype``: the
    one option that changes results (by rounding).

    ``dtype`` is the precision of activations, the Â blocks, the fixed input features and every
    collective's message ("fp32", "bf16" or "fp16"); parameters (the master weights), their
    gradients, the optimizer, BatchNorm's statistics and the loss stay float32. fp16 has no
    loss scaling: a gradient below its range is lost (bf16 has float32's range). ``recompute``
    keeps only each stage's input for backward and recomputes the rest of the stage (its
    BatchNorm and ReLU included) there: less memory for about one more forward's time, the
    same results.
    """

    spmm_backend: str = "torch"  # "torch" (CSR), "scipy" (CPU only), "torch-sparse" when installed
    agg_chunks: int = 1  # Â's row block cut into this many chunks for the aggregation
    overlap: bool = False  # each chunk's all-reduce runs while the next chunk's SpMM computes
    tune_gemms: bool = False  # time each GEMM site's formulations once, keep the fastest (not
    # bit-reproducible across runs); off: a fixed rule by shape
    # (plexus.engine.gemm.default_formulation)
    huge_pages: bool = True  # large CPU tensors on transparent huge pages (plexus.runtime.hostmem)
    timers: bool = True
    dtype: str = "fp32"  # compute precision (one of DTYPES): changes results by rounding
    recompute: bool = False  # recompute each stage's activations in backward

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown compute dtype {self.dtype!r}; use one of "
                             f"{', '.join(DTYPES)}")

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one activation, message or Â value."""
        return DTYPE_BYTES[self.dtype]

    def torch_dtype(self) -> Any:
        """The torch dtype of ``dtype`` (imported here so that reading a configuration does not
        import torch)."""
        import torch  # noqa: PLC0415

        return getattr(torch, _TORCH_DTYPES[self.dtype])
