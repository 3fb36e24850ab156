"""Hardening, round 4 (issue 37), the stores' half: outputs directories known by their
signature, work directories created fresh and never followed through links, work keyed by the
source and checked before reuse, stores written under a lock, hand-edited markers and a full
disk in one line, a second user kept out."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import NOBODY, as_nobody, assert_one_line
from plexus_datasets.base.owned import SEAL
from plexus.api.outputs import MARKER, OutputsError, check_outputs_target, publish_outputs

TINY = ["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3"]


# ---- 1: an outputs directory is known by what Plexus writes, never by a file name ------------
def real_outputs(target: Path, rows: int = 5) -> Path:
    """An outputs directory as `plexus.save_outputs` leaves it (its rank-0 publishing step)."""
    tmp = target.parent / f".{target.name}.partial-test"
    tmp.mkdir(parents=True)
    np.lib.format.open_memmap(tmp / "pred.npy", mode="w+", dtype=np.int64, shape=(rows,))
    publish_outputs(tmp, target, rows, {"pred": ((rows,), np.dtype(np.int64))}, {"epoch": 1})
    return target


def test_a_users_directory_with_an_outputs_json_is_never_replaced(tmp_path, capsys):
    from plexus.train import main

    res = tmp_path / "res"
    res.mkdir()
    (res / MARKER).write_text('{"mine": 1}\n')
    (res / "thesis.tex").write_text("x")
    assert main(["--grid", "1x1x1", *TINY, "--save-predictions", str(res)]) == 2
    assert_one_line(capsys.readouterr().err, f"--save-predictions {res}", "refusing to replace it",
                    prog="plexus-train")
    assert (res / "thesis.tex").read_text() == "x"


def _forge(kind: str, res: Path) -> None:
    if kind == "extra file":
        (res / "thesis.tex").write_text("x")
    elif kind == "no format":
        meta = json.loads((res / MARKER).read_text())
        del meta["format"]
        (res / MARKER).write_text(json.dumps(meta))
    elif kind == "array not there":
        (res / "pred.npy").unlink()
    elif kind == "marker a link":
        (res.parent / "elsewhere.json").write_text((res / MARKER).read_text())
        (res / MARKER).unlink()
        (res / MARKER).symlink_to(res.parent / "elsewhere.json")
    elif kind == "array a link":
        (res / "pred.npy").rename(res.parent / "keep.npy")
        (res / "pred.npy").symlink_to(res.parent / "keep.npy")
    elif kind == "a subdirectory":
        (res / "logits.npy").mkdir()


@pytest.mark.parametrize("kind", ["extra file", "no format", "array not there", "marker a link",
                                  "array a link", "a subdirectory"])
def test_only_the_exact_signature_counts_as_an_earlier_outputs_directory(kind, tmp_path):
    res = real_outputs(tmp_path / "res")
    assert check_outputs_target(res) == res  # the genuine one is replaced ...
    _forge(kind, res)
    with pytest.raises(OutputsError, match="refusing to replace it"):  # ... nothing else
        check_outputs_target(res)


def test_an_earlier_outputs_directory_is_replaced_whole(tmp_path):
    res = real_outputs(tmp_path / "res", rows=5)
    real_outputs(res, rows=7)
    assert np.load(res / "pred.npy").shape == (7,)
    assert sorted(os.listdir(res)) == [SEAL, MARKER, "pred.npy"]  # and this user's seal
    assert [p.name for p in tmp_path.iterdir()] == ["res"]


# ---- 2: work directories: this user's own, private, signed, never followed ------------------
KEY = "ab" * 32


def _ring(path: Path, n: int) -> Path:
    path.write_text("".join(f"{i} {(i + 1) % n}\n{i} {(i + 7) % n}\n" for i in range(n)))
    return path


def _plant(kind: str, work: Path, victim: Path) -> None:
    from plexus_partition.workdir import SIGNATURE, FORMAT

    sig = json.dumps({"format": FORMAT, "key": KEY, "uid": os.geteuid()})
    if kind == "a symlink":
        work.symlink_to(victim)
    elif kind == "a file":
        work.write_text("x")
    elif kind in ("unsigned", "not private", "a link inside", "wrong key"):
        work.mkdir(mode=0o700)
        if kind != "unsigned":
            (work / SIGNATURE).write_text(sig.replace(KEY, "cd" * 32) if kind == "wrong key"
                                          else sig)
        if kind == "not private":
            work.chmod(0o755)
        if kind == "a link inside":
            (work / "part").symlink_to(victim)


@pytest.mark.parametrize("kind", ["a symlink", "a file", "unsigned", "not private",
                                  "a link inside", "wrong key"])
def test_a_planted_work_directory_is_refused_and_left_alone(kind, tmp_path, monkeypatch):
    from plexus_partition import PartitionError, partition_to_store
    from plexus_partition import pipeline
    from plexus_partition.workdir import work_dir_name

    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "keep").write_text("mine")
    out = tmp_path / "store"
    work = work_dir_name(out, KEY)
    _plant(kind, work, victim)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setattr(pipeline, "config_key", lambda config: KEY)
    with pytest.raises(PartitionError, match="refusing to use it") as e:
        partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", out, "1x1x1", 2)
    assert_one_line(e, str(work))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing added, nothing removed
    assert sorted(os.listdir(victim)) == ["keep"] and (victim / "keep").read_text() == "mine"


def test_a_work_directory_is_made_private_and_resumed_by_its_owner(tmp_path):
    from plexus_partition.workdir import stage_work_dir

    out = tmp_path / "store"
    work = stage_work_dir(out, KEY)
    assert work.stat().st_mode & 0o777 == 0o700 and work.stat().st_uid == os.geteuid()
    (work / "done").mkdir()
    assert stage_work_dir(out, KEY) == work  # a killed run of ours: resumed
    assert [p.name for p in tmp_path.iterdir()] == [work.name]  # no temporary left beside it


# ---- 3: work keyed by the source's files; --graph-dir holding another graph refused ----------
def test_a_killed_partition_never_resumes_with_changed_source_files(tmp_path, monkeypatch):
    from plexus_partition import (PartitionInterrupted, partition_to_store, pipeline,
                                     read_manifest)

    edges = _ring(tmp_path / "g.txt", 40)
    out = tmp_path / "store"
    real = pipeline.partition_source

    def killed(*args, **kwargs):  # a worker killed after the conversion into the work dir
        raise PartitionInterrupted("a worker process died")

    monkeypatch.setattr(pipeline, "partition_source", killed)
    with pytest.raises(PartitionInterrupted):
        partition_to_store(f"edgelist:{edges}", out, "1x1x1", 2)
    assert any(p.name.startswith(".store.work-") for p in tmp_path.iterdir())
    monkeypatch.setattr(pipeline, "partition_source", real)
    _ring(edges, 55)  # the user fixes the input and runs again
    assert partition_to_store(f"edgelist:{edges}", out, "1x1x1", 2)["num_nodes"] == 55
    assert read_manifest(out)["num_nodes"] == 55


def test_a_graph_dir_holding_another_dataset_is_refused(tmp_path):
    from plexus_datasets.graph import DatasetError
    from plexus_partition import partition_to_store

    graph_dir = tmp_path / "graph"
    first = partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2",
                               tmp_path / "a", "1x1x1", 2, graph_dir=graph_dir)
    assert first["num_nodes"] == 32
    with pytest.raises(DatasetError, match="holds a graph converted from rmat:scale=5") as e:
        partition_to_store("rmat:scale=6,edge_factor=4,features=4,classes=2",
                           tmp_path / "b", "1x1x1", 2, graph_dir=graph_dir)
    assert_one_line(e)
    assert not (tmp_path / "b").exists()
    again = partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2",
                               tmp_path / "c", "1x1x1", 2, graph_dir=graph_dir)
    assert again["graph_sha256"] == first["graph_sha256"]  # the same source: reused


# ---- 4: one store written at a time ----------------------------------------------------------
def test_a_second_partition_on_one_out_is_refused_while_the_first_writes(tmp_path):
    from plexus_datasets.base.lockfile import acquire
    from plexus_partition import ShardStoreError, partition_to_store

    out = tmp_path / "store"
    first = acquire(tmp_path / ".store.lock")  # as the first partition holds it
    try:
        with pytest.raises(ShardStoreError, match="another partitioner is writing") as e:
            partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", out,
                               "1x1x1", 2)
        assert_one_line(e)
        assert not out.exists()
    finally:
        first.release()
    partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", out, "1x1x1", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # lock and work removed


def test_a_store_written_while_a_run_started_is_not_replaced(tmp_path, capsys, monkeypatch):
    from plexus_partition import cli, pipeline, read_manifest

    out = tmp_path / "store"
    real, busy = pipeline.check_out_dir, []

    def meanwhile(path):  # another run finishes its store between the CLI's check and the lock
        if not out.exists() and not busy:
            busy.append(1)
            pipeline.partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2",
                                        out, "1x1x1", 2)
        return real(path)

    monkeypatch.setattr(pipeline, "check_out_dir", meanwhile)
    code = cli.main(["--dataset", "rmat:scale=6,edge_factor=4,features=4,classes=2",
                     "--grid", "1x1x1", "--layers", "2", "--out", str(out)])
    assert code == 2
    assert_one_line(capsys.readouterr().err, "refusing to replace it", prog="plexus-partition")
    assert read_manifest(out)["num_nodes"] == 32


# ---- 3 (cache): a damaged store or converted graph is found by its hashes and rebuilt ----------
def test_a_same_size_corrupted_cached_store_is_rebuilt_saying_so(tmp_path):
    from plexus.train.cache import Cache, cached_options
    from cli_helpers import cache_plan

    said: list[str] = []
    cache = Cache(tmp_path / "cache", said.append)
    store = cached_options(cache_plan(), cache, None)[1]
    victim = Path(store.path) / "rank-x1-y0-z0.npz"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed in place
    victim.write_bytes(bytes(data))
    again = cached_options(cache_plan(), cache, None)[1]
    assert again.built and again.path == store.path
    assert any("rank-x1-y0-z0.npz differs from its manifest's sha256" in s for s in said), said
    assert not cached_options(cache_plan(), cache, None)[1].built  # rebuilt whole: trusted again


def test_a_corrupted_converted_graph_in_the_cache_is_converted_again(tmp_path, capfd):
    from plexus.train.cache import BuildRequest, Cache, Source, build_store
    from plexus.engine.config import ModelConfig
    from plexus_partition.model.grid import GridShape

    cache = Cache(tmp_path / "cache")
    source = Source("rmat:scale=6,edge_factor=4,features=8,classes=3", None, 0, False)

    def build(grid: str) -> dict:
        from plexus_partition import read_manifest

        request = BuildRequest(source, source.key(), str(cache.root), GridShape.parse(grid),
                               None, ModelConfig(num_layers=2), "double")
        return read_manifest(build_store(request)[0])

    first = build("1x1x1")
    [graph] = list((cache.root / "graphs").iterdir())
    features = graph / "features.npy"
    layout_bytes = features.stat().st_size
    with open(features, "r+b") as f:  # zeros, same shape and size
        f.seek(128)
        f.write(b"\0" * (layout_bytes - 128))
    second = build("2x1x1")
    assert second["graph_sha256"] == first["graph_sha256"]  # the real graph, not the zeros
    assert "is damaged" in capfd.readouterr().err


# ---- 5: hand-edited or invalid markers: one line naming the file, then a rerun works ---------
def _killed_partition(tmp_path, monkeypatch, crash_in: str) -> tuple[str, Path, dict]:
    from plexus_partition import partition_to_store, rankfile

    spec = "rmat:scale=6,edge_factor=4,features=4,classes=2"
    out = tmp_path / "s"
    run = dict(chunk_edges=200, bucket_entries=300)

    def crash(*args, **kwargs):
        raise RuntimeError("killed")  # as a kill -9 leaves the work

    with monkeypatch.context() as m:
        m.setattr(rankfile, crash_in, crash)
        with pytest.raises(RuntimeError, match="killed"):
            partition_to_store(spec, out, "2x1x1", 2, **run)
    [work] = [p for p in tmp_path.iterdir() if p.name.startswith(".s.work-")]
    return spec, work, run


def _edit_marker(kind: str, work: Path) -> Path:
    phase = "permutation" if kind in ("no subs", "sub-bucket at 1e12") else "sort"
    marker = sorted((work / "done" / phase).glob("*.json"))[0]
    outer = json.loads(marker.read_text())
    result = json.loads(outer["result"])
    if kind == "[1,2]":
        marker.write_text("[1, 2]")
        return marker
    if kind == "invalid json":
        marker.write_text('{"format": ')
        return marker
    if kind == "r 99":
        result["r"] = {k: 99 for k in result["r"]}
    elif kind == "unknown block key":
        result["nnz"] = {"A9:zz": [1]}
    elif kind == "no subs":
        del result["subs"]
    elif kind == "sub-bucket at 1e12":
        key = next(iter(result["subs"]))
        result["subs"][key][-1][-1] = 10**12
    outer["result"] = json.dumps(result)  # edited by hand: its sha256 no longer matches
    marker.write_text(json.dumps(outer))
    return marker


@pytest.mark.parametrize("kind", ["[1,2]", "invalid json", "r 99", "unknown block key",
                                  "no subs", "sub-bucket at 1e12"])
def test_an_edited_marker_is_one_line_naming_it_and_a_rerun_works(kind, tmp_path, monkeypatch):
    from plexus_datasets.graph import DatasetError
    from plexus_partition import partition_to_store, read_manifest

    spec, work, run = _killed_partition(tmp_path, monkeypatch, "rank_task")
    marker = _edit_marker(kind, work)
    with pytest.raises(DatasetError) as e:
        partition_to_store(spec, tmp_path / "s", "2x1x1", 2, **run)
    assert_one_line(e, str(marker))
    assert not work.exists() and not (tmp_path / "s").exists()
    partition_to_store(spec, tmp_path / "s", "2x1x1", 2, **run)  # starts again, cleanly
    assert read_manifest(tmp_path / "s")["num_nodes"] == 64


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_a_finished_rank_file_damaged_before_the_manifest_is_refused(damage, tmp_path,
                                                                      monkeypatch):
    from plexus_datasets.graph import DatasetError
    from plexus_partition import partition_to_store

    spec, work, run = _killed_partition(tmp_path, monkeypatch, "manifest_step")
    files = sorted(work.glob("**/store/rank-*.npz"))
    assert len(files) == 2
    if damage == "truncated":
        files[0].write_bytes(files[0].read_bytes()[:-10])
    else:
        a, b = files[0].read_bytes(), files[1].read_bytes()
        files[0].write_bytes(b)
        files[1].write_bytes(a)
    with pytest.raises(DatasetError, match="changed since its phase finished") as e:
        partition_to_store(spec, tmp_path / "s", "2x1x1", 2, **run)
    assert_one_line(e, str(files[0]))
    assert not work.exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("damage", ["truncated", "swapped", "same size"])
def test_scratch_changed_after_its_phase_is_refused_on_resume(damage, tmp_path, monkeypatch):
    from plexus_datasets.graph import DatasetError
    from plexus_partition import partition_to_store

    spec, work, run = _killed_partition(tmp_path, monkeypatch, "rank_task")
    files = sorted(p for p in work.rglob("*.npy") if p.stat().st_size > 200)
    assert len(files) >= 2
    a, b = files[0].read_bytes(), files[1].read_bytes()
    if damage == "truncated":
        files[0].write_bytes(a[:-8])
    elif damage == "swapped":
        files[0].write_bytes(b)
        files[1].write_bytes(a)
    else:
        files[0].write_bytes(a[:-1] + bytes([a[-1] ^ 1]))
    with pytest.raises(DatasetError, match="changed since its phase finished") as e:
        partition_to_store(spec, tmp_path / "s", "2x1x1", 2, **run)
    assert_one_line(e)
    assert not work.exists()


def test_a_file_planted_beside_the_rank_files_never_joins_the_store(tmp_path, monkeypatch):
    from plexus_partition import PartitionError, partition_to_store

    spec, work, run = _killed_partition(tmp_path, monkeypatch, "manifest_step")
    [store] = {p.parent for p in work.glob("**/store/rank-*.npz")}
    (store / "rank-x9-y0-z0.npz").write_bytes(b"planted")
    with pytest.raises(PartitionError, match="not a file of the store its manifest lists"):
        partition_to_store(spec, tmp_path / "s", "2x1x1", 2, **run)
    assert not work.exists() and not (tmp_path / "s").exists()


def test_a_nested_or_mistyped_sources_record_is_rebuilt(tmp_path):
    from plexus.train.cache import Cache, cached_options
    from cli_helpers import cache_plan

    cache = Cache(tmp_path / "cache")
    store = cached_options(cache_plan(), cache, None)[1]
    [record] = (tmp_path / "cache" / "sources").iterdir()
    doc = json.loads(record.read_text())
    doc["sizes"]["num_nodes"] = "2708"
    record.write_text(json.dumps(doc))
    again = cached_options(cache_plan(), cache, None)[1]
    assert again.path == store.path
    record.write_text('{"source": ' + "[" * 100000 + "]" * 100000 + "}")
    assert cached_options(cache_plan(), cache, None)[1].path == store.path


def test_a_rank_file_is_hashed_again_before_the_manifest(tmp_path, monkeypatch):
    from plexus_partition import PartitionError, partition_to_store, rankfile

    real = rankfile.manifest_step

    def damage_then_write(job, meta, ranks, *rest):  # damaged between its task and the manifest
        path = Path(job.path("store", ranks[0]["file"]))
        path.write_bytes(path.read_bytes()[:-1] + b"?")
        return real(job, meta, ranks, *rest)

    monkeypatch.setattr(rankfile, "manifest_step", damage_then_write)
    with pytest.raises(PartitionError, match="differs from what its task wrote"):
        partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", tmp_path / "s",
                           "1x1x1", 2)
    assert os.listdir(tmp_path) == []


# ---- 6: a full disk, another file system, inputs that name no file ---------------------------
@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs (root only; skipped elsewhere): ``mount(name, size)``."""
    import subprocess

    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        if os.geteuid() != 0 or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(path)],
                capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_no_temporary_work(tmpfs, capsys):
    from plexus_partition import cli

    disk = tmpfs("full", "200k")
    code = cli.main(["--dataset", "cora", "--grid", "1x1x1", "--layers", "2",
                     "--out", str(disk / "store")])
    assert code == 2
    err = assert_one_line(capsys.readouterr().err, "no space left on device",
                          prog="plexus-partition")
    assert str(disk) in err
    assert os.listdir(disk) == []  # a graph held in memory: its temporary work is gone


