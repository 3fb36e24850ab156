"""The GCN's command-line options, shared by every tool that describes a model.

``plexus-train`` and ``plexus-model`` take the same model options with the same defaults (Kipf &
Welling's GCN), so a grid ranked by ``plexus-model`` is the one ``plexus-train`` would run with
the same flags. The defaults equal `plexus.engine.config.ModelConfig`'s (a test checks it); this
module stays plain argparse because `plexus.core` imports nothing of the project.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from .cli import UsageError

DEFAULT_LAYERS = 2
DEFAULT_HIDDEN = 16
DEFAULT_DROPOUT = 0.5
DEFAULT_BIAS = True
DEFAULT_ORDER = "agg"


@dataclass(frozen=True)
class ModelOptionsText:
    """What differs between the tools: extra ``--order`` values, and a note on the defaults
    that another source may override (``plexus-train --shards``: the store's)."""

    extra_orders: str = ""  # e.g. ", best (the model's choice per grid)"
    store_note: str = ""  # e.g. ", or the store's with --shards"


def add_model_options(parser: argparse.ArgumentParser,
                      text: ModelOptionsText = ModelOptionsText()) -> argparse._ArgumentGroup:
    """Add ``--layers --hidden --dropout --bias/--no-bias --order --learnable-features`` in a
    "model" group. ``--layers`` and ``--order`` default to None (the caller resolves them with
    `resolve_layers`/`resolve_order`, so another source can fill them first). Returns the group
    (plexus-train adds the model kind and its options to it)."""
    g = parser.add_argument_group("model")
    g.add_argument("--layers", type=int, default=None, metavar="L",
                   help=f"GNN layers (default {DEFAULT_LAYERS}{text.store_note})")
    g.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, metavar="H",
                   help=f"hidden width (default {DEFAULT_HIDDEN})")
    g.add_argument("--dropout", type=float, default=DEFAULT_DROPOUT, metavar="P",
                   help=f"dropout on each layer's input (default {DEFAULT_DROPOUT})")
    g.add_argument("--bias", action=argparse.BooleanOptionalAction, default=DEFAULT_BIAS,
                   help="bias on every layer (default on)")
    g.add_argument("--order", default=None, metavar="agg|combine|auto|LIST",
                   help="product order per layer: agg ((Â·H)·W, the paper's), combine "
                        f"(Â·(H·W)), auto (combine on narrowing layers){text.extra_orders}, or "
                        "a comma-separated list, one per layer (default "
                        f"{DEFAULT_ORDER}{text.store_note})")
    g.add_argument("--learnable-features", action="store_true",
                   help="train the input features too")
    return g


def check_model_options(args: argparse.Namespace) -> None:
    """Range checks of the model options; raises `UsageError` naming the flag."""
    if args.layers is not None and args.layers < 1:
        raise UsageError(f"--layers must be >= 1, got {args.layers}")
    if args.hidden < 1:
        raise UsageError(f"--hidden must be >= 1, got {args.hidden}")
    if not 0.0 <= args.dropout < 1.0:
        raise UsageError(f"--dropout must be in [0, 1), got {args.dropout}")


def resolve_layers(value: int | None) -> int:
    """``--layers`` with its default filled in."""
    return DEFAULT_LAYERS if value is None else value


def resolve_order(value: str | None) -> str:
    """``--order`` with its default filled in."""
    return DEFAULT_ORDER if value is None else value


def describe_model(layers: int, hidden: int, order: str, bias: bool,
                   learnable_features: bool) -> str:
    """One line naming the model, e.g. ``2 layers, hidden 16, order agg, bias``."""
    parts = [f"{layers} layer{'s' if layers != 1 else ''}", f"hidden {hidden}", f"order {order}",
             "bias" if bias else "no bias"]
    if learnable_features:
        parts.append("learnable features")
    return ", ".join(parts)
