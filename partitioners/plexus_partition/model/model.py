"""The model as a plain value: `ModelConfig`, and the one resolved plan of its stages.

Everything that describes a model without running it reads this module: the engine builds its
stages from `ModelConfig.plans`, the performance model prices the same plans, the partitioner
cuts the blocks they name, and the command lines parse ``--order`` with `parse_order`. Each
stage's operator (GCN, SAGE, GIN, dense, GAT; BatchNorm after a stage) is declared once in
`plexus_partition.model.ops`; the model kinds (how a GNN layer expands into stages) too.

Plain Python (no torch), so the performance model and the command lines use it freely.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

from .layout import ORDERS, LayerPlan, layer_plans
from .ops import (ACTIVATION_MODULES, ACTIVATIONS, DEFAULT_ACTIVATION, KINDS, NORMS,
                  OPERATORS)

AUTO_ORDER = "auto"  # combine first on the layers that narrow

# Compute precisions (`plexus.engine.config.EngineConfig.dtype`) and the bytes of one element.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
DTYPES = tuple(DTYPE_BYTES)
DEFAULT_DTYPE = "fp32"  # the engine's and the command lines' default


class ModelError(ValueError):
    """A model option that is unknown, out of range or does not apply to the kind (one line)."""


class OrderError(ModelError):
    """An order `parse_order` refuses (the tools say their flag: --order, --orders)."""




def check_activation(name: object, what: str = "activation") -> str:
    """``name`` if it is one of `ACTIVATIONS`; `ModelError` naming ``what`` otherwise."""
    if not isinstance(name, str) or name not in ACTIVATION_MODULES:
        raise ModelError(f"unknown {what} {name!r:.60}; use one of {', '.join(ACTIVATIONS)}")
    return name


#: The most GNN layers a model may have: deeper plans take minutes to build and price (and no
#: full-graph GNN trains that deep), so more is a typing mistake, refused at once
from .bounds import MAX_LAYERS  # noqa: E402 (the one table of bounds)
#: The largest seed: what every generator (torch, numpy, R-MAT) takes
from .bounds import MAX_SEED  # noqa: E402
#: How the model's own options are checked (a kind's options say it in their fields' metadata,
#: `plexus_partition.model.ops.base.option`); bool fields are switches
_CHECKS = {"num_layers": "count", "hidden": "count", "dropout": "rate"}


#: Every kind's option fields in the flat form, name -> field (default, checks and help in
#: its metadata: `plexus_partition.model.ops.base.option`), in the kinds' order
KIND_OPTIONS: dict[str, dataclasses.Field] = {
    f.name: f for kind in KINDS.values() for f in (dataclasses.fields(kind.options)
                                                   if kind.options else ())}


def _kinds_of(option: str) -> list[str]:
    """The kinds that have ``option``."""
    return [k for k, spec in KINDS.items()
            if spec.options and option in spec.options.__dataclass_fields__]


def check_option(name: str, value: object, check: str, switch: bool = False) -> None:
    """`ModelError` unless ``value`` passes ``check`` ("count": an integer >= 1, "rate": in
    [0, 1), "finite": a finite number) or, for a ``switch``, is a bool (a string such as
    "false" would read as true)."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if switch and not isinstance(value, bool):
        raise ModelError(f"{name} must be True or False, got {value!r:.60}")
    if check == "count" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ModelError(f"{name} must be an integer >= 1, got {value!r}")
    if check == "rate" and not (number and 0.0 <= value < 1.0):
        raise ModelError(f"{name} must be in [0, 1), got {value!r}")
    if check == "finite" and not (number and math.isfinite(value)):
        raise ModelError(f"{name} must be a finite number, got {value!r:.60}")


