"""What a new user meets first: consistent tools, help texts, refusals, requeue-friendly runs,
logs people read (issue 17)."""

from __future__ import annotations

import argparse

import pytest

from plexus.core import modelopts
from plexus.engine.config import ModelConfig
from plexus.partitioners import cli as partition_cli
from plexus.perfmodel.cli import model_main
from plexus.train.cli import build_parser as train_parser


def _model_actions(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    """The model group's options: dest -> (flags, default)."""
    group = next(g for g in parser._action_groups if g.title == "model")
    return {a.dest: (tuple(a.option_strings), a.default) for a in group._group_actions}


# ---- one set of model options ------------------------------------------------------------
def test_plexus_model_and_plexus_train_share_model_options_and_defaults():
    from plexus.perfmodel.cli import _model_parser

    train, model = _model_actions(train_parser()), _model_actions(_model_parser())
    assert train == model
    assert set(train) == {"layers", "hidden", "dropout", "bias", "order", "learnable_features"}
    # the defaults are the engine's ModelConfig defaults
    ref = ModelConfig()
    args = train_parser().parse_args(["--grid", "1x1x1"])
    assert modelopts.resolve_layers(args.layers) == ref.num_layers
    assert modelopts.resolve_order(args.order) == ref.order
    assert (args.hidden, args.dropout, args.bias, args.learnable_features) == (
        ref.hidden, ref.dropout, ref.bias, ref.learnable_features)


def test_plexus_model_says_which_model_it_used(capsys):
    assert model_main(["-G", "2", "--dataset", "cora", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "layers=2 hidden=16 order=agg bias=yes" in out
    assert "model: 2 layers, hidden 16, order agg, bias" in out
    assert model_main(["-G", "2", "--dataset", "cora", "--top", "1", "--layers", "3",
                       "--hidden", "128", "--no-bias", "--learnable-features"]) == 0
    assert ("model: 3 layers, hidden 128, order agg, no bias, learnable features"
            in capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--layers", "0"], "--layers must be >= 1, got 0"),
    (["--hidden", "0"], "--hidden must be >= 1, got 0"),
    (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
])
def test_model_option_errors_are_the_same_in_both_tools(argv, message, capsys):
    from plexus.train import main as train_main

    assert model_main(["-G", "2", "--dataset", "cora", *argv]) == 2
    assert capsys.readouterr().err == f"plexus-model: error: {message}\n"
    assert train_main(["--grid", "1x1x1", *argv]) == 2
    assert capsys.readouterr().err == f"plexus-train: error: {message}\n"


# ---- plexus-partition ----------------------------------------------------------------------
def test_partition_root_help_does_not_promise_downloads(capsys):
    with pytest.raises(SystemExit):
        partition_cli.build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--root ROOT directory holding the dataset's files (nothing is ever downloaded)" in text
    assert "download" not in text.replace("nothing is ever downloaded", "")
    assert "--force replace the shard store already at --out" in text


def test_partition_refuses_to_replace_a_store_without_force(tmp_path, capsys):
    out = tmp_path / "store"
    argv = ["--dataset", "cora", "--grid", "1x1x2", "--layers", "2", "--out", str(out)]
    assert partition_cli.main(argv) == 0
    capsys.readouterr()
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert partition_cli.main([*argv[:-4], "--layers", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"plexus-partition: error: --out {out}: a shard store is already there; "
                   "add --force to replace it, or choose another directory\n")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched
    assert partition_cli.main([*argv[:-4], "--layers", "3", "--out", str(out), "--force"]) == 0
    from plexus.partitioners import read_manifest

    assert read_manifest(out)["num_layers"] == 3
