"""plexus-train --shards against what a store records (issue 48 item 5, issue 47 item 2): the kind
recorded is taken when --model is not given and a different one refused; a store whose stage
count disagrees with --layers is refused in one line naming the fix when --layers is given, and
its layers are used and said when it is not (a store cut by main at 16bafc1 with `--aggregation
sum --layers 2` once trained a 1-layer GIN without a word)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import assert_one_line
from plexus_partition.model.grid import GridShape
from plexus_datasets import load_dataset
from plexus_partition import write_store
from plexus.train.cli import main
from cli_helpers import launched
from plexus.train.parser import build_parser

DATA = Path(__file__).parents[1] / "partitioners" / "data"
OLD_SUM = DATA / "main-16bafc1-sum-2stages"  # 2 stages (combine, dense) of sum's Â, no kind
SPEC = "rmat:scale=6,edge_factor=4,features=8,classes=3"


def _plan(*argv: str):
    return launched(build_parser().parse_args(list(argv)))


@pytest.fixture()
def old_sum(tmp_path):
    return shutil.copytree(OLD_SUM, tmp_path / "old")


def test_a_store_of_fewer_stages_than_the_default_layers_is_used_and_said(old_sum, capsys):
    plan = _plan("--shards", str(old_sum), "--model", "gin")
    assert (plan.model.kind, plan.model.num_layers) == ("gin", 1)
    out = capsys.readouterr().out
    assert_one_line(out, "was cut for 1 gin layer (2 stages): training 1 layer",
                    "--layers defaults to 2")
    assert out.startswith("plexus-train: ")
    _plan("--shards", str(old_sum), "--model", "gin", "--quiet")
    assert capsys.readouterr().out == ""


def test_a_store_whose_layers_disagree_with_the_given_ones_is_refused(old_sum, capsys):
    assert main(["--shards", str(old_sum), "--model", "gin", "--layers", "2"]) == 2
    assert_one_line(capsys.readouterr().err, "--layers 2 but", "1 gin layer (2 stages)",
                    "plexus-partition --model gin --layers 2")


def test_stages_of_another_kind_are_refused_naming_the_partition_to_run(old_sum, capsys):
    # GraphConv aggregates with sum's Â too, but these are GIN's stages (agg, dense)
    assert main(["--shards", str(old_sum), "--model", "graphconv"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "combine,dense", "not --model graphconv layers",
                    "plexus-partition --model graphconv")
    assert "unknown order" not in err


def test_the_recorded_kind_is_taken_and_said(tmp_path, capsys):
    store = tmp_path / "s"
    write_store(load_dataset(SPEC), store, GridShape.parse("2x1x1"), 2, "agg", model="graphconv")
    plan = _plan("--shards", str(store))
    assert (plan.model.kind, plan.model.num_layers) == ("graphconv", 2)
    assert_one_line(capsys.readouterr().out, "plexus-train: ", "was cut for the graphconv model",
                    "training --model graphconv")
    assert _plan("--shards", str(store), "--model", "graphconv").model.kind == "graphconv"
    assert capsys.readouterr().out == ""  # asked for: nothing to say