def check_seed(seed: object, what: str = "seed") -> int:
    """``seed`` as an int after checking it is a whole number in [0, `MAX_SEED`]; `ModelError`
    naming ``what`` otherwise (numpy and torch refuse others with tracebacks of their own)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ModelError(f"{what} must be an integer in [0, 2**63 - 1], got {seed!r:.60}")
    return int(seed)


def parse_order(order: str | Sequence[str], num_layers: int,
                symbolic: Sequence[str] = (AUTO_ORDER,), allowed: Sequence[str] = ORDERS,
                unit: str = "layer") -> tuple[str, ...] | str:
    """The one parser of product orders: one of ``allowed`` ("agg" or "combine"; the
    partitioner's stages also "dense") for every layer, a comma-separated list (or a sequence)
    with one per ``unit``, or one of the ``symbolic`` values ("auto"; the performance model adds
    "best"), returned as it is. Raises `OrderError`."""
    if isinstance(order, str):
        text = order.strip()
        if text in symbolic:
            return text
        parts = [o.strip() for o in text.split(",")] if "," in text else [text] * num_layers
    else:
        parts = [str(o).strip() for o in order]
    bad = [o for o in parts if o not in allowed]
    if bad:
        choices = ", ".join([*allowed, *symbolic])
        raise OrderError(f"unknown order {bad[0]!r}; use {choices} or a comma-separated list "
                         f"of {'/'.join(allowed)}, one per {unit}")
    if len(parts) != num_layers:
        raise OrderError(f"the order lists {len(parts)} {unit}s but the model has {num_layers}")
    return tuple(parts)


def input_dropout_rate(dropout: float, input_dropout: bool, layer: int) -> float:
    """The rate of dropout on GNN layer ``layer``'s input: ``dropout``, on layer 0 (the input
    features) only with ``input_dropout``. The one rule of built-in models
    (`ModelConfig.drops_input`) and of users' networks (`plexus.nn.Network`)."""
    return dropout if layer > 0 or input_dropout else 0.0


def auto_orders(layer_widths: Sequence[int]) -> tuple[str, ...]:
    """"auto": combine first on the layers whose output is narrower than their input."""
    return tuple("combine" if layer_widths[l + 1] < layer_widths[l] else "agg"
                 for l in range(len(layer_widths) - 1))