def test_a_full_disk_keeps_resumable_work_and_says_so(tmpfs):
    from plexus_partition import PartitionError, partition_to_store

    disk = tmpfs("full", "300k")
    with pytest.raises(PartitionError, match="no space left on device.*kept and resumes"):
        partition_to_store("rmat:scale=9,edge_factor=8,features=16,classes=3", disk / "s",
                           "1x1x1", 2)
    assert [p.name.startswith(".s.work-") for p in disk.iterdir()] == [True]


def test_a_graph_dir_on_another_file_system_works(tmpfs, tmp_path):
    from plexus_datasets.diskgraph import is_disk_graph
    from plexus_partition import partition_to_store

    other = tmpfs("other", "64m")
    spec = "rmat:scale=6,edge_factor=4,features=4,classes=2"
    m = partition_to_store(spec, tmp_path / "s", "1x1x1", 2, graph_dir=other / "g")
    assert is_disk_graph(other / "g") and m["num_nodes"] == 64
    assert sorted(os.listdir(tmp_path)) == ["other", "s"]  # no work left beside the store
    assert os.listdir(other) == ["g"]


def test_a_bad_input_naming_no_file_leaves_no_work_directory(tmp_path, monkeypatch):
    from plexus_datasets import convert
    from plexus_partition import partition_to_store

    def bad(*args, **kwargs):  # as a NaN node count or a non-UTF-8 feature file raise
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(convert, "_in_memory", bad)
    edges = _ring(tmp_path / "g.txt", 20)
    with pytest.raises(ValueError):
        partition_to_store(f"edgelist:{edges}", tmp_path / "s", "1x1x1", 2)
    assert sorted(os.listdir(tmp_path)) == ["g.txt"]


