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


@pytest.mark.slow
def test_a_run_on_virtual_nodes_counts_bytes_per_link(tmp_path):
    """4 CPU ranks on 2 virtual nodes: flat on 2x1x2, the bytes inside a node are z's and those
    across nodes x's; on 1x1x4 in two levels, z runs so (the first lines and the summary say
    it) and a third of its bytes cross nodes."""
    from cli_helpers import read_log, train

    tiny = ["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3", "--epochs", "2",
            "--threads", "1", "--gpus-per-node", "2"]
    log = tmp_path / "flat.json"
    proc = train(*tiny, "--grid", "2x1x2", "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    assert "ranks on nodes of 2 (--gpus-per-node), --collectives auto: x across nodes, " \
           "z inside a node" in proc.stdout
    summary = read_log(log)[1]
    assert summary["comm_bytes_per_link"] == {"intra": summary["comm_bytes"]["z"],
                                              "inter": summary["comm_bytes"]["x"]}
    assert summary["gpus_per_node"] == 2 and summary["hierarchical_axes"] == []
    log = tmp_path / "two.json"
    proc = train(*tiny, "--grid", "1x1x4", "--collectives", "hierarchical", "--sparse-comm",
                 "off", "--log-json", str(log))  # (an all-to-all stays flat: none here)
    assert proc.returncode == 0, proc.stderr
    assert "--collectives hierarchical: z in two levels" in proc.stdout
    assert "per link class (2 ranks per node): inside a node" in proc.stdout
    summary = read_log(log)[1]
    links, z = summary["comm_bytes_per_link"], summary["comm_bytes"]["z"]
    assert summary["hierarchical_axes"] == ["z"]
    # 2 nodes x 2 ranks: (m-1)/(p-1) = 1/3 of each collective's bytes cross nodes (padding of
    # an all-reduce to a multiple of 2 adds a little, inside and across)
    assert z <= links["intra"] + links["inter"] < 1.01 * z
    assert 0.3 * z < links["inter"] < 0.34 * z
    assert summary["comm_bytes_per_link_max_rank"]["inter"] <= links["inter"]