@dataclass(frozen=True, init=False)
class ModelConfig:
    """A GNN of ``num_layers`` layers of one ``kind``, ``activation`` between them (ReLU by
    default; `ACTIVATIONS`), as PyG's layer of the same name (each kind's declaration in
    `plexus_partition.model.ops` says which):

    - "gcn": H' = Â·H·W + b (GCNConv), optionally + H (``residual``, on layers whose input and
      output widths agree);
    - "sage": H' = mean_{j→i} H_j·W + H_i·Wr + b (SAGEConv, mean aggregation, root weight);
    - "gin": H' = MLP((1+ε)·H_i + Σ_{j→i} H_j) with MLP = Linear, activation, Linear (GINConv,
      ε trained with ``train_eps``); each GIN layer is two stages: the convolution with the
      MLP's first map, then a dense stage with its second;
    - "gat": GATConv: per head h, H'_i = Σ_j α^h_ij·(H·W^h)_j with α the softmax over node i's
      in-edges (self loop included) of LeakyReLU(a_dst^h·(H·W^h)_i + a_src^h·(H·W^h)_j);
      ``heads`` heads concatenated on hidden layers (width hidden·heads), ``out_heads`` heads
      averaged on the last; ``attn_dropout`` drops attention coefficients,
      ``negative_slope`` is the LeakyReLU's;
    - "gatv2": GATv2Conv, GAT's options: e_ij = a^h·LeakyReLU(Zr_i^h + Zl_j^h) with
      Zl = H·Wl + bl, Zr = H·Wr + br, messages α_ij·Zl_j;
    - "mlp": H' = H·W + b (no graph: dense stages only);
    - "appnp": Linear layers (dense stages), the last one's output Z⁰ propagated ``hops`` times
      as Z ← (1-α)·Â·Z + α·Z⁰ (PyG's APPNP after an MLP, α ``teleport``);
    - "gcnii": a Linear map giving H⁰, GCN2Conv layers ((1-α)·Â·H + α·H⁰)·((1-β)·I + β·W) with
      β = log(θ/ℓ + 1), then a Linear map (``alpha``, ``theta``, ``shared_weights``).

    ``norm`` "batch" puts a BatchNorm (statistics over all real nodes) after every layer but the
    last, before its activation; the stage before it has no bias (BatchNorm subtracts the mean, so
    the bias's gradient is rounding noise, which Adam would turn into steps of size lr; β is the
    bias there, and an export to PyG sets that layer's bias to zero). Dropout hits each layer's
    input; ``input_dropout`` False spares the first layer's (as OGB's examples do). ``order`` is
    "auto" (the default: combine first on convolutions that narrow, which makes the SpMM and its
    all-reduces cheaper), "agg" ((Â·H)·W, the paper's), "combine" (Â·(H·W)), or a
    comma-separated list with one of "agg"/"combine" per layer; GAT layers always combine first
    (attention needs H·W), whatever it says. The order changes no parameter and no result
    beyond float rounding, only the work and the bytes moved.

    ``options`` is the kind's own options, typed: its ``Options`` dataclass in
    `plexus_partition.model.ops` (GCN's ``residual``; GIN's ``train_eps``; GAT's ``heads``,
    ``out_heads``, ``attn_dropout``, ``negative_slope``), None for a kind without any, and
    nothing of another kind's. The flat form is accepted too, as logs, checkpoints and stores
    write it (`as_dict`) and as the keywords of the API and the tools read:
    ``ModelConfig(kind="gat", heads=2)`` is ``ModelConfig(kind="gat",
    options=gat.Options(heads=2))``; another kind's option at its default is dropped, at any
    other value refused (`ModelError`). ``cfg.heads`` reads ``cfg.options.heads``; a config
    answers only its kind's options (another kind's is an `AttributeError` naming the kinds
    that have it; the flat form, `as_dict`, holds every kind's, the others' at their defaults).
    """

    num_layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    bias: bool = True
    order: str = AUTO_ORDER  # benchmarks/results/order_default.txt: why not "agg"
    learnable_features: bool = False
    kind: str = "gcn"
    norm: str = "none"
    input_dropout: bool = True
    activation: str = DEFAULT_ACTIVATION

    options: Any = None  # the kind's Options dataclass (None: a kind without options)

    def __init__(self, num_layers: int = 2, hidden: int = 16, dropout: float = 0.5,
                 bias: bool = True, order: str = AUTO_ORDER, learnable_features: bool = False,
                 kind: str = "gcn", norm: str = "none", input_dropout: bool = True,
                 activation: str = DEFAULT_ACTIVATION, options: Any = None,
                 **flat: Any) -> None:
        for name, value in (("num_layers", num_layers), ("hidden", hidden),
                            ("dropout", dropout), ("bias", bias), ("order", order),
                            ("learnable_features", learnable_features), ("kind", kind),
                            ("norm", norm), ("input_dropout", input_dropout),
                            ("activation", activation)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "options", self._kind_options(options, flat))
        self.__post_init__()

    def _kind_options(self, options: Any, flat: dict[str, Any]) -> Any:
        """The kind's typed options from ``options`` and the flat keywords ``flat``."""
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ModelError(f"unknown model kind {self.kind!r}; use one of {', '.join(KINDS)}")
        own = KINDS[self.kind].options
        if isinstance(options, dict):  # the nested form as JSON gives it back: flat keywords
            flat, options = {**options, **flat}, None
        unknown = sorted(set(flat) - set(KIND_OPTIONS))
        if unknown:
            raise TypeError(f"unknown model option {unknown[0]!r}")
        mine = {}
        for name, value in flat.items():
            if own is not None and name in own.__dataclass_fields__:
                mine[name] = value
            elif value != KIND_OPTIONS[name].default:
                owner = next(k.name for k in KINDS.values() if name in k.option_names)
                raise ModelError(f"{name} is an option of the {owner} model; the {self.kind} "
                                 "model has none")
        if options is None:
            options = own() if own is not None else None
        elif own is None or type(options) is not own:
            want = f"{own.__module__}.Options" if own is not None else "None"
            raise ModelError(f"options of the {self.kind} model must be {want}, got "
                             f"{type(options).__name__}")
        return dataclasses.replace(options, **mine) if mine else options

    def __getattr__(self, name: str) -> Any:
        # only for names that are not attributes: this kind's option read flat (cfg.heads)
        options = self.__dict__.get("options")
        if options is not None and name in type(options).__dataclass_fields__:
            return getattr(options, name)
        if name in KIND_OPTIONS and "kind" in self.__dict__:  # another kind's option
            raise AttributeError(f"a {self.__dict__['kind']} model has no {name!r} (an option of "
                                 f"{', '.join(_kinds_of(name))}); read it of those kinds only")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def as_dict(self) -> dict[str, Any]:
        """The flat form logs, checkpoints, exports and stores write: the common options, then
        every kind's option (this kind's values, the others' defaults), as before the options
        were typed, so that what reads them reads old and new alike (the activation only when
        it is not ReLU, which every file before it had)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "options"}
        if self.activation == DEFAULT_ACTIVATION:  # ReLU's files (and keys) as they were
            del out["activation"]
        mine = dataclasses.asdict(self.options) if self.options is not None else {}
        out.update({name: mine.get(name, f.default) for name, f in KIND_OPTIONS.items()})
        return out

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ModelError(f"unknown norm {self.norm!r}; use one of {', '.join(NORMS)}")
        check_activation(self.activation)
        for f in dataclasses.fields(self):
            if f.name != "options":
                check_option(f.name, getattr(self, f.name), _CHECKS.get(f.name, ""),
                             f.type in (bool, "bool"))
        for f in dataclasses.fields(self.options) if self.options is not None else ():
            check_option(f.name, getattr(self.options, f.name), f.metadata.get("check", ""),
                         f.type in (bool, "bool"))
        if self.num_layers > MAX_LAYERS:
            raise ModelError(f"num_layers must be in [1, {MAX_LAYERS}], got {self.num_layers}")
        if not isinstance(self.order, str):
            raise ModelError(f"order must be a string, got {self.order!r}")
        parse_order(self.order, self.num_layers)  # validates (an `OrderError`)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every option's name in the flat form (what `from_options` accepts): the common
        options, then every kind's."""
        return (*(f.name for f in dataclasses.fields(cls) if f.name != "options"),
                *KIND_OPTIONS)

    @classmethod
    def from_options(cls, **options: object) -> "ModelConfig":
        """A config from keyword options, with a clear error for a keyword that is not an option
        (e.g. ``model=`` for ``kind=``)."""
        unknown = sorted(set(options) - set(cls.field_names()))
        if unknown:
            hint = " (the model kind is kind=...)" if unknown[0] in ("model", "type") else ""
            raise TypeError(f"unknown model option {unknown[0]!r}{hint}; the options are "
                            f"{', '.join(cls.field_names())}")
        return cls(**options)  # type: ignore[arg-type]

    # ---- the kind's expansion into stages -----------------------------------------------
    @property
    def kind_decl(self):  # noqa: ANN201 — plexus_partition.model.ops.base.ModelKind
        """The declaration of this model kind (`plexus_partition.model.ops.KINDS`)."""
        return KINDS[self.kind]

    @property
    def aggregation(self) -> str:
        """The sparse operator's normalization: "gcn", "mean" or "sum"."""
        return self.kind_decl.aggregation

    @property
    def stages_per_layer(self) -> int:
        return len(self.kind_decl.stage_ops)

    @property
    def num_stages(self) -> int:
        return self.num_layers * self.stages_per_layer

    @property
    def last_layer_stage(self) -> int:
        """The first stage of the last GNN layer: its input is the last hidden layer's output
        (the embeddings)."""
        return self.stages_per_layer * (self.num_layers - 1)

    def layer_width(self, layer: int, num_classes: int) -> int:
        """Output width of GNN layer ``layer``: the classes for the last; else the kind's hidden
        width (``hidden``; GAT's ``hidden · heads``, its heads concatenated)."""
        if layer == self.num_layers - 1:
            return num_classes
        return self.kind_decl.hidden_width(self)

    def layer_widths(self, num_features: int, num_classes: int) -> list[int]:
        """Input width, each layer's output width, class count."""
        return [num_features] + [self.layer_width(l, num_classes)
                                 for l in range(self.num_layers)]

    def widths(self, num_features: int, num_classes: int) -> list[int]:
        """D_0 .. D_S: the input width of every stage, then the class count (a GIN layer's
        MLP is hidden wide inside)."""
        layer = self.layer_widths(num_features, num_classes)
        out = [num_features]
        for l in range(self.num_layers):
            out += [self.hidden] * (self.stages_per_layer - 1) + [layer[l + 1]]
        return out

    def layer_orders(self, num_features: int, num_classes: int) -> tuple[str, ...]:
        """The product order of every GNN layer's convolution, "auto" resolved."""
        parsed = parse_order(self.order, self.num_layers)
        if parsed == AUTO_ORDER:
            return auto_orders(self.layer_widths(num_features, num_classes))
        return parsed  # type: ignore[return-value]

    def orders(self, num_features: int, num_classes: int,
               layer_orders: Sequence[str] | None = None) -> list[str]:
        """The order of every stage ("agg", "combine" or "dense"), "auto" resolved;
        ``layer_orders`` overrides the configured per-layer orders."""
        convs = (layer_orders if layer_orders is not None
                 else self.layer_orders(num_features, num_classes))
        out = []
        for l, conv in enumerate(convs):
            for op in self.kind_decl.ops_of_layer(self, l):
                out.append(OPERATORS[op].stage_order(conv))
        return out

    def plans(self, num_features: int, num_classes: int,
              layer_orders: Sequence[str] | None = None) -> list[LayerPlan]:
        """The one resolved plan: every stage's roles, operator, BatchNorm, bias, GNN layer and
        what its kind declares per stage (`LayerPlan.options`); ``layer_orders`` overrides the
        configured per-layer orders (e.g. the performance model's choice per grid)."""
        widths = self.widths(num_features, num_classes)
        step = self.stages_per_layer
        layout = layer_plans(self.num_stages, self.orders(num_features, num_classes,
                                                          layer_orders))
        out, kind = [], self.kind_decl
        for p in layout:
            s, layer = p.index, p.index // step
            op = kind.ops_of_layer(self, layer)[s % step]
            last_of_layer = s % step == step - 1
            norm = self.norm == "batch" and last_of_layer and s < self.num_stages - 1
            out.append(dataclasses.replace(
                p, layer=layer, op=op, norm=norm,
                bias=self.bias and not norm and OPERATORS[op].has_bias,
                options=kind.stage_options(self, layer, s % step, widths[s], widths[s + 1])))
        return out

    def drops_input(self, plan: LayerPlan) -> bool:
        """Whether dropout hits this stage's input: the first stage of a layer, at
        `input_dropout_rate`."""
        first = plan.index % self.stages_per_layer == 0
        return first and input_dropout_rate(self.dropout, self.input_dropout, plan.layer) > 0

    def activates(self, plan: LayerPlan) -> bool:
        """Whether an activation follows the stage (every stage but the model's last, unless
        the activation is "none")."""
        return plan.index < self.num_stages - 1 and self.activation != "none"
