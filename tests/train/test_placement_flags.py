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
    (["--placement", "2x2"], "--placement '2x2': give auto, launcher, or a node's block of the "
                             "grid as XxYxZ (ranks of x, y and z on one node, e.g. 1x2x2)"),
    (["--placement", "0x1x1"], "--placement '0x1x1': give auto, launcher, or a node's block "
                               "of the grid as XxYxZ (ranks of x, y and z on one node, e.g. "
                               "1x2x2)"),
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
    flat = read_log(log)
    summary = flat[1]
    assert summary["comm_bytes_per_link"] == {"intra": summary["comm_bytes"]["z"],
                                              "inter": summary["comm_bytes"]["x"]}
    assert summary["gpus_per_node"] == 2 and summary["hierarchical_axes"] == []
    # each node holding the two x ranks of one z instead (--placement 2x1x1): x's bytes stay
    # inside the nodes, z's cross them, and the run is the launcher-numbered one bit for bit
    # (the same groups in the same coordinate order, each grid rank on another process)
    log = tmp_path / "placed.json"
    proc = train(*tiny, "--grid", "2x1x2", "--placement", "2x1x1", "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    assert "ranks on nodes of 2 (--gpus-per-node, each a 2x1x1 block of the grid " \
           "(--placement 2x1x1)), --collectives auto: x inside a node, z across nodes" \
           in proc.stdout
    placed_log = read_log(log)
    links = placed_log[1]["comm_bytes_per_link"]
    assert links == {"intra": summary["comm_bytes"]["x"], "inter": summary["comm_bytes"]["z"]}
    assert [e["loss"] for e in placed_log[0]] == [e["loss"] for e in flat[0]]
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


def test_a_block_is_checked_against_the_nodes_and_the_grid():
    from plexus.train.placing import parse_placement, placed_engine
    from plexus_partition.model.cli import UsageError
    from plexus_partition.model.grid import GridShape

    assert parse_placement(" 1X2x02 ") == "1x2x2" and parse_placement("Auto") == "auto"
    grid, engine = GridShape.of("2x2x2"), EngineConfig(gpus_per_node=4)
    placed = placed_engine("2x1x2", engine, grid, None, None)
    assert (placed.gpus_per_node, placed.node_block) == (4, (2, 1, 2))
    # the launcher's own block (z, then y) is no placement at all
    assert placed_engine("1x2x2", engine, grid, None, None).node_block is None
    assert placed_engine("launcher", engine, grid, None, None) is engine
    with pytest.raises(UsageError, match="cannot hold that block of grid 2x2x2"):
        placed_engine("4x1x1", engine, grid, None, None)
    with pytest.raises(UsageError, match="needs ranks on several nodes"):
        placed_engine("2x1x1", EngineConfig(), grid, None, None)
    # under a launcher of 4 ranks a host, its nodes are the placement's
    assert placed_engine("2x1x2", EngineConfig(), grid, 4, None).node_block == (2, 1, 2)
    # auto with no link rates: nothing to price, the launcher's numbering
    assert placed_engine("auto", engine, grid, None, None) is engine


def test_auto_takes_the_block_the_model_prices_fastest():
    """With a network 100x slower than the node, "auto" keeps inside the node the axis that
    carries the most. A one-layer GCN (aggregating first, no sparse exchange) on 2x1x2 with
    fixed (kept) features: x carries the
    aggregation's AR(AGG) of N·F/|z| = 3.2M elements, z only AG(W) and RS(dW) of F·C/|x| = 256
    (worked out from the table of collectives): the block 2x1x1, not the launcher's 1x1x2."""
    from plexus.perfmodel import Calibration
    from plexus.perfmodel.spec import ModelSpec
    from plexus.train.placing import placed_engine
    from plexus_partition.model.grid import GridShape
    from plexus_partition.model.model import ModelConfig

    cal = Calibration.from_dict({"spmm_flops": 1e12, "gemm_flops": 1e13, "device": "cuda",
                                 "gpus_per_node": 2, "links": {
                                     "intra": {"alpha": 1e-9, "beta": 1e-12},
                                     "inter": {"alpha": 1e-9, "beta": 1e-10}}})
    spec = ModelSpec(100_000, 1_000_000, 64, 8, ModelConfig(1, 64, order="agg"),
                     sparse_comm="off")
    engine = EngineConfig(gpus_per_node=2)
    placed = placed_engine("auto", engine, GridShape.of("2x1x2"), None, cal, lambda: spec)
    assert placed.node_block == (2, 1, 1)
    # two layers: layer 1's sums over z (AR(AGG), AR(dAGG): 2·N·F/|x|) outweigh x's
    # (N·F/|z| + AR(OUT)'s N·C/|z|): the launcher's numbering stays
    spec2 = ModelSpec(100_000, 1_000_000, 64, 8, ModelConfig(2, 64, order="agg"),
                      sparse_comm="off")
    assert placed_engine("auto", engine, GridShape.of("2x1x2"), None, cal,
                         lambda: spec2) is engine
