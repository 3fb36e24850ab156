"""Configuration objects passed through the runtime (no module-level configuration state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plexus.core.layout import LayerPlan, layer_plans


MODEL_KINDS = ("gcn", "sage", "gin", "mlp")
NORMS = ("none", "batch")
# how each kind aggregates its neighbours (plexus.datasets.normalize)
AGGREGATION = {"gcn": "gcn", "sage": "mean", "gin": "sum", "mlp": "gcn"}


@dataclass(frozen=True)
class ModelConfig:
    """A GNN of ``num_layers`` layers, ReLU between them, as PyG's layer of the same name:

    - "gcn": H' = Â·H·W + b (GCNConv), optionally + H (``residual``, on layers whose input and
      output widths agree);
    - "sage": H' = mean_{j→i} H_j·W + H_i·Wr + b (SAGEConv, mean aggregation, root weight);
    - "gin": H' = MLP((1+ε)·H_i + Σ_{j→i} H_j) with MLP = Linear, ReLU, Linear (GINConv,
      ε trained with ``train_eps``); each GIN layer is two stages: the convolution with the
      MLP's first map, then a dense stage with its second;
    - "mlp": H' = H·W + b (no graph: dense stages only).

    ``norm`` "batch" puts a BatchNorm (statistics over all real nodes) after every layer but the
    last, before its ReLU; the stage before it has no bias (BatchNorm subtracts the mean, so
    the bias's gradient is rounding noise, which Adam would turn into steps of size lr; β is the
    bias there, and an export to PyG sets that layer's bias to zero). Dropout hits each layer's
    input; ``input_dropout`` False spares the first layer's (as OGB's examples do). ``order`` is "agg" ((Â·H)·W, as the paper),
    "combine" (Â·(H·W)), "auto" (combine first on convolutions that narrow, which makes the
    SpMM and its all-reduces cheaper), or a comma-separated list with one of "agg"/"combine" per
    layer.
    """

    num_layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    bias: bool = True
    order: str = "agg"
    learnable_features: bool = False
    kind: str = "gcn"
    norm: str = "none"
    residual: bool = False
    input_dropout: bool = True
    train_eps: bool = True

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"unknown model {self.kind!r}; use one of {', '.join(MODEL_KINDS)}")
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; use one of {', '.join(NORMS)}")
        if self.residual and self.kind != "gcn":
            raise ValueError(f"residual connections are a GCN option; the {self.kind} model "
                             "has none")
        if self.num_layers < 1:
            raise ValueError(f"a model needs at least 1 layer, got {self.num_layers}")

    @property
    def aggregation(self) -> str:
        """The sparse operator's normalization: "gcn", "mean" or "sum"."""
        return AGGREGATION[self.kind]

    @property
    def stages_per_layer(self) -> int:
        return 2 if self.kind == "gin" else 1

    @property
    def num_stages(self) -> int:
        return self.num_layers * self.stages_per_layer

    @property
    def last_layer_stage(self) -> int:
        """The first stage of the last GNN layer: its input is the last hidden layer's output
        (the embeddings)."""
        return self.stages_per_layer * (self.num_layers - 1)

    def layer_widths(self, num_features: int, num_classes: int) -> list[int]:
        """Input width, each layer's output width, class count."""
        return [num_features] + [self.hidden] * (self.num_layers - 1) + [num_classes]

    def widths(self, num_features: int, num_classes: int) -> list[int]:
        """D_0 .. D_S: the input width of every stage, then the class count (a GIN layer's
        MLP is hidden wide inside)."""
        layer = self.layer_widths(num_features, num_classes)
        if self.kind != "gin":
            return layer
        return [num_features] + [w for d in layer[1:] for w in (self.hidden, d)]

    def _conv_orders(self, num_features: int, num_classes: int) -> list[str]:
        widths = self.widths(num_features, num_classes)
        step = self.stages_per_layer
        if self.order == "auto":
            return ["combine" if widths[l * step + 1] < widths[l * step] else "agg"
                    for l in range(self.num_layers)]
        if "," in self.order:
            orders = [o.strip() for o in self.order.split(",")]
            if len(orders) != self.num_layers:
                raise ValueError(f"the order lists {len(orders)} layers but the model has "
                                 f"{self.num_layers}")
            return orders
        return [self.order] * self.num_layers

    def orders(self, num_features: int, num_classes: int) -> list[str]:
        """The order of every stage ("agg", "combine" or "dense"), "auto" resolved."""
        if self.kind == "mlp":
            return ["dense"] * self.num_layers
        convs = self._conv_orders(num_features, num_classes)
        if self.kind == "gin":
            return [o for c in convs for o in (c, "dense")]
        return convs

    def plans(self, num_features: int, num_classes: int) -> list[LayerPlan]:
        """Every stage's roles, root term, BatchNorm and GNN layer."""
        widths, step = self.widths(num_features, num_classes), self.stages_per_layer
        roots, norms = [], []
        for s in range(self.num_stages):
            last_of_layer = s % step == step - 1
            norms.append(self.norm == "batch" and last_of_layer and s < self.num_stages - 1)
            if self.kind in ("sage", "gin") and s % step == 0:
                roots.append(self.kind)
            elif self.residual and widths[s] == widths[s + 1]:
                roots.append("res")
            else:
                roots.append("none")
        return layer_plans(self.num_stages, self.orders(num_features, num_classes), roots=roots,
                           norms=norms, layers=[s // step for s in range(self.num_stages)])

    def drops_input(self, plan: LayerPlan) -> bool:
        """Whether dropout hits this stage's input: the first stage of a layer, and of layer 0
        only with ``input_dropout``."""
        first = plan.index % self.stages_per_layer == 0
        return self.dropout > 0 and first and (plan.layer > 0 or self.input_dropout)

    def activates(self, plan: LayerPlan) -> bool:
        """Whether a ReLU follows the stage (every stage but the model's last)."""
        return plan.index < self.num_stages - 1


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


# Compute precisions of `EngineConfig.dtype` and the bytes of one element in each.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
DTYPES = tuple(DTYPE_BYTES)
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
