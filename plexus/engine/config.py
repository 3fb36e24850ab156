"""Configuration objects passed through the runtime (no module-level configuration state)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """The GCN: ``num_layers`` graph convolutions, ReLU between them, dropout on each layer's input.

    ``order`` is "agg" ((Â·H)·W, as the paper), "combine" (Â·(H·W)), "auto" (combine first on
    layers that narrow, which makes the SpMM and its all-reduces cheaper), or a comma-separated
    list with one of "agg"/"combine" per layer.
    """

    num_layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    bias: bool = True
    order: str = "agg"
    learnable_features: bool = False

    def widths(self, num_features: int, num_classes: int) -> list[int]:
        """D_0 .. D_L: input width, hidden widths, class count."""
        return [num_features] + [self.hidden] * (self.num_layers - 1) + [num_classes]

    def orders(self, num_features: int, num_classes: int) -> list[str]:
        """The product order of every layer, with "auto" resolved from the widths."""
        widths = self.widths(num_features, num_classes)
        if self.order == "auto":
            return ["combine" if widths[l + 1] < widths[l] else "agg"
                    for l in range(self.num_layers)]
        if "," in self.order:
            orders = [o.strip() for o in self.order.split(",")]
            if len(orders) != self.num_layers:
                raise ValueError(f"the order lists {len(orders)} layers but the model has "
                                 f"{self.num_layers}")
            return orders
        return [self.order] * self.num_layers


@dataclass(frozen=True)
class TrainConfig:
    """Optimization: Adam with L2 weight decay on every parameter, full-batch epochs."""

    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0
    eval_every: int = 1  # 0: never evaluate during training


@dataclass(frozen=True)
class EngineConfig:
    """How the distributed engine runs (results never depend on these)."""

    spmm_backend: str = "torch"  # "torch" (CSR), "scipy" (CPU only), "torch-sparse" when installed
    agg_chunks: int = 1  # Â's row block cut into this many chunks for the aggregation
    overlap: bool = False  # each chunk's all-reduce runs while the next chunk's SpMM computes
    tune_gemms: bool = False  # time each GEMM site's formulations once, keep the fastest (not
    # bit-reproducible across runs); off: a fixed rule by shape
    # (plexus.engine.gemm.default_formulation)
    huge_pages: bool = True  # large CPU tensors on transparent huge pages (plexus.runtime.hostmem)
    timers: bool = True
