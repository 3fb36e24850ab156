"""Configuration objects passed through the runtime (no module-level configuration state):
training (`TrainConfig`), how the engine runs (`EngineConfig`), and the model's
(`plexus_partition.model.model.ModelConfig`, re-exported here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from plexus_partition.model.bounds import BOUNDS, BoundError, check_bound
from plexus_partition.model.model import DEFAULT_DTYPE, DTYPE_BYTES, DTYPES, ModelConfig, ModelError
from plexus_partition.model.ops import KINDS, NORMS
from plexus_partition.model.schedule import SPARSE_MODES
from plexus_partition.model.topology import COLLECTIVES, check_gpus_per_node

# the model's configuration is a plain value of plexus.core (the performance model reads it too)
MODEL_KINDS = tuple(KINDS)
__all__ = ["ModelConfig", "ModelError", "MODEL_KINDS", "NORMS", "TrainConfig", "EngineConfig",
           "DTYPES", "DTYPE_BYTES", "DEFAULT_DTYPE", "OPTIMIZERS", "LR_SCHEDULES", "TrainConfigError"]


#: The optimizers `TrainConfig.optimizer` names (torch.optim's Adam, AdamW and SGD).
OPTIMIZERS = ("adam", "adamw", "sgd")
#: The learning-rate schedules `TrainConfig.lr_schedule` names (torch.optim.lr_scheduler's
#: CosineAnnealingLR, StepLR and ReduceLROnPlateau; "none": a constant rate).
LR_SCHEDULES = ("none", "cosine", "step", "plateau")
#: `TrainConfig.weight_decay_scope`'s values: every parameter, or the first layer's only (Kipf)
WEIGHT_DECAY_SCOPES = ("all", "first")


class TrainConfigError(ValueError):
    """A training option out of range or unknown (one line); ``field`` names the option."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


