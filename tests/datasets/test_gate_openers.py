"""The gate's openers (issue 56, item 1): the folders, temporary folders, streams and trusted
reads every module now takes from `plexus_datasets.base.gate`, and a run's folders refused in
the system's (item 6). The oracles are hand-made: a FIFO, a file or link chowned to uid 65534,
a 0777 folder, the system's folders by name; two-user cases plant from a child of uid 65534."""

from __future__ import annotations

import os
import stat

import pytest

from helpers import NOBODY, as_nobody, assert_one_line, sticky_folder
from plexus_datasets.base import gate
from plexus_datasets.base.gate import UnsafeTargetError

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another owner")


@pytest.mark.parametrize("path", ["/", "/etc", "/usr", "/tmp", "/var", "/home", "/etc/plexus-x",
                                  "/usr/share/plexus-x/y", "/proc/self", "/dev/shm/x"])
def test_a_folder_of_the_system_is_never_a_runs_folder(path):
    with pytest.raises(UnsafeTargetError) as e:
        gate.run_folder(path)
    assert_one_line(e, "system", "refusing to make it a run's folder")


def test_a_runs_folder_of_ones_own_is_allowed(tmp_path):
    assert gate.run_folder(tmp_path / "ck") == tmp_path / "ck"
    assert not (tmp_path / "ck").exists()  # checked, nothing made
    assert gate.run_folder(tmp_path) == tmp_path


def test_a_stream_into_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for mode in ("w", "wb", "a", "r+b"):
        with pytest.raises(UnsafeTargetError) as e:
            gate.open_stream(fifo, mode)
        assert_one_line(e, "not a regular file")


def test_a_stream_truncates_only_a_regular_file_and_appends(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old content\n")
    with gate.open_stream(path, "w") as f:
        f.write("new\n")
    assert path.read_text() == "new\n"
    with gate.open_stream(path, "ab") as f:
        f.write(b"more\n")
    assert path.read_bytes() == b"new\nmore\n"
    with pytest.raises(FileExistsError):
        gate.open_stream(path, "x")
    with pytest.raises(ValueError, match="mode 'q'"):
        gate.open_stream(path, "q")


def test_a_stream_never_follows_a_link_at_its_last_component(tmp_path):
    (tmp_path / "real").write_text("kept\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP, nothing written through it
        gate.open_stream(tmp_path / "link", "w")
    assert (tmp_path / "real").read_text() == "kept\n"


def test_a_temporary_folder_in_a_folder_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeTargetError) as e:
        gate.temp_folder(shared, ".x.partial-")
    assert_one_line(e, "others can write")
    assert os.listdir(shared) == []
    made = gate.temp_folder(tmp_path / "new" / "deep", ".x.partial-")
    assert made.parent == tmp_path / "new" / "deep" and made.name.startswith(".x.partial-")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


@ROOT_ONLY
def test_a_stream_in_a_co_users_folder_or_over_their_file_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafeTargetError) as e:
        gate.open_stream(theirs / "x.json", "w")
    assert_one_line(e, f"uid {NOBODY}")
    assert os.listdir(theirs) == []
    (tmp_path / "f").write_text("theirs\n")
    os.chown(tmp_path / "f", NOBODY, NOBODY)
    with pytest.raises(UnsafeTargetError):
        gate.save_text(tmp_path / "f", "mine")
    assert (tmp_path / "f").read_text() == "theirs\n"


def test_a_trusted_read_of_ones_own_file(tmp_path):
    (tmp_path / "state.json").write_text('{"a": 1}')
    with gate.open_trusted(tmp_path / "state.json", "r") as f:
        assert f.read() == '{"a": 1}'
    with pytest.raises(FileNotFoundError):
        gate.open_trusted(tmp_path / "absent")


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664])
def test_a_trusted_read_of_a_file_others_may_rewrite_is_refused(mode, tmp_path, monkeypatch):
    state = tmp_path / "state.json"
    state.write_text("{}")
    state.chmod(mode)
    if mode == 0o664:  # the group's write bit counts unless the group is this user's alone
        monkeypatch.setattr(gate, "_private_group", lambda gid: False)
    with pytest.raises(UnsafeTargetError) as e:
        gate.open_trusted(state)
    assert_one_line(e, str(state), f"writable by others (mode {mode:o})",
                    f"chmod go-w {state}")
    monkeypatch.setattr(gate, "_private_group", lambda gid: True)
    if mode == 0o664:  # a user private group (umask 002): still this user's own
        with gate.open_trusted(state, "r") as f:
            assert f.read() == "{}"


def test_a_trusted_read_says_read_not_write(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UnsafeTargetError) as e:
        gate.open_trusted(tmp_path / "file" / "below")
    assert_one_line(e, "cannot read there")


def test_a_trusted_read_of_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UnsafeTargetError) as e:
        gate.open_trusted(tmp_path / "pipe")
    assert_one_line(e, "not a regular file")


def _plant_file(path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"planted": true}')
    return "planted"


def _plant_link(link: str, to: str) -> str:
    os.symlink(to, link)
    return "planted"


@ROOT_ONLY
def test_a_trusted_read_of_a_co_users_file_or_through_their_link_is_refused(tmp_path):
    (tmp_path / "mine.json").write_text("{}")
    with sticky_folder("plexus-trusted-") as shared:
        assert as_nobody(_plant_file, str(shared / "theirs.json")) == "planted"
        with pytest.raises(UnsafeTargetError) as e:
            gate.open_trusted(shared / "theirs.json")
        assert_one_line(e, f"uid {NOBODY}")
        assert as_nobody(_plant_link, str(shared / "link.json"), str(tmp_path / "mine.json"))
        with pytest.raises(UnsafeTargetError) as e:
            gate.open_trusted(shared / "link.json")
        assert_one_line(e, "symlink")
    (tmp_path / "group.json").write_text("{}")
    os.chown(tmp_path / "group.json", NOBODY, NOBODY)  # their file in my folder
    with pytest.raises(UnsafeTargetError):
        gate.open_trusted(tmp_path / "group.json")


def test_a_tensorboard_log_that_cannot_start_leaves_no_folder(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    import errno

    import torch.utils.tensorboard as tb
    from plexus.train.epochlogs import TensorBoardLog

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tb, "SummaryWriter", full_disk)
    with pytest.raises(OSError):
        TensorBoardLog(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(OSError):
        TensorBoardLog(tmp_path / "kept")
    assert (tmp_path / "kept").is_dir()  # a folder that was there stays
