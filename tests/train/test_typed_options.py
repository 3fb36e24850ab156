"""plexus-train's options come typed from its parser (`plexus.train.options`), a recipe's
values bounded like the command line's, and each form checked once: the grid, the placement,
the cache's cap, the order (by `ModelConfig`) and a store's grid against the model (where the
run is resolved)."""

from __future__ import annotations

import argparse

import pytest

from plexus.api.recipes import RECIPES, Recipe
from cli_helpers import launched
from plexus.train.errors import UsageError
from plexus.train.parser import build_parser
from plexus_partition import cli as partition_cli
from plexus_partition.model.grid import GridShape


def test_the_parser_hands_typed_values(monkeypatch):
    monkeypatch.setenv("PLEXUS_CACHE_MAX_GB", "3")
    args = build_parser().parse_args(["--grid", "2x1x2", "--placement", " 1X2x02 ",
                                      "--cache-max-gb", "0.5"])
    assert args.grid == GridShape(2, 1, 2)
    assert args.placement == "1x2x2"
    assert args.cache_max_bytes == 2**29  # the flag's 0.5 GiB, not the environment's 3
    assert args.explicit == {"grid", "placement", "cache_max_gb"}
    auto = build_parser().parse_args(["--grid", " Auto "])
    assert auto.grid is None and auto.placement == "auto"
    assert auto.cache_max_bytes == 3 * 2**30  # no flag: the environment's cap


@pytest.mark.parametrize("argv, needle", [
    (["--grid", "2x0x2"], "--grid: bad grid '2x0x2'"),
    (["--placement", "2x2"], "--placement '2x2'"),
])
def test_a_bad_form_is_refused_as_the_options_are_parsed(argv, needle):
    with pytest.raises(UsageError, match=needle):
        build_parser().parse_args(argv)


def test_a_recipes_values_are_bounded_like_the_command_lines(monkeypatch):
    monkeypatch.setitem(RECIPES, "test-steep", Recipe(
        "test-steep", "cora", "a test", train={"lr": 5e3}))  # MAX_LR is 1e3
    with pytest.raises(UsageError, match=r"--recipe test-steep: --lr must be"):
        build_parser().parse_args(["--recipe", "test-steep"])
    # the same value given on the command line over the recipe's is the user's choice, checked
    args = build_parser().parse_args(["--recipe", "test-steep", "--lr", "0.5"])
    assert args.lr == 0.5


def test_a_recipe_fills_what_the_command_line_left_in_both_tools(monkeypatch, tmp_path):
    """The one rule both plexus-train and plexus-model apply: a recipe's field goes onto its
    option (num_layers onto --layers, kind onto --model) unless the command line gave it; a
    field no option holds is left for the model; a store fixes its dataset."""
    from plexus.perfmodel.cli import _apply_recipe

    monkeypatch.setitem(RECIPES, "test-mix", Recipe(
        "test-mix", "pubmed", "a test", model={"kind": "sage", "num_layers": 4, "hidden": 48},
        train={"epochs": 7}))
    args = build_parser().parse_args(["--recipe", "test-mix", "--layers", "2"])
    assert (args.model, args.layers, args.hidden, args.epochs, args.dataset) == (
        "sage", 2, 48, 7, "pubmed")
    assert args.recipe_model == {}  # plexus-train has an option for every model field
    store = build_parser().parse_args(["--recipe", "test-mix", "--shards", str(tmp_path)])
    assert store.dataset is None and store.layers == 4
    # a tool without a --hidden: the field is left for its model
    model_args = argparse.Namespace(recipe="test-mix", dataset=None, nodes=None, layers=3,
                                    model="gcn")
    rest, symmetrize = _apply_recipe(model_args, {"model"}, RECIPES.__getitem__)
    assert (model_args.model, model_args.layers, model_args.dataset) == ("gcn", 4, "pubmed")
    assert rest == {"hidden": 48} and symmetrize is False


@pytest.mark.parametrize("argv, message", [
    (["--order", "sideways"], "--order: unknown order 'sideways'"),
    (["--layers", "3", "--order", "agg,combine"],
     "--order: the order lists 2 layers but the model has 3"),
])
def test_the_order_is_checked_once_and_named_by_its_flag(argv, message):
    with pytest.raises(UsageError) as e:
        launched(build_parser().parse_args(["--grid", "1x1x1", "--quiet", *argv]))
    assert str(e.value).startswith(message)


def test_a_stores_grid_is_checked_against_the_model_where_the_run_is_resolved(tmp_path):
    out = tmp_path / "store"
    assert partition_cli.main(["--dataset", "cora", "--grid", "2x2x2", "--layers", "2",
                               "--orders", "agg", "--out", str(out)]) == 0
    fits = launched(build_parser().parse_args(["--shards", str(out), "--order", "agg",
                                               "--quiet"]))
    assert fits.grid == GridShape(2, 2, 2)
    # one hidden feature cannot be cut over an axis of 2 ranks (every axis of 2x2x2 has 2)
    with pytest.raises(UsageError, match=r"has 2 ranks but cuts the 1 hidden features"):
        launched(build_parser().parse_args(["--shards", str(out), "--order", "agg",
                                            "--hidden", "1", "--quiet"]))
