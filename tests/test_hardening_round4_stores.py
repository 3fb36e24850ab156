"""Hardening, round 4 (issue 37), the stores' half: outputs directories known by their
signature, work directories created fresh and never followed through links, work keyed by the
source and checked before reuse, stores written under a lock, hand-edited markers and a full
disk in one line, a second user kept out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from plexus.api.outputs import MARKER, OutputsError, _publish, check_outputs_target

TINY = ["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3"]


def one_line(err: str, prog: str, *needles: str) -> str:
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err[-3000:]
    for needle in needles:
        assert needle in err, err
    return err


# ---- 1: an outputs directory is known by what Plexus writes, never by a file name ------------
def real_outputs(target: Path, rows: int = 5) -> Path:
    """An outputs directory as `plexus.save_outputs` leaves it (its rank-0 publishing step)."""
    tmp = target.parent / f".{target.name}.partial-test"
    tmp.mkdir(parents=True)
    np.lib.format.open_memmap(tmp / "pred.npy", mode="w+", dtype=np.int64, shape=(rows,))
    _publish(tmp, target, rows, {"pred": ((rows,), np.dtype(np.int64))}, {"epoch": 1})
    return target


def test_a_users_directory_with_an_outputs_json_is_never_replaced(tmp_path, capsys):
    from plexus.train import main

    res = tmp_path / "res"
    res.mkdir()
    (res / MARKER).write_text('{"mine": 1}\n')
    (res / "thesis.tex").write_text("x")
    assert main(["--grid", "1x1x1", *TINY, "--save-predictions", str(res)]) == 2
    one_line(capsys.readouterr().err, "plexus-train", f"--save-predictions {res}",
             "refusing to replace it")
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
    assert sorted(os.listdir(res)) == [MARKER, "pred.npy"]
    assert [p.name for p in tmp_path.iterdir()] == ["res"]


# ---- 2: work directories: this user's own, private, signed, never followed ------------------
KEY = "ab" * 32


def _ring(path: Path, n: int) -> Path:
    path.write_text("".join(f"{i} {(i + 1) % n}\n{i} {(i + 7) % n}\n" for i in range(n)))
    return path


def _plant(kind: str, work: Path, victim: Path) -> None:
    from plexus.partitioners.workdir import SIGNATURE, FORMAT

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
    from plexus.partitioners import PartitionError, partition_to_store
    from plexus.partitioners import pipeline
    from plexus.partitioners.workdir import work_dir_name

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
    assert "\n" not in str(e.value) and str(work) in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing added, nothing removed
    assert sorted(os.listdir(victim)) == ["keep"] and (victim / "keep").read_text() == "mine"


def test_a_work_directory_is_made_private_and_resumed_by_its_owner(tmp_path):
    from plexus.partitioners.workdir import stage_work_dir

    out = tmp_path / "store"
    work = stage_work_dir(out, KEY)
    assert work.stat().st_mode & 0o777 == 0o700 and work.stat().st_uid == os.geteuid()
    (work / "done").mkdir()
    assert stage_work_dir(out, KEY) == work  # a killed run of ours: resumed
    assert [p.name for p in tmp_path.iterdir()] == [work.name]  # no temporary left beside it


# ---- 3: work keyed by the source's files; --graph-dir holding another graph refused ----------
def test_a_killed_partition_never_resumes_with_changed_source_files(tmp_path, monkeypatch):
    from plexus.partitioners import (PartitionInterrupted, partition_to_store, pipeline,
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
    from plexus.datasets.graph import DatasetError
    from plexus.partitioners import partition_to_store

    graph_dir = tmp_path / "graph"
    first = partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2",
                               tmp_path / "a", "1x1x1", 2, graph_dir=graph_dir)
    assert first["num_nodes"] == 32
    with pytest.raises(DatasetError, match="holds a graph converted from rmat:scale=5") as e:
        partition_to_store("rmat:scale=6,edge_factor=4,features=4,classes=2",
                           tmp_path / "b", "1x1x1", 2, graph_dir=graph_dir)
    assert "\n" not in str(e.value) and not (tmp_path / "b").exists()
    again = partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2",
                               tmp_path / "c", "1x1x1", 2, graph_dir=graph_dir)
    assert again["graph_sha256"] == first["graph_sha256"]  # the same source: reused


# ---- 4: one store written at a time ----------------------------------------------------------
def test_a_second_partition_on_one_out_is_refused_while_the_first_writes(tmp_path):
    from plexus.core.lockfile import acquire
    from plexus.partitioners import ShardStoreError, partition_to_store

    out = tmp_path / "store"
    first = acquire(tmp_path / ".store.lock")  # as the first partition holds it
    try:
        with pytest.raises(ShardStoreError, match="another partitioner is writing") as e:
            partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", out,
                               "1x1x1", 2)
        assert "\n" not in str(e.value) and not out.exists()
    finally:
        first.release()
    partition_to_store("rmat:scale=5,edge_factor=4,features=4,classes=2", out, "1x1x1", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # lock and work removed


def test_a_store_written_while_a_run_started_is_not_replaced(tmp_path, capsys, monkeypatch):
    from plexus.partitioners import cli, pipeline, read_manifest

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
    one_line(capsys.readouterr().err, "plexus-partition", "refusing to replace it")
    assert read_manifest(out)["num_nodes"] == 32
