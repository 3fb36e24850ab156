"""``plexus-train``'s options typed once, as they are parsed (`plexus.train.parser`'s parser
calls `typed_options`): the options the command line gave (``explicit``), a ``--recipe``'s
values on the others (checked against the one table of bounds like the command line's),
``--grid`` as a `GridShape` (None: auto), ``--placement`` normalized and the cache's size cap in
bytes (``--cache-max-gb``, else its environment variable). What reads the options afterwards
(`plexus.train.cli.build_plan`, the cache commands, the link task) checks their relations, not
their forms. Bad input is a `UsageError` naming the flag (`RecipeError`, `CacheCapError`: the
recipe's, the cap's)."""

from __future__ import annotations

import argparse

from plexus.api.recipes import get_recipe
from plexus_partition.model.bounds import BoundError, check_options
from plexus_partition.model.cli import UsageError
from plexus_partition.model.grid import GridError, GridShape

from .cacheuse import cap_bytes
from .placing import parse_placement


def typed_options(args: argparse.Namespace, explicit: set[str]) -> argparse.Namespace:
    """``args`` as parsed, typed in place and returned: ``explicit`` kept, the recipe applied
    (``recipe_model``: its model fields no option sets), the grid, placement and cache cap
    parsed."""
    args.explicit = explicit
    args.recipe_model = apply_recipe(args, explicit) if args.recipe else {}
    args.grid = parse_grid(args.grid)
    args.placement = parse_placement(args.placement)
    args.cache_max_bytes = cap_bytes(args.cache_max_gb)
    return args


def apply_recipe(args: argparse.Namespace, explicit: set[str]) -> dict:
    """Set the recipe's values on the options not given explicitly, bounded as the command
    line's; return the model fields no option sets (applied to the `ModelConfig`). Raises
    `RecipeError` (a user error) when the engine lacks a model option the recipe needs."""
    recipe = get_recipe(args.recipe)
    recipe.check()
    values = {**recipe.model, **recipe.train, "symmetrize": recipe.symmetrize}
    if not args.shards:  # a store fixes its dataset
        values["dataset"] = recipe.dataset
    rest = recipe.set_options(values, args, explicit)
    try:
        check_options(vars(args))  # the parser checked the command line's values, not these
    except BoundError as e:
        raise UsageError(f"--recipe {args.recipe}: {e}") from None
    return rest


def parse_grid(text: GridShape | str | None) -> GridShape | None:
    """``--grid``'s value: a `GridShape`, or None for auto (also no --grid: a store's grid, or
    the performance model's choice)."""
    if text is None or isinstance(text, GridShape):
        return text
    if text.strip().lower() == "auto":
        return None
    try:
        return GridShape.parse(text)
    except GridError as e:
        raise UsageError(f"--grid: {e}; or 'auto' with --world-size") from None
