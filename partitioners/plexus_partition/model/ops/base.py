"""What every operator declares, and the sizes it declares them in (no torch).

An operator is one kind of stage (a graph convolution, a dense layer, GAT) or what follows one
(BatchNorm). Its declaration is the single description of the stage that the engine, the
collective schedule, the performance model, the memory check, the exporter and the ledger test
read: its parameters (`Param`), its flops (`flops`) and what it holds in memory (`memory`).
It is the kind's torch-free spec: its torch code (``stage``, on the stage toolkit) and serial
reference (``serial``) are its layer in the engine (`plexus.engine.kinds`). The collectives the
torch code issues, with their sizes, are recorded from a dry run of it (`plexus.engine.dryrun`),
unless the operator declares them (`forward`, `backward`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from plexus_partition.model.layout import LayerPlan, Padding

NORMS = ("none", "batch")

#: The activations between layers (and inside GIN's MLP), each as the ``torch.nn`` module PyG's
#: ``activation_resolver`` gives for the name (its defaults: ELU's alpha 1, LeakyReLU's slope
#: 0.01, GELU's exact form); "none": the identity (``torch.nn.Identity``). One table for the engine, the serial
#: reference and the export to PyG (`plexus_partition.model.model.ModelConfig.activation`).
ACTIVATION_MODULES = {"relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU", "gelu": "GELU",
                      "tanh": "Tanh", "none": "Identity"}
ACTIVATIONS = tuple(ACTIVATION_MODULES)
DEFAULT_ACTIVATION = "relu"


@dataclass(frozen=True)
class Param:
    """One parameter (or running statistic) of a stage.

    ``layout`` says how it is cut on the grid: "weight" (rows: the stage's input width, cut like
    W; columns: its inner width), "inner" (one entry per inner column, cut like W's columns),
    "vector" (one per output column, cut like the output's columns) or "scalar" (replicated).
    The inner width is the output width, except for a GAT stage that averages ``heads`` heads:
    there it is ``heads`` blocks of the output width (`KindSpec.head_blocks`), each padded like
    the output. ``init`` is "glorot" (uniform ±√(6/(rows+cols)), drawn in stage order from
    generator ``stream``: 0 for the weights W, 1 for the rest), "glorot_heads" (the same bound
    from heads and per-head width, as PyG's attention vectors), "linear" (PyG's and torch's
    `Linear` default: uniform ±1/√fan_in, ``fan_in`` the weight's rows or, for its bias, the
    ``fan_in`` given), "zeros" or "ones". ``pyg`` is
    the name under the stage's PyG module (the model kind adds the prefix), ``transform`` how
    the tensor becomes PyG's ("T": transposed, "heads": shape (1, heads, width), "same").
    """

    kind: str  # the engine's name without the stage index: "W", "b", "att_src", ...
    shape: tuple[int, ...]  # full, unpadded
    layout: str
    init: str
    stream: int = 1
    pyg: str = ""
    transform: str = "same"
    buffer: bool = False  # a running statistic: in the state, not trained
    heads: int = 1  # the heads of a "glorot_heads" or "heads" parameter
    fan_in: int = 0  # a "linear" bias's fan-in: its weight's rows

    def name(self, stage: int) -> str:
        return f"{self.kind}{stage}"


def split_name(name: str) -> tuple[str, int]:
    """"W3" -> ("W", 3), "att_src0" -> ("att_src", 0): a parameter's kind and stage."""
    kind = name.rstrip("0123456789")
    return kind, int(name[len(kind):])


def div(a: float, b: int) -> int:
    """a / b where padding makes it exact; a remainder means the declaration and the layout
    disagree."""
    q, r = divmod(int(a), b)
    assert r == 0 and q * b == a, f"{a} is not divisible by {b}: padding does not match the layout"
    return q


@dataclass(frozen=True)
class StageSizes:
    """A stage's padded sizes on a grid: what its collectives, flops and bytes are written in.

    ``o``, ``i``, ``d`` are the sizes of its outer, inner and depth axes, ``n`` the padded node
    count, ``D`` and ``D2`` its padded input and output widths, ``Di`` its padded inner width
    (`KindSpec.inner_width`), ``nnz`` the non-zeros of the whole Â (self loops included).
    """

    plan: LayerPlan
    shape: Mapping[str, int]
    n: int
    D: int
    D2: int
    Di: int
    nnz: float = 0.0
    learnable_features: bool = False
    dtype_bytes: int = 4
    index_bytes: int = 4  # of sparse structures: 4 where the sizes fit 32 bits
    drops_input: bool = False
    last: bool = False
    device: str = "cpu"  # "cuda": the step's masks are fused kernels, no host allocator slack
    kept_input: bool = False  # stage 0's fixed input gathered once and kept (resident)
    allocator_slack: bool = True  # False: tensors only (a CPU allocator's slack left out)

    @property
    def caller_input(self) -> int:
        """Elements of the input the caller still references during the stage's forward: the
        previous stage's output, or stage 0's gathered features while the forward gathers them
        (none when it reads the stored shard: nothing to gather, or kept gathered, resident)."""
        first = self.plan.index == 0
        return 0 if first and (self.d == 1 or self.kept_input) else self.h_in

    @property
    def o(self) -> int:
        return self.shape[self.plan.outer]

    @property
    def i(self) -> int:
        return self.shape[self.plan.inner]

    @property
    def d(self) -> int:
        return self.shape[self.plan.depth]

    def size(self, axis: str) -> int:
        return self.shape[axis]

    @property
    def needs_dh(self) -> bool:
        """Whether backward computes the input's gradient (not for fixed input features)."""
        return self.plan.index > 0 or self.learnable_features

    @property
    def h_in(self) -> int:
        """Elements of the stage's input block H (rows by o, columns by i)."""
        return div(self.n * self.D, self.o * self.i)

    @property
    def nnz_block(self) -> float:
        """Non-zeros of this rank's Â block, assuming they spread evenly over the blocks."""
        p = self.plan
        return self.nnz / (self.shape[p.a_rows] * self.shape[p.a_cols])

    @property
    def w_shard(self) -> float:
        """Elements of this rank's stored shard of W (the gathered block cut over W's flat
        axis)."""
        p = self.plan
        return self.D / self.i * self.Di / self.shape[p.w_cols] / self.shape[p.w_flat]


Add = Callable[..., None]  # schedule.add(name, phase, op, axis, size, itemsize=None, rows=None)


@dataclass(frozen=True)
class Flops:
    """Flops one rank runs for a stage per training step: sparse (SpMM, SDDMM, per-edge work)
    and dense (GEMM). ``passes``: the sparse products among them, each (non-zeros of the
    block, width of the dense operand), 2·nnz·width flops apiece, for a machine that prices a
    product by its bytes per non-zero rather than by flops (the rest of ``spmm``, per-edge
    work, stays at the flop rate)."""

    spmm: float = 0.0
    gemm: float = 0.0
    passes: tuple[tuple[float, float], ...] = ()

    @classmethod
    def products(cls, passes: list[tuple[float, float]], gemm: float = 0.0,
                 other: float = 0.0) -> "Flops":
        """The flops of sparse products ``passes`` ((nnz, width) each), ``other`` sparse
        flops besides them and ``gemm`` dense ones."""
        return cls(sum(2.0 * nnz * w for nnz, w in passes) + other, gemm, tuple(passes))


@dataclass
class StageMemory:
    """What a stage holds, in bytes, as the engine runs it (the performance model adds these up
    over the epoch; `plexus.perfmodel.model.epoch_memory`).

    ``kept``: what autograd saves for backward from the stage (its ReLU mask aside);
    ``forward``: the transient bytes at each candidate moment of its forward (the caller's input
    included), over what earlier stages keep; ``backward``: (bytes of ``kept`` still alive,
    transient bytes) at each moment of its backward; ``out``: elements of its output;
    ``weights``/``optimizer``: parameters with gradients and gathered copies / Adam's moments;
    ``resident``: what it holds for the whole run besides Â's blocks (e.g. index structures).
    """

    kept: float
    forward: list[float]
    backward: list[tuple[float, float]]
    out: float
    weights: float = 0.0
    optimizer: float = 0.0
    resident: float = 0.0


MASTER_BYTES = 4  # parameters, their gradients and Adam's moments are float32 in every precision
#: Bytes of temporaries per element of a dropout mask drawn with torch operations (CPUs): the
#: 32-bit hash word per column pair, the boolean mask (`plexus.engine.masks.masked`). On CUDA
#: one fused kernel draws it in registers: none.
MASK_TEMP_BYTES = 3
#: ... of an attention-dropout mask drawn on the torch path (`plexus.engine.masks.edge_mask`):
#: per edge, its int64 passes (the gathered ids, the hash, fmix's temporaries); then, once those
#: are freed, a constant part and the int32 words per edge and head. Measured with the tensor
#: tracker on 200,000 edges, the boolean mask's byte per head apart: 64, 64, 70, 80, 100 and
#: 120 B per edge at 1, 3, 6, 8, 12 and 16 heads.
EDGE_MASK_EDGE_BYTES, EDGE_MASK_BASE_BYTES, EDGE_MASK_HEAD_BYTES = 64, 40, 5


def edge_mask_temp_bytes(heads: int) -> int:
    """Bytes per edge of the temporaries an attention-dropout mask of ``heads`` heads takes
    while it is drawn on the torch path (CPUs): the larger of its two phases."""
    return max(EDGE_MASK_EDGE_BYTES, EDGE_MASK_BASE_BYTES + EDGE_MASK_HEAD_BYTES * heads)


#: ... per edge and head of a float32 pass over a block's edges (gathered node statistics, the
#: scores before LeakyReLU, a comparison's mask: `plexus.engine.edges`).
EDGE_PASS_BYTES = 12


def dropout_work(z: StageSizes) -> float:
    """Bytes a dropout of the stage's input holds while it draws its mask, forward and
    backward: `MASK_TEMP_BYTES` per element of the input on CPUs (one pass over the whole
    input, in pieces only past the engine's budget), nothing on CUDA (a fused kernel)."""
    if not z.drops_input or z.device == "cuda":
        return 0.0
    return (z.n / z.o) * (z.D / z.i) * MASK_TEMP_BYTES


#: Elementwise passes per element of a dropped-out input, forward or backward (the mask is
#: recomputed in backward): the hash's int32 passes over half the columns (the xor of row and
#: column hashes, two rounds of a multiply and a half-word xor), then the comparison, the select
#: and the scale over every element (`plexus.engine.masks.masked`). On CUDA the fused kernel
#: reads and writes each element once.
DROPOUT_PASSES, FUSED_DROPOUT_PASSES = 4 / 2 + 3, 2
#: ... after a stage: its ReLU (in place, its one-byte mask, backward's masked gradient) and the
#: bias (the add, backward's column sum), per output element.
RELU_PASSES, BIAS_PASSES = 3, 2
#: ... of the loss, per logit: softmax cross-entropy's max, shift, exp, sum, division, one-hot
#: and its backward's copy, subtraction and two scalings (BCE's three terms are as many).
LOSS_PASSES = 10


def elementwise_passes(z: StageSizes, activates: bool) -> float:
    """Element passes of the memory-bound elementwise work of a stage per training step, which
    no flop rate covers: its input's dropout (forward and backward), its ReLU (``activates``),
    its bias, and after the last stage the loss. On small or narrow graphs this, not the SpMM
    or the GEMM, is most of an epoch's compute (R-MAT scale 13 with 128 features on a CPU:
    dropout's hash was half the epoch)."""
    out = z.n / z.size(z.plan.out_rows) * z.D2 / z.size(z.plan.out_cols)
    per = FUSED_DROPOUT_PASSES if z.device == "cuda" else DROPOUT_PASSES
    passes = 2 * per * z.h_in if z.drops_input else 0.0
    passes += (RELU_PASSES * out if activates else 0.0) + (BIAS_PASSES * out if z.plan.bias
                                                           else 0.0)
    return passes + (LOSS_PASSES * out if z.last else 0.0)


def param_memory(z: StageSizes, shard: float, gathered: float, vectors: float = 0.0
                 ) -> tuple[float, float]:
    """(weights, optimizer) bytes of a stage's parameters: each float32 shard (``shard`` elements
    of weights, ``vectors`` of replicated vectors) with its gradient, a cast copy in a lower
    precision, the ``gathered`` block in the compute precision; Adam's two moments."""
    fb = z.dtype_bytes
    cast = fb != MASTER_BYTES
    own = shard + vectors
    weights = 2 * own * MASTER_BYTES + (gathered + (own if cast else 0.0)) * fb
    return weights, 2 * own * MASTER_BYTES


class KindSpec:
    """The declaration of one operator, torch-free: what cutting and pricing need (its
    parameters, widths, flops, memory; its torch code is its `plexus.engine.kinds` layer);
    subclasses fill in what applies."""

    name = ""
    graph = True  # multiplies by a block of Â (the partitioner cuts one for it)
    has_bias = True  # a bias b (when the plan has one) added by the stage framework
    own_bias = False  # its torch code adds b itself, inside the stage (APPNP's, before its hops)
    follows = False  # runs on a stage's output in its layout (BatchNorm): no receive
    statistics = False  # every collective is a float32 statistic (BatchNorm's), sent exactly
    # whatever the wire precision (`EngineConfig.comm_dtype`)

    def stage_order(self, conv_order: str) -> str:
        """The stage's order given its GNN layer's convolution order."""
        return conv_order

    def uses_plain_block(self, plan: LayerPlan) -> bool:
        """Whether the stage multiplies by the shard's block itself and its transpose (sharing
        them with other stages); else it holds what it needs in `memory`'s ``resident``."""
        return False

    def reads_input_by_aggregation(self, plan: LayerPlan) -> bool:
        """Whether the stage's input reaches the loss only through its block of Â (aggregate
        first, the plain block: Â_blk·H): its gradient Â_blkᵀ·dAGG is then zero outside the
        block's touched columns, so the sum AR(dH) over depth may travel as a sparse exchange
        ("input", `plexus_partition.model.schedule`)."""
        return False

    def adds_input(self, plan: LayerPlan) -> bool:
        """Whether the stage adds its input to its output (a residual connection; PyG's stack
        adds it after the layer)."""
        return False

    def reads(self, plan: LayerPlan) -> tuple[int, ...]:
        """Earlier stages whose activated outputs it reads (GCNII's H⁰), in its input's layout."""
        return stage_option(plan, "reads", ())

    def carries(self, plan: LayerPlan) -> bool:
        """Whether it hands what it `reads` on in the next stage's layout (its own collectives)."""
        return stage_option(plan, "carries", False)

    def learns_eps(self, plan: LayerPlan) -> bool:
        """Whether the stage trains a scalar ε replicated on every rank (GIN's)."""
        return False

    def head_blocks(self, plan: LayerPlan) -> int:
        """How many blocks of the output width the inner width holds (1: the same width)."""
        return 1

    def inner_width(self, plan: LayerPlan, d_out: int) -> int:
        """The width of the stage's product H·W (padded when ``d_out`` is)."""
        return self.head_blocks(plan) * d_out

    def params(self, plan: LayerPlan, d_in: int, d_out: int) -> list[Param]:
        """The stage's parameters for real widths ``d_in``, ``d_out`` (the bias included when the
        plan has one)."""
        raise NotImplementedError

    def pyg_extras(self, plan: LayerPlan, d_in: int, d_out: int, model_bias: bool
                   ) -> list[Param]:
        """What PyG's module holds and Plexus does not (exported as its initial value): by
        default the bias of a stage whose BatchNorm's β replaces it."""
        if self.has_bias and model_bias and not plan.bias:
            return [Param("b", (d_out,), "vector", "zeros", pyg=self.bias_pyg)]
        return []

    bias_pyg = "bias"

    def bias_param(self, plan: LayerPlan, d_out: int) -> list[Param]:
        return [Param("b", (d_out,), "vector", "zeros", pyg=self.bias_pyg)] if plan.bias else []

    @property
    def declares(self) -> bool:
        """Whether the operator writes its collectives by hand (`forward`, `backward`); one
        that does not (no built-in kind does) has them recorded from a dry run of its layer's
        torch code (`plexus_partition.model.schedule.Recorder`, the engine's
        `plexus.engine.dryrun.StageRecorder`)."""
        return type(self).forward is not KindSpec.forward

    def forward(self, add: Add, z: StageSizes, phase: str) -> None:
        """Add the collectives of the stage's forward (``phase`` "forward" or "eval") in program
        order, besides the stage framework's own (AG(H) on stage 0). Optional: without it (and
        `backward`) a dry run of its layer's ``stage`` records them."""
        raise NotImplementedError

    def backward(self, add: Add, z: StageSizes) -> None:
        """Add the collectives of the stage's backward, besides the framework's (AR(db), and
        AR(dH) over depth / RS(dH) on stage 0)."""
        raise NotImplementedError

    def flops(self, z: StageSizes) -> Flops:
        raise NotImplementedError

    def memory(self, z: StageSizes) -> StageMemory:
        raise NotImplementedError


def option(default: Any, help: str, *, metavar: str | None = None, check: str = "",
           negatable: bool = False) -> Any:
    """A field of a kind's options dataclass (`ModelKind.options`):
    `plexus_partition.model.model.ModelConfig` takes it as a keyword and
    `plexus_partition.model.modelopts` makes its flag from it (``--name-with- dashes``; ``help``
    with ``{default}`` filled in; ``metavar``). ``check``: "count" (an integer >= 1), "rate" (in [0,
    1)), "finite" (a finite number); a bool is a switch (``negatable``: ``--x/--no-x``, else ``--x``
    turns it on)."""
    return field(default=default, metadata={"help": help, "metavar": metavar, "check": check,
                                            "negatable": negatable})


def stage_option(plan: LayerPlan, name: str, default: Any) -> Any:
    """A stage's per-stage option ``name`` (`ModelKind.stage_options`), ``default`` where its
    kind declares none."""
    return getattr(plan.options, name, default)


@dataclass(frozen=True)
class ModelKind:
    """A model kind: how one GNN layer expands into stages, which normalization of M it
    aggregates with, and its PyG layer (for exports and the reference stacks).

    ``pyg_prefixes`` has one template per stage of a layer: the PyG module a stage's
    parameters live under (``{l}``: the GNN layer). ``pyg_kwargs`` gives a layer's PyG
    constructor arguments besides its widths and bias (`plexus.engine.pygmodel.conv_spec`); a
    layer built around its own MLP (GINConv) describes it under ``"nn"``, module by module.
    ``options`` is the kind's options dataclass (fields made with `option`: `ModelConfig`
    fields and command-line flags), ``stage_options`` what a stage's plan carries of them
    (`LayerPlan.options`; called with the config, the GNN layer, the stage's position in it and
    its widths), ``hidden_width`` a hidden layer's output width, ``summary`` the kind's part
    of a model's one-line description.
    """

    name: str
    stage_ops: tuple[str, ...]
    aggregation: str  # plexus_datasets.graph.normalize's: "gcn", "mean" or "sum"
    pyg_class: str
    pyg_prefixes: tuple[str, ...]
    description: str
    attention: bool = False  # has heads: its stages aggregate with their own attention
    options: type | None = None  # the kind's options dataclass (fields made with `option`)
    #: a weighted graph (`plexus_datasets.Graph.weighted`) means something to it: GCN
    #: normalizes with the weights, an MLP reads no graph; the others would silently ignore them
    takes_edge_weights: bool = False
    pyg_kwargs: Callable[[Any, int, int, int], dict] = field(  # (config, layer, in, out)
        default=lambda cfg, layer, d_in, d_out: {})
    stage_options: Callable[[Any, int, int, int, int], Any] = field(  # (config, layer,
        default=lambda cfg, layer, pos, d_in, d_out: None)  # position in it, in, out)
    hidden_width: Callable[[Any], int] = field(default=lambda cfg: cfg.hidden)
    summary: Callable[[Any], str] = field(default=lambda cfg: "")
    #: (config, layer) -> that layer's stages' operators (None: ``stage_ops``; APPNP's MLP's)
    layer_ops: Callable[[Any, int], tuple[str, ...]] | None = None
    #: (config, layer, in, out) -> that layer's PyG modules (`plexus.engine.pygmodel.pyg_spec`)
    pyg_layer: Callable[[Any, int, int, int], dict | None] = field(default=lambda *a: None)

    def ops_of_layer(self, cfg: Any, layer: int) -> tuple[str, ...]:
        """The operators of GNN layer ``layer``'s stages under ``cfg``."""
        return self.stage_ops if self.layer_ops is None else self.layer_ops(cfg, layer)

    @property
    def option_names(self) -> tuple[str, ...]:
        """The `ModelConfig` fields only this kind takes."""
        return tuple(f.name for f in fields(self.options)) if self.options else ()


def glorot_bound(rows: int, cols: int) -> float:
    """Glorot-uniform's bound √(6/(rows+cols))."""
    return math.sqrt(6.0 / (rows + cols))


def stage_sizes(plans: Sequence[LayerPlan], shape: Mapping[str, int], pad: Padding,
                ops: Mapping[str, KindSpec], drops: Sequence[bool] | None = None,
                **common: Any) -> list[StageSizes]:
    """`StageSizes` of every stage of ``plans`` on ``shape`` (``drops``: whether dropout hits
    each stage's input; ``common``: the other fields, the same for every stage)."""
    out = []
    for p in plans:
        D2 = pad.widths_padded[p.index + 1]
        out.append(StageSizes(p, shape, pad.nodes_padded, pad.widths_padded[p.index], D2,
                              ops[p.op].inner_width(p, D2), last=p.index == len(plans) - 1,
                              drops_input=bool(drops[p.index]) if drops else False, **common))
    return out
