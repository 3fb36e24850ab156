"""The model's command-line options, shared by every tool that describes a model.

``plexus-train`` and ``plexus-model`` take the same model options with the same defaults (those
of `plexus_partition.model.model.ModelConfig`, Kipf & Welling's GCN), so a grid ranked by
``plexus-model`` is the one ``plexus-train`` would run with the same flags. The engine's own
options (``--dtype``, ``--recompute``, ``--comm-dtype``, ``--sparse-comm``) are the engine's,
`plexus.engine.flags`. `model_config` is the one place that turns them into a `ModelConfig`;
its errors name the flag. Plain argparse: `plexus.core` imports nothing of the project beyond
itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass

from .cli import UsageError
from .model import ACTIVATIONS, KIND_OPTIONS, MAX_LAYERS, ModelConfig, ModelError, OrderError
from .ops import KINDS, NORMS

_DEFAULT = ModelConfig()
DEFAULT_LAYERS = _DEFAULT.num_layers
DEFAULT_HIDDEN = _DEFAULT.hidden
DEFAULT_DROPOUT = _DEFAULT.dropout
DEFAULT_BIAS = _DEFAULT.bias
DEFAULT_ORDER = _DEFAULT.order
DEFAULT_KIND = _DEFAULT.kind

# ModelConfig field -> its flag (the rest are the field's name with dashes)
_FLAGS = {"num_layers": "--layers", "kind": "--model"}


def flag(field: str) -> str:
    """The command-line flag of a `ModelConfig` field."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


@dataclass(frozen=True)
class ModelOptionsText:
    """What differs between the tools: extra ``--order`` values, and a note on the defaults
    that another source may override (``plexus-train --shards``: the store's)."""

    extra_orders: str = ""  # e.g. ", best (the model's choice per grid)"
    store_note: str = ""  # e.g. ", or the store's with --shards"


def add_model_options(parser: argparse.ArgumentParser,
                      text: ModelOptionsText = ModelOptionsText()) -> argparse._ArgumentGroup:
    """Add every model option in a "model" group: ``--model --layers --hidden --dropout
    --bias/--no-bias --order --learnable-features --norm --input-dropout --activation``, then
    each kind's
    options, made from its declaration (`add_kind_options`). ``--layers`` and
    ``--order`` default to None (the caller resolves them with `resolve_layers`/`resolve_order`,
    so another source can fill them first). Returns the group."""
    g = parser.add_argument_group("model")
    kinds = "; ".join(f"{k.name} ({k.description})" for k in KINDS.values())
    g.add_argument("--model", choices=tuple(KINDS), default=_DEFAULT.kind,
                   help=f"the layer kind (default {_DEFAULT.kind}): {kinds}")
    g.add_argument("--layers", type=int, default=None, metavar="L",
                   help=f"GNN layers (default {DEFAULT_LAYERS}{text.store_note})")
    g.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, metavar="H",
                   help=f"hidden width (default {DEFAULT_HIDDEN}; GAT: per head)")
    g.add_argument("--dropout", type=float, default=DEFAULT_DROPOUT, metavar="P",
                   help=f"dropout on each layer's input (default {DEFAULT_DROPOUT})")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=DEFAULT_BIAS,
                   help="bias on every layer (default on)")
    g.add_argument("--order", default=None, metavar="auto|agg|combine|LIST",
                   help="product order per layer: auto (combine on narrowing layers), agg "
                        "((Â·H)·W, the paper's), combine (Â·(H·W))"
                        f"{text.extra_orders}, or a comma-separated list, one per layer "
                        f"(default {DEFAULT_ORDER}{text.store_note}); GAT layers always "
                        "combine first")
    g.add_argument("--learnable-features", action="store_true",
                   help="train the input features too")
    g.add_argument("--norm", choices=NORMS, default=_DEFAULT.norm,
                   help="batch: BatchNorm after every layer but the last (statistics over "
                        "all nodes; that layer then has no bias); default none")
    g.add_argument("--input-dropout", action=argparse.BooleanOptionalAction,
                   default=_DEFAULT.input_dropout,
                   help="dropout on the input features too, not only on hidden layers "
                        "(default on, as Kipf & Welling; OGB's examples: off)")
    g.add_argument("--activation", choices=ACTIVATIONS, default=_DEFAULT.activation,
                   help=f"after every layer but the last, and inside GIN's MLP, as PyG's act= "
                        f"(default {_DEFAULT.activation}; leaky_relu: slope 0.01; none: the "
                        "identity); an export rebuilds it")
    add_kind_options(g)
    return g


