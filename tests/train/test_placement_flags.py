"""``--gpus-per-node`` and ``--collectives``: checked like every numeric and choice flag (one
line, exit status 2), carried into the engine's configuration, and the launcher's nodes taken
where no placement is given (`plexus.api.model.placed`)."""

from __future__ import annotations

import pytest

from plexus.api.model import placed
from plexus.engine.config import EngineConfig
from plexus.train import main as train_main
from plexus.train.cli import build_parser, engine_config
from plexus_partition.model.bounds import BoundError


@pytest.mark.parametrize("argv, message", [
    (["--gpus-per-node", "0"], "--gpus-per-node must be >= 1, got 0"),
    (["--gpus-per-node", "4096"], "--gpus-per-node must be at most 1024, got 4096"),
    (["--gpus-per-node", "2.5"], "argument --gpus-per-node: invalid int value: '2.5'"),
    (["--collectives", "ring"], "argument --collectives: invalid choice: 'ring' (choose from "
                                "'auto', 'flat', 'hierarchical')"),
])
def test_bad_placement_flags_are_one_line(argv, message, capsys):
    assert train_main(["--grid", "1x1x1", *argv]) == 2
    assert capsys.readouterr().err == f"plexus-train: error: {message}\n"


def test_flags_reach_the_engine_config():
    args = build_parser().parse_args(["--gpus-per-node", "2", "--collectives", "hierarchical"])
    engine = engine_config(args)
    assert (engine.gpus_per_node, engine.collectives) == (2, "hierarchical")
    default = engine_config(build_parser().parse_args([]))
    assert (default.gpus_per_node, default.collectives) == (None, "auto")


def test_engine_config_checks_them():
    with pytest.raises(BoundError, match="gpus_per_node must be >= 1"):
        EngineConfig(gpus_per_node=0)
    with pytest.raises(ValueError, match="unknown collectives 'ring'"):
        EngineConfig(collectives="ring")


def test_the_launchers_nodes_unless_given(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert placed(None, 8).gpus_per_node is None  # no launcher: one node
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert placed(None, 8).gpus_per_node == 4
    assert placed(EngineConfig(gpus_per_node=2), 8).gpus_per_node == 2  # given: kept
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert placed(None, 8).gpus_per_node is None  # the whole job on one node
