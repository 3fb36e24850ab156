"""The plain helpers the datasets, the partitioner and the API share from `plexus.core`:
one atomic directory replace, one task runner, one count rule (imported, never copied)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from plexus_datasets.base import atomic, owned, tasks
from plexus_datasets.base.values import is_count, one_line
from plexus_datasets.errors import DatasetError
from plexus_datasets.work import MarkerError, Runner, read_marker


def _dir(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "f.txt").write_text(text)
    return path


def _allow(path: Path) -> Path:
    return path


def test_replace_directory_swaps_and_removes_the_old_one(tmp_path):
    target = _dir(tmp_path / "out", "old")
    atomic.replace_directory(_dir(tmp_path / "new", "new"), target, _allow)
    assert (target / "f.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing moved aside is left


def test_replace_directory_refused_by_its_check_touches_nothing(tmp_path):
    target, new = _dir(tmp_path / "out", "old"), _dir(tmp_path / "new", "new")

    def refuse(path: Path) -> Path:
        raise DatasetError(f"{path}: no")

    with pytest.raises(DatasetError):
        atomic.replace_directory(new, target, refuse)
    assert (target / "f.txt").read_text() == "old" and new.is_dir()


@pytest.mark.parametrize("code, text", [(errno.EACCES, "old"), (errno.EXDEV, "new")])
def test_replace_directory_when_the_move_fails(tmp_path, monkeypatch, code, text):
    # a failed move puts the old directory back; across file systems the new one is copied
    target, new = _dir(tmp_path / "out", "old"), _dir(tmp_path / "new", "new")
    rename = os.rename

    def failing(src, dst, **fds):  # plexus_datasets.base.owned renames names relative to folders
        if src == new.name and dst == "out":
            raise OSError(code, os.strerror(code))
        return rename(src, dst, **fds)

    monkeypatch.setattr(owned.os, "rename", failing)
    if code == errno.EXDEV:
        atomic.replace_directory(new, target, _allow)
    else:
        with pytest.raises(OSError):
            atomic.replace_directory(new, target, _allow)
    assert (target / "f.txt").read_text() == text
    left = ["out"] if code == errno.EXDEV else ["new", "out"]
    assert sorted(p.name for p in tmp_path.iterdir()) == left


def test_replaceable_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    _dir(tmp_path / "full", "x")
    (tmp_path / "empty").mkdir()
    assert atomic.replaceable_directory(tmp_path / "none", bool, "ours") == tmp_path / "none"
    assert atomic.replaceable_directory(tmp_path / "empty", bool, "ours") == tmp_path / "empty"
    assert atomic.replaceable_directory(tmp_path / "full", bool, "ours") == tmp_path / "full"
    with pytest.raises(DatasetError, match="is not a directory"):
        atomic.replaceable_directory(tmp_path / "file", bool, "ours", DatasetError)
    with pytest.raises(atomic.UnsafeTargetError, match="is not ours; refusing to overwrite"):
        atomic.replaceable_directory(tmp_path / "full", lambda p: False, "ours")


def test_the_graph_directory_and_the_store_replace_through_core():
    # one implementation: the two writers import it (no copy named replace_dir is left)
    import plexus_datasets.diskgraph as diskgraph
    import plexus_datasets.diskwrite as diskwrite
    import plexus_partition.store as store

    assert diskwrite.replace_directory is atomic.replace_directory
    assert store.replace_directory is atomic.replace_directory
    assert not hasattr(diskgraph, "replace_dir") and not hasattr(diskwrite, "replace_dir")


@pytest.mark.parametrize("value, ok", [(0, True), (7, True), (-1, False), (True, False),
                                       (1.0, False), ("3", False), (None, False)])
def test_is_count(value, ok):
    assert is_count(value) is ok


def test_one_line():
    assert one_line("a\n  b\tc ") == "a b c"


def test_a_damaged_marker_is_the_runners_error(tmp_path):
    with Runner(tmp_path / "work", progress=False) as runner:
        assert runner.run("phase", tasks.call, [(dict, )]) == [{}]
    marker = tasks.marker_path(tmp_path / "work", "phase", 0)
    assert read_marker(marker) == {}
    marker.write_text(json.dumps({"format": tasks.MARKER_FORMAT, "sha256": "0", "result": "{}"}))
    with pytest.raises(MarkerError) as e:  # the datasets' runner: a DatasetError, as before
        read_marker(marker)
    assert isinstance(e.value, DatasetError) and isinstance(e.value, tasks.MarkerError)
    with pytest.raises(tasks.MarkerError) as e:  # the generic runner: its own error
        tasks.read_marker(marker)
    assert not isinstance(e.value, DatasetError) and str(marker) in str(e.value)
    with pytest.raises(MarkerError):
        Runner(tmp_path / "work", progress=False).run("phase", tasks.call, [(dict, )])
