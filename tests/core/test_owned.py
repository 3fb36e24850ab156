"""`plexus_datasets.base.owned`, the one owner of deletions: it acts only on what it can prove is
this user's Plexus's (a folder of this uid with nothing foreign or linked inside; for an output, its
seal under this user's key with exactly the files sealed), never through a link another user could
have planted."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from plexus_datasets.base import owned

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another owner")


def _tree(path: Path) -> Path:
    (path / "sub").mkdir(parents=True)
    (path / "a.txt").write_text("a")
    (path / "sub" / "b.bin").write_bytes(b"bb")
    return path


def test_a_tree_of_this_user_is_removed_and_a_missing_one_is_no_error(tmp_path):
    assert owned.remove_tree(_tree(tmp_path / "t")) is True
    assert not (tmp_path / "t").exists() and os.listdir(tmp_path) == []
    assert owned.remove_tree(tmp_path / "t") is False
    assert owned.remove_tree(tmp_path / "gone" / "deeper") is False


def test_a_link_inside_or_as_the_tree_is_refused_and_nothing_is_touched(tmp_path):
    victim = _tree(tmp_path / "victim")
    tree = _tree(tmp_path / "t")
    os.symlink(victim, tree / "sub" / "link")
    with pytest.raises(owned.NotOursError, match="a symlink inside"):
        owned.remove_tree(tree)
    assert (tree / "a.txt").exists() and (victim / "sub" / "b.bin").read_bytes() == b"bb"
    os.symlink(victim, tmp_path / "as-link")
    with pytest.raises(owned.NotOursError, match="not a directory"):
        owned.remove_tree(tmp_path / "as-link")
    assert owned.remove_tree(tmp_path / "as-link", quiet=True) is False
    assert (victim / "a.txt").read_text() == "a"


@ROOT_ONLY
def test_another_owners_entry_or_tree_is_refused(tmp_path):
    tree = _tree(tmp_path / "t")
    os.lchown(tree / "sub" / "b.bin", NOBODY, NOBODY)
    with pytest.raises(owned.NotOursError, match=f"owned by uid {NOBODY}"):
        owned.remove_tree(tree)
    assert (tree / "a.txt").exists()
    theirs = _tree(tmp_path / "theirs")
    os.lchown(theirs, NOBODY, NOBODY)
    with pytest.raises(owned.NotOursError, match=f"owned by uid {NOBODY}"):
        owned.remove_tree(theirs)
    (tmp_path / "file").write_text("x")
    os.lchown(tmp_path / "file", NOBODY, NOBODY)
    with pytest.raises(owned.NotOursError, match="another user's file"):
        owned.remove_file(tmp_path / "file")
    with pytest.raises(owned.NotOursError, match="another user's file"):
        (tmp_path / "new").write_text("y")
        owned.replace_file(tmp_path / "new", tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


def test_a_link_on_the_way_is_followed_only_when_nobody_else_could_have_made_it(tmp_path):
    real = _tree(tmp_path / "real")
    mine = tmp_path / "mine"
    os.symlink(real, mine)  # this user's link in this user's private folder: followed
    (tmp_path / "x").write_text("x")
    owned.replace_file(tmp_path / "x", mine / "a.txt")
    assert (real / "a.txt").read_text() == "x"
    shared = Path(tempfile.mkdtemp(prefix="plexus-owned-", dir="/tmp"))
    try:
        shared.chmod(0o1777)  # as /tmp: anyone could have made a link here
        os.symlink(real, shared / "link")
        with pytest.raises(owned.NotOursError, match="symlink another user could have made"):
            owned.remove_file(shared / "link" / "a.txt")
        with pytest.raises(owned.NotOursError, match="symlink another user could have made"):
            owned.remove_tree(shared / "link" / "sub")
        assert (real / "a.txt").exists() and (real / "sub" / "b.bin").exists()
        assert owned.remove_file(shared / "link") is True  # the link itself goes, as a name
        assert real.is_dir()
    finally:
        owned.remove_tree(shared, quiet=True)


def test_a_seal_proves_exactly_the_files_written(tmp_path):
    out = _tree(tmp_path / "out")
    (out / "manifest.json").write_text('{"n": 1}')
    owned.write_seal(out, "fmt", ("manifest.json",))
    assert owned.seal_problem(out, "fmt") is None
    assert "its seal is not a other seal" in owned.seal_problem(out, "other")  # another format
    (out / "manifest.json").write_text('{"n": 2}')  # same size, edited: damage, not reuse
    assert "differ from the ones sealed" in owned.seal_problem(out, "fmt")
    assert owned.seal_problem(out, "fmt", exact=False) is None  # ... but replaceable
    (out / "notes.txt").write_text("mine")  # a user's file added: neither
    assert "notes.txt: a file Plexus did not write" in owned.seal_problem(out, "fmt", exact=False)
    with pytest.raises(owned.NotOursError):
        owned.remove_tree(out, seal="fmt")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "extra-dir").mkdir()  # an empty folder is an entry too
    assert "extra-dir/" in owned.seal_problem(out, "fmt", exact=False)
    (out / "extra-dir").rmdir()
    assert owned.remove_tree(out, seal="fmt") is True


def test_a_seal_made_without_the_key_does_not_verify(tmp_path, monkeypatch):
    out = _tree(tmp_path / "out")
    owned.write_seal(out, "fmt")
    seal = json.loads((out / owned.SEAL).read_text())
    seal["mac"] = "0" * 64
    (out / owned.SEAL).write_text(json.dumps(seal))
    assert "does not verify" in owned.seal_problem(out, "fmt")
    other = _tree(tmp_path / "other")
    owned.write_seal(other, "fmt")
    monkeypatch.setenv(owned.CONFIG_ENV, str(tmp_path / "another-users-config"))
    assert "does not verify" in owned.seal_problem(other, "fmt")  # another key: not ours


def test_the_key_is_private_and_refused_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv(owned.CONFIG_ENV, str(tmp_path / "config"))
    key = owned.user_key()
    path = tmp_path / "config" / owned.KEY_FILE
    assert len(key) == 64 and path.stat().st_mode & 0o777 == 0o600
    assert owned.user_key() == key
    path.chmod(0o640)
    with pytest.raises(owned.NotOursError, match="0600 file"):
        owned.user_key()
    path.chmod(0o600)
    (tmp_path / "config").chmod(0o777)
    with pytest.raises(owned.NotOursError, match="nobody else can write"):
        owned.user_key()


# ---- the owner's surviving mutants (issue 56, item 6) -----------------------------------------
@pytest.mark.parametrize("mode", [0o770, 0o720, 0o707, 0o702], ids=oct)
def test_a_sealed_folder_writable_by_its_group_or_others_is_not_trusted(tmp_path, mode):
    out = _tree(tmp_path / "out")
    owned.write_seal(out, "fmt")
    assert owned.seal_problem(out, "fmt") is None
    out.chmod(mode)  # a group member (or anyone) may swap its files: no proof any more
    assert "writable by group or others" in owned.seal_problem(out, "fmt")
    assert not owned.is_sealed(out, "fmt", exact=False)
    with pytest.raises(owned.NotOursError, match="writable by group or others"):
        owned.remove_tree(out, seal="fmt")
    assert (out / "a.txt").read_text() == "a"
    out.chmod(0o750)  # read by the group, written by nobody else: trusted again
    assert owned.seal_problem(out, "fmt") is None


@ROOT_ONLY
def test_a_seal_file_owned_by_another_user_is_not_trusted(tmp_path):
    out = _tree(tmp_path / "out")
    owned.write_seal(out, "fmt")  # a seal that verifies under this user's key ...
    os.lchown(out / owned.SEAL, NOBODY, NOBODY)  # ... but another user's file: they may edit it
    why = owned.seal_problem(out, "fmt")
    assert why is not None and "not this user's small regular file" in why, why
    with pytest.raises(owned.NotOursError):
        owned.remove_tree(out, seal="fmt")
    assert (out / "sub" / "b.bin").read_bytes() == b"bb"