# ---- 8: a second user cannot steer a partition or a run's outputs ---------------------------
def _plant_symlink(work: str, victim: str) -> str:
    os.symlink(victim, work)
    return "planted"


def _plant_forged(work: str, victim: str, signature: str) -> str:
    os.unlink(work)
    os.mkdir(work, 0o700)
    with open(os.path.join(work, ".plexus-work.json"), "w") as f:
        f.write(signature)  # a perfect copy of what root's partitioner would write
    os.symlink(victim, os.path.join(work, "part"))
    return "planted"


def _try_everything(work: str, store: str) -> dict:
    """What nobody can do to root's work directory and store in a shared sticky folder."""
    tries = {"list work": lambda: os.listdir(work),
             "write in work": lambda: open(os.path.join(work, "x"), "w"),
             "rename work": lambda: os.rename(work, work + "-moved"),
             "remove work": lambda: os.rmdir(work),
             "rename store": lambda: os.rename(store, store + "-moved"),
             "write in store": lambda: open(os.path.join(store, "x"), "w"),
             "replace manifest": lambda: os.replace(os.devnull,
                                                    os.path.join(store, "manifest.json"))}
    out = {}
    for name, attempt in tries.items():
        try:
            attempt()
            out[name] = "allowed"
        except OSError:
            out[name] = "denied"
    return out