def kind_options() -> list[dataclasses.Field]:
    """Every kind's option fields (`plexus_partition.model.ops.base.option`), in the kinds'
    order."""
    return list(KIND_OPTIONS.values())


def add_kind_options(group: argparse._ArgumentGroup) -> None:
    """A flag per kind option, from its declaration: ``--name`` (dashes), its type, default,
    metavar and help (``{default}`` filled in); a bool is ``--x`` (on) or, ``negatable``,
    ``--x/--no-x``."""
    for f in kind_options():
        meta = f.metadata
        help_text = meta["help"].format(default=f.default)
        if f.type in (bool, "bool"):
            action = argparse.BooleanOptionalAction if meta["negatable"] else "store_true"
            group.add_argument(flag(f.name), action=action, default=f.default, help=help_text)
        else:
            group.add_argument(flag(f.name), type=type(f.default), default=f.default,
                               metavar=meta["metavar"], help=help_text)


def check_model_options(args: argparse.Namespace) -> None:
    """Range checks of the model options; raises `UsageError` naming the flag."""
    if args.layers is not None and not 1 <= args.layers <= MAX_LAYERS:
        raise UsageError(f"--layers must be in [1, {MAX_LAYERS}], got {args.layers}")
    if args.hidden < 1:
        raise UsageError(f"--hidden must be >= 1, got {args.hidden}")
    checks = [("dropout", "rate")] + [(f.name, f.metadata["check"]) for f in kind_options()]
    for name, check in checks:
        value = getattr(args, name, None)
        if value is None:
            continue
        if check == "rate" and not 0.0 <= value < 1.0:
            raise UsageError(f"{flag(name)} must be in [0, 1), got {value}")
        if check == "finite" and not math.isfinite(value):
            raise UsageError(f"{flag(name)} must be a finite number, got {value}")
        if check == "count" and value < 1:
            raise UsageError(f"{flag(name)} must be >= 1, got {value}")


def resolve_layers(value: int | None) -> int:
    """``--layers`` with its default filled in."""
    return DEFAULT_LAYERS if value is None else value


def resolve_order(value: str | None) -> str:
    """``--order`` with its default filled in."""
    return DEFAULT_ORDER if value is None else value


def model_config(args: argparse.Namespace, **overrides: object) -> ModelConfig:
    """The `ModelConfig` of the parsed model options (``--layers``/``--order`` resolved;
    ``overrides``: fields another source fixes, e.g. a recipe's or a store's); `UsageError`
    naming the flag for a value the model refuses (e.g. ``--heads`` without ``--model gat``)."""
    fields = [f for f in dataclasses.fields(ModelConfig) if f.name != "options"]
    values = {f.name: getattr(args, flag(f.name)[2:].replace("-", "_"), f.default)
              for f in [*fields, *KIND_OPTIONS.values()]}
    values["num_layers"] = resolve_layers(args.layers)
    values["order"] = resolve_order(args.order)
    values.update(overrides)
    try:
        return ModelConfig(**values)
    except OrderError as e:  # the one check of --order against the layers (`parse_order`)
        raise UsageError(f"--order: {e}") from None
    except ModelError as e:
        text = str(e)
        for name in values:  # say the flag, not the field
            text = text.replace(f"{name} is an option", f"{flag(name)} is an option")
        raise UsageError(text) from None


def describe_model(model: ModelConfig) -> str:
    """One line naming the model, e.g. ``gcn, 2 layers, hidden 16, order auto, bias``."""
    parts = [model.kind, f"{model.num_layers} layer{'s' if model.num_layers != 1 else ''}",
             f"hidden {model.hidden}"]
    summary = model.kind_decl.summary(model)
    if summary:
        parts.append(summary)
    parts += [f"order {model.order}", "bias" if model.bias else "no bias"]
    if model.norm != "none":
        parts.append(f"norm {model.norm}")
    if model.activation != _DEFAULT.activation:
        parts.append(f"activation {model.activation}")
    if model.learnable_features:
        parts.append("learnable features")
    return ", ".join(parts)
