"""A store records the model kind and GNN layers it is cut for (issue 47, item 2): written by
`write_store`/plexus-partition, read back, refused when inconsistent; stores written before kinds
were recorded (committed fixtures cut by main at 16bafc1) still load, shard for shard equal to the
in-memory partitioner's cut of the same graph."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import assert_one_line
from plexus_partition.model.grid import GridShape
from plexus_datasets import load_dataset
from plexus_partition import (ShardStoreError, read_manifest, read_shard, shard_graph,
                                 store_model, write_store)
from plexus_partition import cli
from test_partitioners import skewed_graph
from test_shard_store import assert_same_shard

DATA = Path(__file__).parent / "data"
# cut by `plexus-partition --dataset SPEC --grid 2x1x1 --layers 2 [--aggregation sum |
# --orders agg]` with main's code at 16bafc1 (the manifests record "gnn_layers": 1 for the
# sum store: the guess of GIN's kind that GraphConv broke)
OLD_SPEC = "rmat:scale=6,edge_factor=4,features=8,classes=3"
OLD_SUM = DATA / "main-16bafc1-sum-2stages"
OLD_GCN = DATA / "main-16bafc1-gcn-2layers"


@pytest.fixture(scope="module")
def graph():
    return skewed_graph(scale=6, edge_factor=4, drop=3)


@pytest.mark.parametrize("model, stages, layers", [("graphconv", 2, 2), ("gin", 4, 2),
                                                   ("gcn", 3, 3), ("sage", 1, 1)])
def test_the_store_records_the_kind_and_its_gnn_layers(graph, tmp_path, model, stages, layers):
    m = write_store(graph, tmp_path / "s", GridShape.parse("1x1x1"), stages, "agg",
                    model=model)
    agg = {"graphconv": "sum", "gin": "sum", "gcn": "gcn", "sage": "mean"}[model]
    on_disk = read_manifest(tmp_path / "s")
    for manifest in (m, on_disk):
        assert (manifest["model"], manifest["gnn_layers"], manifest["num_stages"],
                manifest["aggregation"]) == (model, layers, stages, agg)
    assert store_model(on_disk) == model


def test_a_kind_is_refused_with_stages_or_an_aggregation_not_its_own(graph, tmp_path):
    with pytest.raises(ShardStoreError, match="3 stages make no whole gin layers") as e:
        write_store(graph, tmp_path / "odd", GridShape.parse("1x1x1"), 3, "agg", model="gin")
    assert_one_line(e)
    with pytest.raises(ShardStoreError, match="aggregates with sum's Â, not mean's"):
        write_store(graph, tmp_path / "agg", GridShape.parse("1x1x1"), 2, "agg",
                    model="graphconv", aggregation="mean")
    assert not (tmp_path / "odd").exists() and not (tmp_path / "agg").exists()


def test_a_damaged_kind_in_the_manifest_is_refused(graph, tmp_path):
    out = tmp_path / "s"
    write_store(graph, out, GridShape.parse("1x1x1"), 4, "agg", model="gin")
    text = (out / "manifest.json").read_text()
    for key, value in [("model", "graphconv"), ("model", "nope"), ("gnn_layers", 4),
                       ("gnn_layers", None)]:
        m = json.loads(text)
        m[key] = value
        (out / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(ShardStoreError, match="the manifest is damaged") as e:
            read_manifest(out)
        assert_one_line(e)


@pytest.mark.parametrize("old, aggregation, orders", [(OLD_SUM, "sum", ["combine", "dense"]),
                                                      (OLD_GCN, "gcn", ["agg", "agg"])])
def test_stores_written_by_main_before_kinds_were_recorded_still_load(tmp_path, old,
                                                                      aggregation, orders):
    store = shutil.copytree(old, tmp_path / "old")
    m = read_manifest(store)
    # no kind recorded, and the guessed GNN layer count is not believed
    assert store_model(m) is None and "gnn_layers" not in m
    assert (m["num_stages"], m["orders"], m["aggregation"]) == (2, orders, aggregation)
    graph = load_dataset(OLD_SPEC)
    shape = GridShape.parse("2x1x1")
    for rank in range(2):  # oracle: the in-memory partitioner on the graph itself
        want = shard_graph(graph, shape, shape.coords(rank), 2, orders, "double", 0,
                           adj_hat=graph.normalized(aggregation), aggregation=aggregation)
        assert_same_shard(read_shard(store, rank), want)


def test_partition_cli_records_the_kind_and_counts_gnn_layers(tmp_path, capsys):
    out = tmp_path / "s"
    assert cli.main(["--dataset", OLD_SPEC, "--grid", "1x1x1", "--model", "gin", "--layers",
                     "2", "--orders", "agg", "--out", str(out)]) == 0
    m = read_manifest(out)
    assert (m["model"], m["gnn_layers"], m["num_stages"]) == ("gin", 2, 4)
    assert m["orders"] == ["agg", "dense", "agg", "dense"]  # the order per layer, as plexus-train
    assert "2 gin layers (4 stages)" in capsys.readouterr().out


def test_partition_cli_defaults_are_plexus_trains(tmp_path):
    out = tmp_path / "s"
    assert cli.main(["--dataset", OLD_SPEC, "--grid", "1x1x1", "--out", str(out)]) == 0
    m = read_manifest(out)
    assert (m["model"], m["gnn_layers"]) == ("gcn", 2)


@pytest.mark.parametrize("aggregation, fix", [("sum", "--model gin or --model graphconv"),
                                              ("mean", "--model sage")])
def test_the_old_aggregation_flag_is_refused_with_the_kinds_to_give(tmp_path, capsys,
                                                                    aggregation, fix):
    out = tmp_path / "s"
    assert cli.main(["--dataset", OLD_SPEC, "--grid", "1x1x1", "--layers", "2",
                     "--aggregation", aggregation, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--aggregation is replaced by --model", fix, "GNN layers")
    assert not out.exists()


def test_partition_cli_orders_one_per_stage_or_per_layer(tmp_path):
    per_stage = tmp_path / "stage"
    assert cli.main(["--dataset", OLD_SPEC, "--grid", "1x1x1", "--model", "gin", "--layers",
                     "2", "--orders", "agg,dense,combine,dense", "--out", str(per_stage)]) == 0
    assert read_manifest(per_stage)["orders"] == ["agg", "dense", "combine", "dense"]
    per_layer = tmp_path / "layer"
    assert cli.main(["--dataset", OLD_SPEC, "--grid", "1x1x1", "--model", "gin", "--layers",
                     "2", "--orders", "combine,agg", "--out", str(per_layer)]) == 0
    assert read_manifest(per_layer)["orders"] == ["combine", "dense", "agg", "dense"]


def test_partition_cli_scales_features_as_plexus_train_does(tmp_path):
    from plexus_partition.store import graph_hash

    for mode in ("auto", "raw"):
        out = tmp_path / mode
        assert cli.main(["--dataset", "cora", "--grid", "1x1x1", "--features", mode,
                         "--out", str(out)]) == 0
        assert read_manifest(out)["graph_sha256"] == graph_hash(load_dataset("cora",
                                                                             features=mode))
    assert read_manifest(tmp_path / "auto")["graph_sha256"] != \
        read_manifest(tmp_path / "raw")["graph_sha256"]