def _plant_outputs(res: str, victim_file: str, marker: str) -> str:
    os.mkdir(res, 0o755)
    with open(os.path.join(res, "outputs.json"), "w") as f:
        f.write(marker)
    os.symlink(victim_file, os.path.join(res, "pred.npy"))
    return "planted"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to act as a second user")
def test_a_second_user_cannot_make_a_partition_or_a_run_touch_anything_else(tmp_path,
                                                                            monkeypatch):
    import tempfile

    from plexus_partition import PartitionError, partition_to_store, pipeline, rankfile
    from plexus_partition.workdir import FORMAT, work_dir_name

    shared = Path(tempfile.mkdtemp(prefix="plexus-two-users-", dir="/tmp"))
    try:
        shared.chmod(0o1777)  # as /tmp: everyone may create, only owners rename or remove
        victim = shared / "canon"
        victim.mkdir(mode=0o700)
        (victim / "keep").write_text("root's")
        out = shared / "store"
        work = work_dir_name(out, KEY)  # predictable, as the configuration is
        monkeypatch.setattr(pipeline, "config_key", lambda config: KEY)
        spec = "rmat:scale=5,edge_factor=4,features=4,classes=2"

        assert as_nobody(_plant_symlink, str(work), str(victim)) == "planted"
        with pytest.raises(PartitionError, match="a symlink"):
            partition_to_store(spec, out, "1x1x1", 2)
        signature = json.dumps({"format": FORMAT, "key": KEY, "uid": 0})
        assert as_nobody(_plant_forged, str(work), str(victim), signature) == "planted"
        with pytest.raises(PartitionError, match=f"owned by uid {NOBODY}"):
            partition_to_store(spec, out, "1x1x1", 2)
        assert sorted(os.listdir(victim)) == ["keep"] and (victim / "keep").read_text() == "root's"
        shutil.rmtree(work)  # root, the owner of the folder, clears the plant

        partition_to_store(spec, out, "1x1x1", 2)  # a store of root's ...
        with monkeypatch.context() as m:  # ... and a killed run's work directory
            m.setattr(rankfile, "rank_task", lambda *a, **k: (_ for _ in ()).throw(
                RuntimeError("killed")))
            with pytest.raises(RuntimeError):
                partition_to_store(spec, out, "2x1x1", 2)
        tried = as_nobody(_try_everything, str(work), str(out))
        assert set(tried.values()) == {"denied"}, tried

        res = shared / "res"
        genuine = json.dumps({"format": "plexus-outputs", "version": 1, "num_nodes": 5,
                              "arrays": {"pred": {"file": "pred.npy", "dtype": "<i8",
                                                  "shape": [5]}}})
        assert as_nobody(_plant_outputs, str(res), str(victim / "keep"), genuine) == "planted"
        with pytest.raises(OutputsError, match=f"owned by uid {NOBODY}.*refusing to"):
            check_outputs_target(res)  # their folder in a shared one: the gate's refusal
        assert (victim / "keep").read_text() == "root's"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# ---- 7: the fuzz of work directories, cache stores and graphs/, outputs directories ---------
