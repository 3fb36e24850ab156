"""The on-disk shard store and the plexus-partition CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_one_line
from plexus_datasets.base.owned import SEAL
from plexus_partition.model.grid import GridShape
from plexus_datasets.graph import gcn_normalize
from plexus_partition import (RankShard, ShardStoreError, make_permutation, read_manifest,
                                 read_shard, shard_graph, write_store)
from plexus_partition import cli, rankfile, store, storeread
from test_partitioners import coords_of, shape_of, skewed_graph

ORDERS3 = ["agg", "combine", "agg"]


@pytest.fixture(scope="module")
def graph():
    return skewed_graph(scale=7, edge_factor=4, drop=5)


@pytest.fixture(scope="module")
def adj_hat(graph):
    return gcn_normalize(graph.adj)


@pytest.fixture(scope="module")
def written(tmp_path_factory, graph, adj_hat):
    """A balanced store for grid 2x1x2, 3 layers with mixed orders."""
    out = tmp_path_factory.mktemp("store") / "s"
    write_store(graph, out, shape_of((2, 1, 2)), 3, ORDERS3, "balanced", 5, adj_hat=adj_hat)
    return out


def assert_same_shard(a: RankShard, b: RankShard) -> None:
    for name in ("shape", "coords", "num_stages", "orders", "perm", "seed", "name", "num_nodes",
                 "nodes_padded", "num_features", "features_padded", "num_classes",
                 "mask_counts", "meta"):
        assert getattr(a, name) == getattr(b, name), name
    assert list(a.blocks) == list(b.blocks)
    for key in a.blocks:
        x, y = a.blocks[key], b.blocks[key]
        assert x.shape == y.shape and x.dtype == y.dtype
        for part in ("indptr", "indices", "data"):
            assert getattr(x, part).dtype == getattr(y, part).dtype
            assert np.array_equal(getattr(x, part), getattr(y, part)), (key, part)
    for name in ("features", "output_ids", "labels"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert len(a.input_ids) == len(b.input_ids)
    for x, y in zip(a.input_ids, b.input_ids):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert list(a.masks) == list(b.masks)
    for name in a.masks:
        assert a.masks[name].dtype == b.masks[name].dtype
        assert np.array_equal(a.masks[name], b.masks[name])


@pytest.mark.parametrize("grid,layers,orders,kind", [
    ((2, 1, 2), 2, "agg", "double"),
    ((3, 1, 2), 3, ORDERS3, "balanced"),
    ((2, 2, 2), 3, "agg", "none"),
    ((1, 3, 1), 1, "combine", "single"),
    ((1, 1, 1), 2, "agg", "double"),
])
def test_round_trip_equals_shard_graph(tmp_path, graph, adj_hat, grid, layers, orders, kind):
    shape = shape_of(grid)
    perm = make_permutation(adj_hat, kind, 2, grid[0] * grid[1] * grid[2])
    out = tmp_path / "store"
    # a tiny chunk forces many row chunks per row group
    manifest = write_store(graph, out, shape, layers, orders, perm, 2, adj_hat=adj_hat,
                           chunk_nnz=64)
    assert manifest == read_manifest(out)
    assert len(manifest["ranks"]) == len(coords_of(shape))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [store.MANIFEST, SEAL] + [r["file"] for r in manifest["ranks"]])  # + its seal
    for coords in coords_of(shape):
        want = shard_graph(graph, shape, coords, layers, orders, perm, 2, adj_hat=adj_hat)
        got = read_shard(out, coords, shape=shape, num_stages=layers, orders=orders, perm=kind,
                         seed=2)
        assert_same_shard(want, got)
        # the common form: the rank number alone, the rest from the manifest
        assert_same_shard(got, read_shard(out, GridShape.of(shape).rank(coords)))


def test_manifest_describes_the_store(written, graph):
    m = read_manifest(written)
    assert m["format"] == store.FORMAT and m["version"] == store.VERSION
    assert m["grid"] == {"x": 2, "y": 1, "z": 2} and m["num_stages"] == 3
    assert "model" not in m and "gnn_layers" not in m  # cut without a kind: stages only
    assert m["orders"] == ORDERS3 and m["permutation"]["kind"] == "balanced"
    assert m["seed"] == 5 and m["permutation"]["seed"] == 5
    assert m["num_nodes"] == graph.num_nodes and m["num_classes"] == graph.num_classes
    assert m["num_features"] == graph.num_features and m["dataset"] == graph.name
    assert m["graph_sha256"] == store.graph_hash(graph)
    for entry in m["ranks"]:
        path = written / entry["file"]
        assert entry["size"] == path.stat().st_size
        assert entry["sha256"] == store.file_sha256(path)
        with np.load(path, allow_pickle=False) as npz:  # plain npz, no pickled objects
            assert "header" in npz.files


@pytest.mark.parametrize("change,needle", [
    (dict(shape={"x": 1, "y": 2, "z": 2}), "grid 2x1x2, asked for 1x2x2"),
    (dict(num_stages=2, orders="agg"), "3 stages, asked for 2"),
    (dict(orders="agg"), "orders agg,combine,agg, asked for agg,agg,agg"),
    (dict(perm="double"), "permutation 'balanced', asked for 'double'"),
    (dict(seed=6), "seed 5, asked for 6"),
    (dict(rank={"x": 0, "y": 1, "z": 0}), "outside grid 2x1x2"),
    (dict(rank=4), "rank 4 is outside the store's grid 2x1x2 (ranks 0 to 3)"),
    (dict(rank=-1), "rank -1 is outside the store's grid 2x1x2 (ranks 0 to 3)"),
    (dict(rank=True), "rank must be a rank number or coordinates"),
    (dict(rank=1.0), "rank must be a rank number or coordinates"),
    (dict(orders=["agg", "combine"]), "cannot compare layer orders"),
])
def test_reading_for_another_configuration_fails(written, change, needle):
    args = dict(shape={"x": 2, "y": 1, "z": 2}, rank={"x": 1, "y": 0, "z": 1}, num_stages=3,
                orders=ORDERS3, perm="balanced", seed=5)
    read_shard(written, **args)  # every check passes as given
    args.update(change)
    with pytest.raises(ShardStoreError, match="manifest.json") as err:
        read_shard(written, args.pop("rank"), **args)
    assert_one_line(err, needle)


def test_a_rank_number_alone_reads_its_shard(written):
    """``read_shard(store, rank)``: the coordinates by the grid's rank order (z innermost),
    everything else from the manifest; equal to the explicit, fully checked form."""
    grid = GridShape(2, 1, 2)
    assert [read_shard(written, r).coords for r in range(4)] == [
        {"x": 0, "y": 0, "z": 0}, {"x": 0, "y": 0, "z": 1}, {"x": 1, "y": 0, "z": 0},
        {"x": 1, "y": 0, "z": 1}] == [grid.coords(r) for r in range(4)]
    explicit = read_shard(written, {"x": 1, "y": 0, "z": 0}, shape="2x1x2", num_stages=3,
                          orders=ORDERS3, perm="balanced", seed=5)
    assert_same_shard(read_shard(written, np.int64(2)), explicit)
    assert read_shard(written, 2).orders == tuple(ORDERS3)


def copy_store(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def read_rank0(path: Path) -> RankShard:
    return read_shard(path, 0)


def rank0_file(path: Path) -> Path:
    return path / store.rank_file_name({"x": 0, "y": 0, "z": 0})


def test_truncated_missing_and_extended_files_are_rejected(written, tmp_path):
    bad = copy_store(written, tmp_path / "trunc")
    f = rank0_file(bad)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardStoreError, match=rf"{f.name}: truncated"):
        read_rank0(bad)
    f.write_bytes(data + b"\0")
    with pytest.raises(ShardStoreError, match=rf"{f.name}: wrong size"):
        read_rank0(bad)
    f.unlink()
    with pytest.raises(ShardStoreError, match=rf"{f.name}: shard file missing"):
        read_rank0(bad)
    # other ranks are untouched and still load
    read_shard(bad, 3)


def test_bit_flips_anywhere_are_rejected(written, tmp_path):
    bad = copy_store(written, tmp_path / "flip")
    f = rank0_file(bad)
    data = f.read_bytes()
    rng = np.random.default_rng(0)
    offsets = {0, 1, 30, len(data) // 2, len(data) - 1, len(data) - 22}
    offsets |= set(rng.integers(0, len(data), 10).tolist())
    for offset in sorted(offsets):
        flipped = bytearray(data)
        flipped[offset] ^= 1 << int(rng.integers(0, 8))
        f.write_bytes(bytes(flipped))
        with pytest.raises(ShardStoreError, match=rf"{f.name}: sha256 mismatch"):
            read_rank0(bad)
    f.write_bytes(data)
    read_rank0(bad)


def test_corrupt_manifest_and_non_store_are_rejected(written, tmp_path):
    with pytest.raises(ShardStoreError, match="missing; .* is not a shard store"):
        read_rank0(tmp_path)
    bad = copy_store(written, tmp_path / "man")
    text = (bad / store.MANIFEST).read_text()
    (bad / store.MANIFEST).write_text(text[: len(text) // 2])
    with pytest.raises(ShardStoreError, match="unreadable manifest"):
        read_rank0(bad)
    m = json.loads(text)
    m["ranks"][0]["file"] = "../elsewhere.npz"
    (bad / store.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardStoreError, match="bad file name"):
        read_rank0(bad)
    m = json.loads(text)
    m["version"] = 99
    (bad / store.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardStoreError, match="format version 99"):
        read_rank0(bad)
    for key in ("grid", "num_features", "permutation"):  # a field missing or mistyped
        m = json.loads(text)
        del m[key]
        (bad / store.MANIFEST).write_text(json.dumps(m))
        with pytest.raises(ShardStoreError, match=f"field '{key}' missing"):
            read_rank0(bad)
    m = json.loads(text)
    m["grid"]["y"] = "two"
    (bad / store.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardStoreError, match="bad grid or permutation"):
        read_rank0(bad)


def _rehash(path: Path) -> None:
    """Make the manifest agree with the files as they are now (a forged, consistent store)."""
    m = json.loads((path / store.MANIFEST).read_text())
    for entry in m["ranks"]:
        f = path / entry["file"]
        entry["size"], entry["sha256"] = f.stat().st_size, store.file_sha256(f)
    (path / store.MANIFEST).write_text(json.dumps(m))


def test_swapped_files_with_a_consistent_manifest_are_rejected(written, tmp_path):
    bad = copy_store(written, tmp_path / "swap")
    a, b = rank0_file(bad), bad / store.rank_file_name({"x": 1, "y": 0, "z": 0})
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    _rehash(bad)  # sizes and sha256 now match the swapped files
    with pytest.raises(ShardStoreError, match=r"holds the shard of rank .*'x': 1.*, not of rank"):
        read_rank0(bad)


def test_manifest_fields_of_the_wrong_type_or_nesting_are_rejected(written, tmp_path):
    bad = copy_store(written, tmp_path / "types")
    text = (bad / store.MANIFEST).read_text()
    edits = [("num_stages", True), ("num_stages", -3),
             ("nnz", "12"), ("num_nodes", 1.5), ("orders", ["agg", 7]), ("ranks", [["x"]]), ("ranks", [{"coords": [0, 0, 0]}])]
    for key, value in edits:
        m = json.loads(text)
        m[key] = value
        (bad / store.MANIFEST).write_text(json.dumps(m))
        with pytest.raises(ShardStoreError, match="the manifest is damaged") as e:
            read_rank0(bad)
        assert_one_line(e)
    m = json.loads(text)
    m["ranks"][0]["size"] = str(m["ranks"][0]["size"])
    (bad / store.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardStoreError, match="lacks coords"):
        read_rank0(bad)
    deep = 100_000
    (bad / store.MANIFEST).write_text('{"format": "plexus-shard-store", "version": 1, "x": '
                                       + "[" * deep + "]" * deep + "}")
    with pytest.raises(ShardStoreError, match="unreadable manifest"):
        read_rank0(bad)


def test_blocks_are_checked_by_the_datasets_csr_rule(written, tmp_path, monkeypatch):
    """A block whose indptr decreases, re-hashed so that only the structure check can see it."""
    import zipfile

    bad = copy_store(written, tmp_path / "ptr")
    f = rank0_file(bad)
    with zipfile.ZipFile(f) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    with np.load(f) as z:
        indptr = z["block0.indptr"].copy()
    indptr[1] = indptr[-1] + 5  # out of range and then decreasing
    buf = io.BytesIO()
    np.lib.format.write_array(buf, indptr)
    members["block0.indptr.npy"] = buf.getvalue()
    with zipfile.ZipFile(f, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    _rehash(bad)
    calls = []
    real = storeread.csr_from_parts
    monkeypatch.setattr(storeread, "csr_from_parts", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.raises(ShardStoreError, match="block .* indptr decreases"):
        read_rank0(bad)
    assert calls  # the one rule from plexus_datasets.validate


def test_same_seed_gives_byte_identical_files(tmp_path, graph, adj_hat):
    shape = shape_of((3, 1, 2))
    dirs = [tmp_path / name for name in ("a", "b", "c")]
    for d, seed in zip(dirs, (1, 1, 2)):
        write_store(graph, d, shape, 2, "agg", "double", seed, adj_hat=adj_hat)
    files = sorted(p.name for p in dirs[0].iterdir())
    assert files == sorted(p.name for p in dirs[1].iterdir())
    for name in files:
        assert (dirs[0] / name).read_bytes() == (dirs[1] / name).read_bytes(), name
    assert any((dirs[0] / n).read_bytes() != (dirs[2] / n).read_bytes()
               for n in files if n != store.MANIFEST)


def crash_after_first_rank(monkeypatch):
    real = rankfile.rank_task
    calls = []

    def failing(job, rank, *args, **kwargs):
        if calls:
            raise RuntimeError("simulated crash")
        result = real(job, rank, *args, **kwargs)
        calls.append(Path(job.work) / "store" / result["file"])
        return result

    monkeypatch.setattr(rankfile, "rank_task", failing)
    return calls


def test_a_crash_mid_write_leaves_nothing_that_looks_complete(tmp_path, graph, adj_hat,
                                                              monkeypatch):
    calls = crash_after_first_rank(monkeypatch)
    out = tmp_path / "store"
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_store(graph, out, shape_of((2, 1, 2)), 2, "agg", "double", 0, adj_hat=adj_hat)
    assert calls and calls[0].exists() is False  # the partial rank file was removed with its dir
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_crash_while_replacing_keeps_the_old_store(written, tmp_path, graph, adj_hat,
                                                     monkeypatch):
    out = copy_store(written, tmp_path / "store")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    crash_after_first_rank(monkeypatch)
    with pytest.raises(RuntimeError):
        write_store(graph, out, shape_of((2, 1, 2)), 3, ORDERS3, "double", 9, adj_hat=adj_hat)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    read_rank0(out)


def test_overwriting(tmp_path, graph, adj_hat):
    out = tmp_path / "store"
    write_store(graph, out, shape_of((2, 1, 1)), 1, "agg", "none", 0, adj_hat=adj_hat)
    write_store(graph, out, shape_of((1, 2, 1)), 2, "agg", "double", 3, adj_hat=adj_hat)
    assert read_manifest(out)["grid"] == {"x": 1, "y": 2, "z": 1}
    assert len(list(out.iterdir())) == 4 and sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    # an empty directory is fine; a directory with other things, or a file, is refused
    (tmp_path / "empty").mkdir()
    write_store(graph, tmp_path / "empty", shape_of((1, 1, 1)), 1, "agg", "none", 0,
                adj_hat=adj_hat)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ShardStoreError, match="not a shard store"):
        write_store(graph, other, shape_of((1, 1, 1)), 1, adj_hat=adj_hat)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    with pytest.raises(ShardStoreError, match="not a directory"):
        write_store(graph, other / "notes.txt", shape_of((1, 1, 1)), 1, adj_hat=adj_hat)


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def fake_dataset(monkeypatch, graph):
    """Let the CLI load the test graph for any spec (dataset loading is tested elsewhere)."""
    monkeypatch.setattr(cli, "_load", lambda args: graph)


@pytest.mark.parametrize("argv,needle", [
    (["--grid", "4x4", "--layers", "2", "--out", "X"], "bad grid '4x4'"),
    (["--grid", "0x1x1", "--layers", "2", "--out", "X"], "bad grid"),
    (["--grid", "2x1x1", "--layers", "2", "--perm", "random", "--out", "X"], "invalid choice"),
    (["--grid", "2x1x1", "--layers", "0", "--out", "X"], "--layers must be in [1, 256]"),
    (["--grid", "2x1x1", "--layers", "two", "--out", "X"], "invalid int value"),
    (["--grid", "2x1x1", "--layers", "2", "--orders", "agg,sideways", "--out", "X"],
     "--orders: unknown order 'sideways'"),
    (["--grid", "2x1x1", "--layers", "2"], "--out is required"),
    (["--grid", "2x1x1", "--layers", "2", "--json", "--out", "X"], "--json applies"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, fake_dataset, argv, needle):
    argv = ["--dataset", "cora"] + [str(tmp_path / "X") if a == "X" else a for a in argv]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("plexus-partition: error: ") and needle in captured.err
    assert_one_line(captured.err)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_cli_refuses_a_non_store_out_dir(tmp_path, capsys, fake_dataset):
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    argv = ["--dataset", "cora", "--grid", "2x1x1", "--layers", "2", "--out", str(other)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "not a shard store")
    assert [p.name for p in other.iterdir()] == ["keep.txt"]


def test_cli_unknown_dataset(tmp_path, capsys):
    datasets = pytest.importorskip("plexus_datasets")
    if not hasattr(datasets, "load_dataset"):
        pytest.skip("plexus_datasets.load_dataset not available")
    argv = ["--dataset", "no-such-dataset:x", "--grid", "2x1x1", "--layers", "2",
            "--out", str(tmp_path / "s")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line(err, prog="plexus-partition")
    assert list(tmp_path.iterdir()) == []


def test_cli_stats_json_shape(capsys, fake_dataset):
    argv = ["--dataset", "cora", "--grid", "2x2x1", "--layers", "3", "--stats-only", "--json"]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["permutations"]
    assert list(report["permutations"]) == ["none", "single", "double", "balanced"]
    for entry in report["permutations"].values():
        assert list(entry) == ["layers"]
        assert [row["layer"] for row in entry["layers"]] == [0, 1, 2]
        for row in entry["layers"]:
            assert list(row) == ["layer", "max_over_mean", "max_over_min", "nnz_max", "nnz_mean"]
            assert row["max_over_mean"] >= 1.0 and row["nnz_max"] >= row["nnz_mean"] > 0


def test_cli_stats_table_and_write(tmp_path, capsys, fake_dataset, graph, adj_hat):
    assert cli.main(["--dataset", "cora", "--grid", "2x1x2", "--layers", "2",
                     "--stats-only"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["perm", "layer", "max/mean"] and len(table) == 1 + 4 * 2
    out = tmp_path / "s"
    assert cli.main(["--dataset", "cora", "--grid", "2x1x2", "--layers", "2", "--perm",
                     "balanced", "--seed", "4", "--out", str(out)]) == 0
    assert "wrote 4 shards" in capsys.readouterr().out
    shape, coords = shape_of((2, 1, 2)), {"x": 1, "y": 0, "z": 0}
    # the default orders are plexus-train's default, auto, for its default hidden width
    from plexus_partition.model.model import ModelConfig
    auto = ModelConfig(num_layers=2).orders(graph.num_features, graph.num_classes)
    assert_same_shard(read_shard(out, coords, perm="balanced", seed=4),
                      shard_graph(graph, shape, coords, 2, auto, "balanced", 4, adj_hat=adj_hat))


def _as_written_before(store_dir: Path) -> None:
    """Edit a manifest back to the format written before stages and GNN layers were recorded
    apart: its stage count was named num_layers."""
    path = store_dir / store.MANIFEST
    m = json.loads(path.read_text())
    m["num_layers"] = m.pop("num_stages")
    m.pop("gnn_layers", None)
    path.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")


def test_a_store_written_before_stages_and_layers_were_apart_still_loads(written, tmp_path):
    old = copy_store(written, tmp_path / "old")
    _as_written_before(old)
    assert "num_layers" in json.loads((old / store.MANIFEST).read_text())
    m = read_manifest(old)
    assert m["num_stages"] == 3 and "gnn_layers" not in m and "num_layers" not in m
    for rank in range(4):
        assert_same_shard(read_shard(written, rank), read_shard(old, rank, num_stages=3))


def test_gin_stores_record_two_stages_per_gnn_layer(graph, tmp_path):
    out = tmp_path / "gin"
    write_store(graph, out, shape_of((1, 1, 1)), 4, ["agg", "dense", "combine", "dense"],
                model="gin")
    m = read_manifest(out)
    assert (m["num_stages"], m["gnn_layers"], m["model"]) == (4, 2, "gin")
    odd = tmp_path / "odd"  # a kind-free store of GIN's Â: stages only, no layer count guessed
    write_store(graph, odd, shape_of((1, 1, 1)), 3, ["agg", "dense", "agg"], aggregation="sum")
    assert read_manifest(odd)["num_stages"] == 3 and "gnn_layers" not in read_manifest(odd)
