"""The performance model's inputs: the problem (`ModelSpec`: graph sizes, the model, how a run
holds it), the grid as the model takes it, and the padded stage sizes of a spec on a grid, which
its volume, compute and memory read (`plexus.perfmodel.model`, `plexus.perfmodel.memory`)."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import DEFAULT_PERMUTATION, LayerPlan, Padding, padding
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.ops import NORM_OP, OPERATORS
from plexus_partition.model.ops.base import StageSizes, stage_sizes
from plexus_partition.model.schedule import (SPARSE_MODES, Collective, SparseExchange,
                                             epoch_collectives, estimated_rows)
from plexus_partition.model.topology import COLLECTIVES

BEST_ORDER = "best"  # ModelSpec.best_orders: the orders choose_orders predicts fastest, per grid

Grid3 = tuple[int, int, int]


@dataclass(frozen=True)
class ModelSpec:
    """The problem: graph sizes, the model (a `plexus_partition.model.model.ModelConfig`, the same
    value the engine is built from) and how a run holds it.

    ``nnz`` is the number of non-zeros of the normalized Â (self loops included).
    ``best_orders``: price each grid with the per-layer orders `choose_orders` predicts fastest
    there instead of the model's ("--order best"). ``perm`` only affects memory: "double"
    keeps two permuted adjacencies (Â1, Â2), so layers of different parity never share an Â
    block. ``dtype_bytes`` is the compute precision's (activations, Â values, fixed features,
    messages; `plexus.engine.config.EngineConfig.dtype`); parameters, their gradients and
    Adam's moments are float32 whatever it is. ``recompute``: each stage's activations are
    recomputed in backward (`plexus.engine.config.EngineConfig.recompute`). ``multilabel``: the
    task is ``num_classes`` binary tasks (ogbn-proteins), labels an int8 node×task matrix, the
    loss a masked binary cross-entropy (`plexus.engine.loss.ParallelBCE`), not a softmax over
    classes with int64 labels.
    """

    num_nodes: int
    nnz: int
    num_features: int
    num_classes: int
    model: ModelConfig = field(default_factory=ModelConfig)
    best_orders: bool = False
    perm: str = DEFAULT_PERMUTATION
    dtype_bytes: int = 4
    recompute: bool = False
    index_bytes: int = 0  # CSR index bytes; 0: 4 where a block's sizes fit 32 bits, else 8
    symmetric: bool = True  # Â = Âᵀ (undirected graphs): a block's transpose is another block
    from_store: bool = False  # the rank reads its shard from a store instead of cutting it from
    #                           the whole graph in its own process (a smaller runtime term)
    multilabel: bool = False  # binary tasks (labels node×task int8, BCE loss)
    device: str = "cpu"  # where the ranks train: "cuda" prices the GPU's allocator (its peak
    #                      holds no process runtime; fused mask kernels, no host slack)
    name: str = ""
    comm_dtype_bytes: int = 0  # the activation and gradient collectives' payload bytes per
    #                            element (`--comm-dtype`); 0: the compute precision's
    sparse_comm: str = "auto"  # sparse exchanges of the aggregation's sums (`--sparse-comm`)
    keep_input: bool = True  # fixed input features gathered once and kept (no AG(H) per step)
    agg_chunks: int = 1  # the aggregation's row pieces (`--agg-chunks`)
    overlap: bool = False  # each piece's sum overlaps the next piece's SpMM (`--overlap`)
    collectives: str = "auto"  # on a cluster, the form of each collective (`--collectives`)
    # False: tensors only, as the tensor tracker counts them (`plexus.runtime.memstats`): the
    # host memory a CPU allocator keeps beyond live tensors left out
    allocator_slack: bool = True

    def __post_init__(self) -> None:
        for key in ("num_nodes", "nnz", "num_features", "num_classes", "dtype_bytes",
                    "index_bytes"):
            value = getattr(self, key)
            if key == "index_bytes" and value == 0:
                continue
            try:  # accept numpy integers (sizes often come from arrays), reject floats
                number = operator.index(value)
            except TypeError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
            if number < (0 if key == "nnz" else 1):
                raise ValueError(f"{key} must be {'>= 0' if key == 'nnz' else '>= 1'}, "
                                 f"got {number}")
            object.__setattr__(self, key, int(number))  # frozen: normalize in place once
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(self.model).__name__}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.comm_dtype_bytes not in (0, 2, 4):
            raise ValueError(f"comm_dtype_bytes must be 0 (the compute precision's), 2 or 4, "
                             f"got {self.comm_dtype_bytes!r}")
        if self.sparse_comm not in SPARSE_MODES:
            raise ValueError(f"sparse_comm must be one of {', '.join(SPARSE_MODES)}, got "
                             f"{self.sparse_comm!r}")
        if self.collectives not in COLLECTIVES:
            raise ValueError(f"collectives must be one of {', '.join(COLLECTIVES)}, got "
                             f"{self.collectives!r}")
        if (isinstance(self.agg_chunks, bool) or not isinstance(self.agg_chunks, int)
                or self.agg_chunks < 1):
            raise ValueError(f"agg_chunks must be a whole number >= 1, got {self.agg_chunks!r}")

    @classmethod
    def of(cls, num_nodes: int, nnz: int, num_features: int, num_classes: int,
           **options: Any) -> "ModelSpec":
        """A spec from the graph's sizes and keyword options, each either a `ModelConfig` field
        (``num_layers=3, hidden=64, kind="gat", ...``) or one of this class's; ``order="best"``
        sets `best_orders`."""
        own = {f for f in cls.__dataclass_fields__ if f not in ("model",)}
        model = {k: v for k, v in options.items() if k not in own}
        if model.get("order") == BEST_ORDER:
            model.pop("order")
            options["best_orders"] = True
        return cls(num_nodes, nnz, num_features, num_classes,
                   ModelConfig.from_options(**model),
                   **{k: v for k, v in options.items() if k in own})

    @property
    def comm_itemsize(self) -> int:
        """Payload bytes per element of the activation and gradient collectives."""
        return self.comm_dtype_bytes or self.dtype_bytes

    @property
    def kept_input(self) -> bool:
        """Whether stage 0's fixed input features are gathered once and kept."""
        return self.keep_input and not self.model.learnable_features

    def exchange(self) -> SparseExchange:
        """The sparse exchanges without the graph: rows estimated from the mean degree
        (`plexus_partition.model.schedule.estimated_rows`)."""
        return SparseExchange(self.sparse_comm, estimated_rows(self.nnz / self.num_nodes))

    @property
    def widths(self) -> list[int]:
        """Real D_0 .. D_S: input width, every stage's output width."""
        return self.model.widths(self.num_features, self.num_classes)

    @property
    def order_text(self) -> str:
        """The order as the command line says it ("best" with `best_orders`)."""
        return BEST_ORDER if self.best_orders else self.model.order

    def fixed_orders(self) -> tuple[str, ...] | None:
        """The per-layer orders when they do not depend on the grid; None with `best_orders`."""
        if self.best_orders:
            return None
        return tuple(self.model.layer_orders(self.num_features, self.num_classes))

    def plans(self, orders: Sequence[str] | None = None) -> list[LayerPlan]:
        """The model's plans with per-layer ``orders`` (default: the model's own)."""
        return self.model.plans(self.num_features, self.num_classes, orders)