@dataclass(frozen=True)
class TrainConfig:
    """Optimization: full-batch epochs of Adam (or AdamW, or SGD with momentum) with weight decay
    (on every parameter, or on the first layer's only as Kipf & Welling), an optional
    learning-rate schedule, gradient clipping by the global norm and early stopping on the
    validation metric. Raises `TrainConfigError` for a value out of range."""

    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    weight_decay_scope: str = "all"  # "all" parameters or the "first" layer's only (Kipf)
    seed: int = 0
    eval_every: int = 1  # 0: never evaluate during training
    optimizer: str = "adam"  # one of OPTIMIZERS (AdamW: decoupled weight decay)
    momentum: float = 0.9  # SGD's
    clip_grad_norm: float | None = None  # scale the gradient to this global 2-norm when above
    lr_schedule: str = "none"  # one of LR_SCHEDULES
    lr_step: int = 50  # "step": the rate is multiplied by lr_gamma every lr_step epochs
    lr_gamma: float = 0.5  # "step" and "plateau": the factor
    lr_patience: int = 10  # "plateau": evaluations without a better validation metric first
    lr_min: float = 0.0  # "cosine": the last epoch's rate; "plateau": the floor
    patience: int | None = None  # early stopping: stop after this many epochs without a
    # better validation metric (None: never)

    def __post_init__(self) -> None:
        for f in fields(self):  # every number within the one table of bounds, typed
            if f.name in BOUNDS:
                if getattr(self, f.name) is None and f.default is not None:
                    raise TrainConfigError(f.name, f"must be {BOUNDS[f.name].describe()}, got "
                                                   "None")
                try:
                    check_bound(f.name, getattr(self, f.name))
                except BoundError as e:
                    raise TrainConfigError(f.name, str(e).removeprefix(f"{f.name} ")) from None
        finite = math.isfinite
        rules = [
            ("optimizer", self.optimizer in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
            ("weight_decay_scope", self.weight_decay_scope in WEIGHT_DECAY_SCOPES,
             f"must be one of {', '.join(WEIGHT_DECAY_SCOPES)}"),
            ("lr_schedule", self.lr_schedule in LR_SCHEDULES,
             f"must be one of {', '.join(LR_SCHEDULES)}"),
            ("momentum", 0 <= self.momentum < 1, "must be in [0, 1)"),  # false for NaN
            ("clip_grad_norm", self.clip_grad_norm is None or
             (0 < self.clip_grad_norm and finite(self.clip_grad_norm)), "must be > 0 and finite"),
            ("lr_step", self.lr_step >= 1, "must be >= 1"),
            ("lr_gamma", 0 < self.lr_gamma < 1, "must be in (0, 1)"),
            ("lr_patience", self.lr_patience >= 0, "must be >= 0"),
            ("lr_min", 0 <= self.lr_min < self.lr, "must be >= 0 and below the learning rate"),
            ("patience", self.patience is None or self.patience >= 1, "must be >= 1"),
        ]
        for name, ok, problem in rules:
            if not ok:
                raise TrainConfigError(name, f"{problem}, got {getattr(self, name)!r:.40}")
        for name, wanted in (("patience", self.patience is not None),
                             ("lr_schedule", self.lr_schedule == "plateau")):
            if wanted and self.eval_every < 1:
                raise TrainConfigError(name, "needs the validation metric: give eval_every >= 1")


_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: `EngineConfig.keep_input`'s values.
KEEP_INPUT = ("auto", "on", "off")


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

    ``comm_dtype`` is the precision activation, gradient and gathered-weight collectives (the
    sparse exchanges too) travel in under a float32 compute precision ("fp32": as they are,
    bit for bit today's; "bf16" or "fp16":
    rounded for the wire, summed in float32 on arrival, `plexus.engine.comm`); statistics (the
    loss, the metric, BatchNorm's, the attention's) always travel in float32. Like ``dtype``
    it changes results by rounding. ``keep_input``: layer 0's fixed input features are
    all-gathered over the first stage's depth axis once at set-up and kept, instead of in
    every forward ("on"; "off": every forward; "auto": on when the features do not learn and
    the gathered block fits `plexus.engine.pieces`' budget); the same results either way.

    ``gpus_per_node``: ranks sit on nodes of that many, numbered node by node (rank r on node
    r // K; None: one node, every link "intra"; `plexus.api` takes a launcher's
    LOCAL_WORLD_SIZE for it); on a CPU world a virtual placement, which makes the ledger's
    bytes per link class measurable. ``collectives``: "flat" rings over every axis's group;
    "hierarchical" runs the sums and gathers of an axis whose groups have k > 1 ranks on each
    of m > 1 nodes in two levels (within the node, then across the nodes on 1/k of the data,
    `plexus.engine.twolevel`), "auto" where `plexus_partition.model.topology.choose_form`
    says so. ``node_block``: each node holds that block of the grid (x, y, z ranks), so an
    axis's groups sit inside nodes where the block holds the whole axis (the grid must be
    created with it: `plexus.engine.grid.Grid.create`'s ``node``). Two levels sum in another order: results agree to rounding, not bit for bit
    (gathers are exact).
    """

    spmm_backend: str = "torch"  # "torch" (CSR), "scipy" (CPU only), "torch-sparse" when installed
    agg_chunks: int = 1  # Â's row block cut into this many chunks for the aggregation
    overlap: bool = False  # each chunk's all-reduce runs while the next chunk's SpMM computes
    #: the aggregation's sums as sparse exchanges of the rows Â's blocks touch
    #: (`plexus.engine.exchange`): "auto" where they move fewer bytes, "on", "off"
    sparse_comm: str = "auto"
    tune_gemms: bool = False  # time each GEMM site's formulations once, keep the fastest (not
    # bit-reproducible across runs); off: a fixed rule by shape
    # (plexus.engine.gemm.default_formulation)
    huge_pages: bool = True  # large CPU tensors on transparent huge pages (plexus_partition.launch.hostmem)
    timers: bool = True
    dtype: str = DEFAULT_DTYPE  # compute precision (one of DTYPES): changes results by rounding
    recompute: bool = False  # recompute each stage's activations in backward
    comm_dtype: str = DEFAULT_DTYPE  # the wire precision of activations and gradients
    keep_input: str = "auto"  # one of KEEP_INPUT: layer 0's gathered input kept from set-up
    collectives: str = "auto"  # one of plexus_partition.model.topology.COLLECTIVES
    gpus_per_node: int | None = None  # ranks per (virtual) node; None: one node
    #: the block of the grid (x, y, z ranks) each node holds (`Grid.create`'s ``node``; needs
    #: ``gpus_per_node``, their product); None: the launcher's numbering
    node_block: tuple[int, int, int] | None = None
    # (link class, α, β) of a calibration: "auto" collectives priced with them, as the model
    # prices them; empty: two levels wherever an axis is split
    link_rates: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self) -> None:
        check_bound("agg_chunks", self.agg_chunks)  # the one table's bound (a BoundError)
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown compute dtype {self.dtype!r}; use one of "
                             f"{', '.join(DTYPES)}")
        if self.sparse_comm not in SPARSE_MODES:
            raise ValueError(f"unknown sparse_comm {self.sparse_comm!r}; use one of "
                             f"{', '.join(SPARSE_MODES)}")
        if self.comm_dtype not in DTYPES:
            raise ValueError(f"unknown communication dtype {self.comm_dtype!r}; use one of "
                             f"{', '.join(DTYPES)}")
        if self.dtype != DEFAULT_DTYPE and self.comm_dtype not in (DEFAULT_DTYPE, self.dtype):
            raise ValueError(f"communication dtype {self.comm_dtype} needs the compute dtype "
                             f"fp32 (a {self.dtype} run's messages are {self.dtype} already)")
        check_gpus_per_node(self.gpus_per_node)  # the one table's bound (a BoundError)
        if self.node_block is not None and (
                self.gpus_per_node is None or len(self.node_block) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                           for v in self.node_block)
                or self.node_block[0] * self.node_block[1] * self.node_block[2]
                != self.gpus_per_node):
            raise ValueError(f"node_block must be 3 whole numbers whose product is "
                             f"gpus_per_node ({self.gpus_per_node}), got {self.node_block!r}")
        for rate in self.link_rates:
            if len(rate) != 3 or not isinstance(rate[0], str) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                    for v in rate[1:]):
                raise ValueError(f"link_rates must be (link class, alpha, beta) triples of "
                                 f"seconds, got {rate!r}")
        if self.collectives not in COLLECTIVES:
            raise ValueError(f"unknown collectives {self.collectives!r}; use one of "
                             f"{', '.join(COLLECTIVES)}")
        if self.keep_input not in KEEP_INPUT:
            raise ValueError(f"unknown keep_input {self.keep_input!r}; use one of "
                             f"{', '.join(KEEP_INPUT)}")

    @property
    def comm_bytes(self) -> int:
        """Bytes of one activation or gradient element on the wire."""
        return DTYPE_BYTES[self.comm_dtype if self.dtype == DEFAULT_DTYPE else self.dtype]

    def wire_dtype(self) -> Any:
        """The torch dtype float32 activation and gradient messages are rounded to for the wire
        (None: sent as they are)."""
        if self.dtype != DEFAULT_DTYPE or self.comm_dtype == DEFAULT_DTYPE:
            return None
        import torch  # noqa: PLC0415

        return getattr(torch, _TORCH_DTYPES[self.comm_dtype])

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one activation, message or Â value."""
        return DTYPE_BYTES[self.dtype]

    def torch_dtype(self) -> Any:
        """The torch dtype of ``dtype`` (imported here so that reading a configuration does not
        import torch)."""
        import torch  # noqa: PLC0415

        return getattr(torch, _TORCH_DTYPES[self.dtype])
