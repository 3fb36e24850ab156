"""Hardening, round 4 (issue 37), the readers' half: sizes a file declares are checked before
anything of that size is allocated (5), bounded options (6, 7), regular files only (7), typed
one-line errors instead of tracebacks (8) and nothing misleading or silently accepted (9).

Every case is a reproducer of the issue, made small: each fails on the code before the fix
(a traceback, a hang caught by a timeout, no error at all, or an error that names the wrong
thing). Cases that would hang run in one child process with a timeout.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cli_helpers import BIN, cli_env
from helpers import assert_one_line

from plexus_datasets import DatasetError, Graph

N = 8


def _gz(path: Path, payload: bytes, times: int = 1) -> None:
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(payload * times)


def _arxiv(root: Path) -> Path:
    from fuzzing.samples import write_ogb

    return write_ogb(root, processed=False)


# ---- 5: declared sizes checked before allocating ---------------------------------------------
BOMBS = {  # file under the dataset directory -> (payload, repeats, the refusal)
    "raw/node-feat.csv.gz": (b"0," * 300_000 + b"0\n", 1, "4096 values"),
    "split/time/train.csv.gz": (b"0\n", 2_000_000, "more than 8"),
    "raw/node-label.csv.gz": (b"1\n", 1_000_000, "more than 8"),
    "raw/num-node-list.csv.gz": (b"8\n", 1_000_000, "more than 16"),
}


@pytest.mark.parametrize("target", sorted(BOMBS))
def test_ogb_csv_bombs_are_refused_before_they_are_read_whole(target, tmp_path):
    """A few kB of gzip declaring a 600 kB line, or millions of lines where one per node is
    allowed: refused naming the file, in the converter (in pieces) and the in-memory loader
    (ogb's pandas) alike."""
    from plexus_datasets import load_dataset
    from plexus_datasets.ogb_raw import ogb_to_disk

    payload, times, needle = BOMBS[target]
    for how in ("convert", "load"):
        d = _arxiv(tmp_path / how)
        _gz(d / target, payload, times)
        with pytest.raises(DatasetError) as e:
            if how == "convert":
                ogb_to_disk("ogbn-arxiv", tmp_path / how, tmp_path / how / "out")
            else:
                load_dataset("ogbn-arxiv", str(tmp_path / how))
        assert str(d / target) in str(e.value) and needle in str(e.value), (how, e.value)
    assert not (tmp_path / "convert" / "out").exists()  # nothing half-written


def test_papers100m_counts_declaring_millions_of_entries_are_refused_unread(tmp_path):
    """data.npz's num_nodes_list declaring 2^22 entries (deflated zeros, a few kB): refused from
    its header, not read and printed (2^27 took 12 GB)."""
    from plexus_datasets.npyio import npy_bytes
    from plexus_datasets.ogb_raw import _BinaryRaw

    raw = tmp_path / "raw"
    raw.mkdir()
    with zipfile.ZipFile(raw / "data.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("num_nodes_list.npy", npy_bytes(np.zeros(1 << 22, np.int64)))
        zf.writestr("num_edges_list.npy", npy_bytes(np.array([4])))
        zf.writestr("node_feat.npy", npy_bytes(np.ones((N, 2), np.float16)))
    (raw / "node-label.npz").write_bytes(b"")
    assert (raw / "data.npz").stat().st_size < 100_000
    with pytest.raises(DatasetError, match="declares 4194304 values"):
        _BinaryRaw(raw).sizes()


def _export(kind: str = "gcn", **edit) -> dict:
    from plexus_partition.model.model import ModelConfig
    from plexus.engine.pygmodel import PygModel, pyg_spec

    spec = pyg_spec(ModelConfig(kind=kind, num_layers=2, hidden=4), 6, 3)
    payload = {"format": "plexus-weights/2", "kind": kind,
               "state_dict": PygModel(spec).state_dict(), "config": {}, "pyg": spec}
    payload["pyg"]["layers"][0]["conv"].update(edit)
    return payload


def test_an_export_whose_tensor_is_a_deflated_size_bomb_is_refused_unread(tmp_path):
    import plexus

    payload = _export()
    payload["features"] = torch.zeros(1 << 25)  # 128 MiB of zeros: ~130 kB deflated
    buf = io.BytesIO()
    torch.save(payload, buf)
    with zipfile.ZipFile(buf) as zin, \
            zipfile.ZipFile(tmp_path / "w.pt", "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    with pytest.raises(plexus.ExportError, match="size bomb"):
        plexus.load_pyg(tmp_path / "w.pt")


@pytest.mark.parametrize("kind, edit, needle", [
    ("gcn", {"in_channels": 1 << 20, "out_channels": 1 << 20}, "do not fit"),  # 4 TiB declared
    ("gcn", {"out_channels": -3}, "out of range"),
    ("gcn", {"in_channels": 1 << 40}, "out of range"),
    ("mlp", {"device": "meta"}, "'device'"),  # a model whose weights were never loaded
])
def test_declared_layer_widths_are_checked_before_the_layer_is_built(kind, edit, needle,
                                                                       tmp_path):
    import plexus

    torch.save(_export(kind, **edit), tmp_path / "w.pt")
    with pytest.raises(plexus.ExportError, match=needle) as e:
        plexus.load_pyg(tmp_path / "w.pt")
    assert_one_line(e, str(tmp_path / "w.pt"))


def test_gin_nested_thousands_deep_in_an_export_is_one_line(tmp_path):
    import plexus

    payload = _export("gin")
    inner = {"class": "Linear", "in_features": 2, "out_features": 2}
    for _ in range(3000):
        inner = {"class": "GINConv", "nn": [inner]}
    payload["pyg"]["layers"][0]["conv"] = inner
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)  # torch.save pickles it recursively
    try:
        torch.save(payload, tmp_path / "w.pt")
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(plexus.ExportError):
        plexus.load_pyg(tmp_path / "w.pt")


def test_labels_past_the_node_count_never_reach_the_disk(tmp_path, monkeypatch):
    """10^6 labels for 8 nodes: refused at the first chunk past 8, not after writing them all."""
    from plexus_datasets import npyio
    from plexus_datasets.ogb_raw import ogb_to_disk

    d = _arxiv(tmp_path)
    _gz(d / "raw/node-label.csv.gz", b"1\n", 1_000_000)
    written = []
    append = npyio.NpyWriter.append
    monkeypatch.setattr(npyio.NpyWriter, "append",
                        lambda self, block: (written.append(len(block)), append(self, block)))
    with pytest.raises(DatasetError, match="more than 8 labels for 8 nodes"):
        ogb_to_disk("ogbn-arxiv", tmp_path, tmp_path / "out", chunk_edges=1000)
    assert max(written) <= 1000  # only the edges and features, never the labels


# ---- the API: a distributed model checked as plexus-train checks it (one local world) ---------
def _api_world() -> dict:
    """On one rank: the memory check, seeds and switches, and a multi-label model's metrics on
    logits that require grad."""
    import plexus
    from plexus.engine.grid import Grid

    grid = Grid.create("1x1x1")
    adj = sp.csr_matrix(np.eye(N, k=1) + np.eye(N, k=-1))
    x = np.ones((N, 6), np.float32)
    graph = Graph.from_scipy(adj, x, np.arange(N) % 2, train=[0, 1, 2], val=[3], test=[4, 5])
    out = {}
    for name, kw in (("hidden", {"hidden": 10**9}), ("seed-1", {"seed": -1}),
                     ("seed1.5", {"seed": 1.5}), ("bias", {"bias": "false"})):
        try:
            plexus.distributed_model(graph, grid, **kw)
            out[name] = "built"
        except ValueError as e:
            out[name] = f"{type(e).__name__}: {e}"
    labels = np.array([[i % 2, (i + 1) % 2] for i in range(N)])
    multi = Graph.from_scipy(adj, x, labels, train=[0, 1, 2, 3], val=[4, 5], test=[6, 7],
                             multilabel=True)
    model = plexus.distributed_model(multi, grid, dropout=0.0)
    logits = model(step=None)
    out["requires_grad"] = logits.requires_grad
    out["metrics"] = model.metrics(logits)
    return out


@pytest.fixture(scope="module")
def api_world() -> dict:
    from plexus.testing.localworld import run_world

    return run_world(1, _api_world, timeout=300)[0]


@pytest.mark.slow
def test_distributed_model_runs_the_memory_check(api_world):
    """hidden=10**9 on a 6-feature graph was an OOM kill at 23 GB; now plexus-train's check."""
    assert api_world["hidden"].startswith("MemoryCheckError: predicted memory per rank"), \
        api_world["hidden"]


@pytest.mark.slow
@pytest.mark.parametrize("name, needle", [("seed-1", "seed must be an integer"),
                                          ("seed1.5", "seed must be an integer"),
                                          ("bias", "bias must be True or False")])
def test_api_seed_and_switches_are_typed_errors(api_world, name, needle):
    assert api_world[name].startswith("ModelError: ") and needle in api_world[name], \
        api_world[name]


@pytest.mark.slow
def test_metrics_of_a_multilabel_model_read_logits_that_require_grad(api_world):
    assert api_world["requires_grad"]
    assert set(api_world["metrics"]) >= {"train", "val", "test"}


# ---- 6, 7: numeric options bounded, one line each ----------------------------------------------
@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_calibrate_with_100000_threads_is_one_line(tmp_path):
    """As a command: it was a segfault, exit 139."""
    proc = subprocess.run([str(BIN / "plexus-bench"), "calibrate", "--quick", "--threads",
                           "100000", "--world-size", "1", "--out", str(tmp_path / "c.json")],
                          capture_output=True, text=True, timeout=300, env=cli_env())
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert_one_line(proc.stderr, "--threads must be at most 1024", prog="plexus-bench")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("world, needle", [
    ("64", "--world-size must be whole numbers in"),  # 64 processes on 2 cores
    (",".join(["1"] * 3000), "at most 8"),
])
def test_calibrate_bounds_world_sizes(world, needle, tmp_path, capsys, monkeypatch):
    from plexus.perfmodel import benchcli

    monkeypatch.setattr(benchcli, "available_cores", lambda: 2)
    assert benchcli.bench_main(["calibrate", "--quick", "--world-size", world, "--out",
                                str(tmp_path / "c.json")]) == 2
    assert_one_line(capsys.readouterr().err, needle, prog="plexus-bench")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("fifo", [False, True])
def test_calibrate_out_a_directory_or_fifo_is_one_line_before_measuring(fifo, tmp_path, capsys):
    from plexus.perfmodel.benchcli import bench_main

    out = tmp_path / "out"
    os.mkfifo(out) if fifo else out.mkdir()
    assert bench_main(["calibrate", "--quick", "--world-size", "1", "--out", str(out)]) == 2
    assert_one_line(capsys.readouterr().err, str(out), "not a regular file", prog="plexus-bench")


@pytest.mark.parametrize("extra, needle", [
    (["--layers", "1000000"], "--layers must be in [1, 256]"),
    (["--nodes", "100", "--nnz", "50"], "--nnz must be in [100, 10000]"),
    (["--nodes", str(10**21), "--nnz", "5"], "--nodes must be at most 1099511627776"),
])
def test_plexus_model_bounds_its_sizes(extra, needle, capsys):
    from plexus.perfmodel.cli import model_main

    args = ["-G", "4", "--nodes", "100", "--nnz", "500", "--features", "6", "--classes", "3"]
    assert model_main(args + extra) == 2
    assert_one_line(capsys.readouterr().err, needle, prog="plexus-model")


def test_plexus_train_bounds_layers(capsys):
    from plexus.train import main

    assert main(["--grid", "1x1x1", "--layers", "10000", "--quiet"]) == 2
    assert_one_line(capsys.readouterr().err, "--layers must be in [1, 256]", prog="plexus-train")


@pytest.mark.parametrize("extra, needle", [
    (["--repeats", "1000000"], "--repeats must be in [1, 100]"),
    (["--world-sizes", ",".join(str(i) for i in range(1, 3001))], "at most 64 sizes"),
    (["--launcher", "slurm", "--partition", "gpu\nrm -rf /"], "--partition"),
    (["--launcher", "slurm", "--account", "a\rb"], "--account"),
    (["--launcher", "slurm", "--time", "01:00:00\n#SBATCH --x"], "--time"),
])
def test_sweep_bounds_and_batch_script_values(extra, needle, tmp_path, capsys):
    from plexus.studies.cli import sweep_main

    args = ["--dataset", "rmat:scale=6", "--world-sizes", "1", "--out", str(tmp_path / "s"),
            "--no-calibrate"]
    assert sweep_main(args + extra) == 2
    assert_one_line(capsys.readouterr().err, needle, prog="plexus-sweep")
    assert not (tmp_path / "s").exists()


# ---- 7: FIFOs are refused, never waited on (one child with a timeout) --------------------------
_FIFOS = r"""
import json, os, sys
from pathlib import Path
import numpy as np, scipy.sparse as sp
import plexus
from plexus_datasets import DatasetError, load_dataset
from plexus_datasets.diskwrite import write_graph
from plexus_datasets.graph import Graph
from plexus.api.outputs import OutputsError

tmp = Path(sys.argv[1])
n = 8
adj = sp.csr_matrix(np.eye(n, k=1, dtype=np.float32))
write_graph(Graph("f", adj, np.ones((n, 2), np.float32), np.arange(n) % 3, np.arange(n) < 3,
                  np.arange(n) == 3, np.arange(n) == 4, 3), tmp / "g")
os.remove(tmp / "g/labels.npy"); os.mkfifo(tmp / "g/labels.npy")
os.mkfifo(tmp / "w.pt")
for name in ("o1", "o2"):
    (tmp / name).mkdir()
(tmp / "o1/outputs.json").write_text(json.dumps({
    "format": "plexus-outputs", "version": 1, "num_nodes": n,
    "arrays": {"pred": {"file": "pred.npy", "dtype": "<i8", "shape": [n]}}}))
os.mkfifo(tmp / "o1/pred.npy")
os.mkfifo(tmp / "o2/outputs.json")
calls = {"graph": lambda: load_dataset(f"graph:{tmp / 'g'}"),
         "load_pyg": lambda: plexus.load_pyg(tmp / "w.pt"),
         "pred.npy": lambda: plexus.load_outputs(tmp / "o1"),
         "outputs.json": lambda: plexus.load_outputs(tmp / "o2")}
for name, call in calls.items():
    try:
        call()
        print(name, "loaded")
    except (DatasetError, plexus.ExportError, OutputsError) as e:
        print(name, "refused:", e)
"""


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_fifos_in_place_of_files_are_refused_not_waited_on(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _FIFOS, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env=cli_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["graph", "load_pyg", "pred.npy",
                                                   "outputs.json"], lines
    for line in lines:
        assert "refused:" in line and "FIFO" in line, line


# ---- 8: damaged JSON and arrays are typed one-line errors -------------------------------------
def _outputs(root: Path, meta_edit: dict | None = None, text: str | None = None,
             rows: int = N) -> Path:
    root.mkdir()
    np.save(root / "pred.npy", np.zeros(N, np.int64))
    meta = {"format": "plexus-outputs", "version": 1, "num_nodes": N,
            "arrays": {"pred": {"file": "pred.npy", "dtype": "<i8", "shape": [rows]}}}
    meta.update(meta_edit or {})
    (root / "outputs.json").write_text(text if text is not None else json.dumps(meta))
    return root


def test_load_outputs_damage_is_one_line(tmp_path):
    import plexus
    from plexus.api.outputs import OutputsError
    from plexus_datasets.npyio import write_header

    nested = '{"format": "plexus-outputs", "version": 1, "x": ' + "[" * 100_000 + \
        "]" * 100_000 + "}"
    lying = _outputs(tmp_path / "lie", rows=400_000_000_000)
    with open(lying / "pred.npy", "wb") as f:  # a header declaring 4e11 rows, 8 rows of data
        write_header(f, np.dtype(np.int64), (400_000_000_000,))
        f.write(np.zeros(N, np.int64).tobytes())
    cases = {"nested": (_outputs(tmp_path / "n", text=nested), {}),
             "list": (_outputs(tmp_path / "l", {"arrays": [1, 2]}), {}),
             "lie": (lying, {"mmap": False})}
    for name, (root, kw) in cases.items():
        with pytest.raises(OutputsError) as e:
            plexus.load_outputs(root, **kw)
        assert_one_line(e, str(root))


def test_a_deeply_nested_cache_source_record_is_rebuilt_not_a_traceback(tmp_path):
    from plexus.train.cache import Cache
    from plexus.train.cachekeys import key_digest

    key = {"spec": "rmat:scale=6"}
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / f"{key_digest(key)}.json").write_text("[" * 100_000 + "]" * 100_000)
    assert Cache(tmp_path).read_sizes(key) is None


def test_network_dropout_one_is_a_value_error():
    from plexus.nn import Network

    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        Network(None, None, [], dropout=1.0)  # checked before the graph is looked at
    with pytest.raises(ValueError, match="seed must be an integer"):
        Network(None, None, [], seed=-1)


# ---- 9: nothing misleading or silently accepted ----------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_gat_negative_slope_must_be_finite(value, capsys):
    from plexus_partition.model.model import ModelConfig, ModelError
    from plexus.perfmodel.cli import model_main

    with pytest.raises(ModelError, match="negative_slope must be a finite number"):
        ModelConfig(kind="gat", negative_slope=value)
    assert model_main(["-G", "1", "--nodes", "100", "--nnz", "500", "--features", "6",
                       "--classes", "3", "--model", "gat", "--negative-slope", str(value)]) == 2
    assert_one_line(capsys.readouterr().err, "--negative-slope", prog="plexus-model")


@pytest.mark.parametrize("kind", ["gat", "sage", "gin"])
def test_a_weighted_graph_is_refused_for_kinds_that_ignore_weights(kind):
    from plexus.api import cut_shard
    from plexus_partition.model.grid import GridShape
    from plexus_partition.model.model import ModelConfig

    adj = sp.csr_matrix(np.eye(N, k=1) * 2.5 + np.eye(N, k=-1) * 2.5)
    graph = Graph.from_scipy(adj, np.ones((N, 3), np.float32), np.arange(N) % 2,
                             train=[0, 1], weighted=True)
    with pytest.raises(DatasetError, match=f"the {kind} model ignores edge weights"):
        cut_shard(graph, GridShape(1, 1, 1), {"x": 0, "y": 0, "z": 0}, ModelConfig(kind=kind))
    cut_shard(graph, GridShape(1, 1, 1), {"x": 0, "y": 0, "z": 0}, ModelConfig(kind="gcn"))


def test_a_multilabel_graph_with_every_label_missing_is_refused():
    adj = sp.csr_matrix(np.eye(N, k=1))
    with pytest.raises(DatasetError, match="no training node has a label"):
        Graph.from_scipy(adj, np.ones((N, 3), np.float32), -np.ones((N, 4)), train=[0, 1],
                         multilabel=True)


def test_a_nan_edge_weight_is_reported_as_nan():
    adj = sp.csr_matrix(np.eye(N, k=1))
    adj.data[2] = np.nan
    with pytest.raises(DatasetError, match="weighs nan"):
        Graph.from_scipy(adj, np.ones((N, 3), np.float32), np.arange(N) % 2, train=[0],
                         weighted=True, directed=True)


def test_ragged_feature_rows_are_named_as_ragged(tmp_path):
    from plexus_datasets.ogb_raw import ogb_to_disk
    from fuzzing.samples import gz_csv

    d = _arxiv(tmp_path)
    gz_csv(d / "raw/node-feat.csv.gz", [[1, 2, 3]] * 5 + [[1, 2]] + [[1, 2, 3]] * 2)
    with pytest.raises(DatasetError, match="line 6 has fewer values than the first.*ragged"):
        ogb_to_disk("ogbn-arxiv", tmp_path, tmp_path / "out")