def normalize_grid(grid: Grid3 | Sequence[int] | Mapping[str, int]) -> dict[str, int]:
    """{"x": X, "y": Y, "z": Z} from a 3-tuple, a dict or a `GridShape`; raises ValueError on bad
    sizes."""
    return GridShape.of(grid).as_dict()


def spec_layout(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str]
                ) -> tuple[list[LayerPlan], Padding]:
    """The spec's plans with ``orders`` and their padded sizes on the grid ``shape``."""
    plans = spec.plans(orders)
    return plans, padding(shape, plans, spec.num_nodes, spec.widths)


def spec_collectives(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str],
                     evaluate: bool = False, exchange: SparseExchange | None = None
                     ) -> list[Collective]:
    """Every collective of one epoch of the spec on ``shape`` with ``orders``
    (`plexus_partition.model.schedule.epoch_collectives` with the spec's payload precision, kept
    input and sparse exchanges: ``exchange``, else the estimate from the mean degree)."""
    plans, pad = spec_layout(spec, shape, orders)
    return epoch_collectives(plans, shape, pad,
                             learnable_features=spec.model.learnable_features, evaluate=evaluate,
                             multilabel=spec.multilabel, kept_input=spec.kept_input,
                             payload_itemsize=spec.comm_itemsize,
                             exchange=exchange or spec.exchange(),
                             recorder=DryRunRecorder(spec.dtype_bytes))


class DryRunRecorder:
    """The schedule's recorder (`plexus_partition.model.schedule.Recorder`) of the operators
    that declare no collectives: a dry run of their torch code
    (`plexus.engine.dryrun.StageRecorder`, compute precision of ``dtype_bytes``), the engine
    imported only when such an operator is priced."""

    def __init__(self, dtype_bytes: int = 4) -> None:
        self.dtype_bytes = dtype_bytes
        self._recorder = None

    def __call__(self, op: str, z: StageSizes, phase: str) -> Sequence[tuple]:
        if self._recorder is None:
            from plexus.engine.dryrun import StageRecorder
            self._recorder = StageRecorder(self.dtype_bytes)
        return self._recorder(op, z, phase)


def spec_sizes(spec: ModelSpec, shape: Mapping[str, int], orders: Sequence[str],
               index_bytes: int = 4) -> list[StageSizes]:
    """Every stage's sizes (`plexus_partition.model.ops.base.StageSizes`) of the spec on
    ``shape``."""
    plans, pad = spec_layout(spec, shape, orders)
    return stage_sizes(plans, shape, pad, OPERATORS, [spec.model.drops_input(p) for p in plans],
                       nnz=float(spec.nnz), learnable_features=spec.model.learnable_features,
                       dtype_bytes=spec.dtype_bytes, index_bytes=index_bytes,
                       device=spec.device, allocator_slack=spec.allocator_slack,
                       kept_input=spec.kept_input)


def stage_operators(plan: LayerPlan) -> list:
    """The operators of a stage: its own, then BatchNorm's when the plan has one."""
    return [OPERATORS[plan.op]] + ([OPERATORS[NORM_OP]] if plan.norm else [])