def test_a_sample_of_the_store_fuzz_is_all_ok_or_one_line(tmp_path):
    """`benchmarks/fuzz_stores.py` runs 500 cases per kind; here a few of each."""
    from fuzzing import stores as fuzz_stores
    from fuzzing import targets as fuzztargets

    results = fuzz_stores.run_cases(tmp_path, 5, seed=37,
                                    targets=fuzz_stores.Targets.of(fuzztargets))
    bad = [r for r in results if r.outcome not in fuzz_stores.GOOD]
    assert not bad, "\n".join(map(str, bad))
    summary = fuzz_stores.summarize(results)
    for kind in fuzz_stores.KINDS:
        assert sum(summary[kind]["outcomes"].values()) == 5
        assert summary[kind]["max_peak_rss"] <= 1 << 30
    # the damage reaches the checks; the cache repairs what it finds (and the result is right)
    assert summary["workdir"]["outcomes"]["error"] > 0 and summary["outputs"]["outcomes"]["error"]
    assert summary["cache"]["outcomes"]["ok"] == 5


def test_the_fuzz_harness_sees_what_it_must_refuse(tmp_path, monkeypatch):
    """A check switched off shows in the outcomes: the harness can fail."""
    from fuzzing import stores as fuzz_stores
    from fuzzing import targets as fuzztargets

    targets = fuzz_stores.Targets.of(fuzztargets)
    def replace_anything(path: Path, rows: int) -> Path:  # main's rule, and worse
        shutil.rmtree(path, ignore_errors=True)
        return targets.write_outputs(path, rows)

    everything = dataclasses.replace(targets, check_outputs=lambda path: path,
                                     write_outputs=replace_anything)
    results = fuzz_stores.run_cases(tmp_path, 8, seed=37, kinds=("outputs",),
                                    targets=everything)
    assert any(r.outcome == "lost" for r in results), results
