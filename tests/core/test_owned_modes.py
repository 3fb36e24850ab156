"""The owner of deletions' modes and uids one at a time (issue 58 item 3): each bit of 0o022
alone (group-writable, others-writable) makes a sealed folder, a link's folder and the key's
folder untrusted, each bit of 0o077 alone the key file; each owner (the folder, its entry, the
link, the link's folder, the seal file, the seal's uid, the key, a moved file) another uid alone
is refused; the modes and owners that are fine are accepted beside them
(`plexus_datasets.base.owned`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from plexus_datasets.base import owned

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another owner")
GROUP_W, OTHER_W = 0o020, 0o002


def _sealed(path: Path) -> Path:
    path.mkdir()
    (path / "manifest.json").write_text('{"n": 1}')
    owned.write_seal(path, "fmt", ("manifest.json",))
    return path


# ---- a sealed folder ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode, trusted", [(0o700, True), (0o755, True), (0o750, True),
                                           (0o700 | GROUP_W, False), (0o700 | OTHER_W, False),
                                           (0o755 | GROUP_W, False), (0o755 | OTHER_W, False)])
def test_a_sealed_folder_writable_by_its_group_or_others_alone_is_not_trusted(tmp_path, mode,
                                                                             trusted):
    out = _sealed(tmp_path / "out")
    out.chmod(mode)
    problem = owned.seal_problem(out, "fmt")
    if trusted:
        assert problem is None
        return
    assert problem is not None and "writable by group or others" in problem
    with pytest.raises(owned.NotOursError):
        owned.remove_tree(out, seal="fmt")
    assert (out / "manifest.json").exists()


@ROOT_ONLY
def test_a_sealed_folder_of_another_uid_is_not_trusted(tmp_path):
    out = _sealed(tmp_path / "out")
    os.lchown(out, NOBODY, os.getegid())  # the folder alone; its files stay this user's
    assert f"owned by uid {NOBODY}" in owned.seal_problem(out, "fmt")


@ROOT_ONLY
def test_a_seal_file_of_another_uid_is_not_trusted(tmp_path):
    out = _sealed(tmp_path / "out")
    os.lchown(out / owned.SEAL, NOBODY, NOBODY)
    assert "not this user's small regular file" in owned.seal_problem(out, "fmt")
    with pytest.raises(owned.NotOursError):
        owned.remove_tree(out, seal="fmt")


def test_a_seal_naming_another_uid_is_not_trusted(tmp_path):
    """A seal whose uid field is another user's, even signed under this user's key."""
    out = _sealed(tmp_path / "out")
    doc = json.loads((out / owned.SEAL).read_text())
    doc.pop("mac", None)
    doc["uid"] = os.geteuid() + 1
    (out / owned.SEAL).write_text(json.dumps(owned.signed(doc)))
    assert "seal of uid" in owned.seal_problem(out, "fmt")


# ---- a link on the way --------------------------------------------------------------------------
def _through_link(tmp_path: Path, mode: int) -> tuple[Path, Path]:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("a")
    folder = tmp_path / "links"
    folder.mkdir()
    os.symlink(real, folder / "link")
    folder.chmod(mode)
    return real, folder / "link" / "a.txt"


@pytest.mark.parametrize("mode, trusted", [(0o700, True), (0o755, True),
                                           (0o755 | GROUP_W, False), (0o755 | OTHER_W, False),
                                           (0o700 | GROUP_W, False), (0o700 | OTHER_W, False)])
def test_a_link_in_a_folder_its_group_or_others_alone_can_write_is_not_followed(tmp_path, mode,
                                                                               trusted):
    real, path = _through_link(tmp_path, mode)
    if trusted:
        assert owned.remove_file(path) is True
        assert not (real / "a.txt").exists()
        return
    with pytest.raises(owned.NotOursError, match="symlink another user could have made"):
        owned.remove_file(path)
    assert (real / "a.txt").read_text() == "a"


@ROOT_ONLY
def test_a_link_of_another_uid_is_not_followed(tmp_path):
    real, path = _through_link(tmp_path, 0o700)
    os.lchown(path.parent, NOBODY, NOBODY)  # the link itself
    with pytest.raises(owned.NotOursError, match="symlink another user could have made"):
        owned.remove_file(path)
    assert (real / "a.txt").exists()


@ROOT_ONLY
def test_a_link_in_a_folder_of_another_uid_is_not_followed(tmp_path):
    real, path = _through_link(tmp_path, 0o755)
    os.lchown(path.parent.parent, NOBODY, NOBODY)  # the link's folder, mode 0755
    with pytest.raises(owned.NotOursError, match="symlink another user could have made"):
        owned.remove_file(path)
    assert (real / "a.txt").exists()


# ---- entries of another uid ---------------------------------------------------------------------
@ROOT_ONLY
@pytest.mark.parametrize("entry", ["", "a.txt", "sub", "sub/b.bin"])  # "": the folder itself
def test_any_one_entry_of_another_uid_keeps_the_tree(tmp_path, entry):
    tree = tmp_path / "t"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.bin").write_bytes(b"b")
    os.lchown(tree / entry if entry else tree, NOBODY, NOBODY)
    with pytest.raises(owned.NotOursError, match=f"owned by uid {NOBODY}"):
        owned.remove_tree(tree)
    assert (tree / "a.txt").exists() and (tree / "sub" / "b.bin").exists()


@ROOT_ONLY
def test_another_uids_file_is_not_moved(tmp_path):
    src = tmp_path / "src"
    src.write_text("theirs")
    os.lchown(src, NOBODY, NOBODY)
    with pytest.raises(owned.NotOursError, match="not this user's file"):
        owned.move(src, tmp_path / "dst")
    with pytest.raises(owned.NotOursError, match="not this user's file"):
        owned.replace_file(src, tmp_path / "dst")
    assert src.read_text() == "theirs" and not (tmp_path / "dst").exists()


# ---- the key ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bit", [0o040, 0o020, 0o010, 0o004, 0o002, 0o001])
def test_the_key_file_open_to_anyone_else_by_one_bit_is_refused(tmp_path, monkeypatch, bit):
    monkeypatch.setenv(owned.CONFIG_ENV, str(tmp_path / "config"))
    owned.user_key()
    path = tmp_path / "config" / owned.KEY_FILE
    path.chmod(0o600 | bit)
    with pytest.raises(owned.NotOursError, match="0600 file"):
        owned.user_key()
    path.chmod(0o400)  # read-only for this user alone: fine
    assert len(owned.user_key()) == 64


@pytest.mark.parametrize("mode, trusted", [(0o700, True), (0o755, True), (0o750, True),
                                           (0o700 | GROUP_W, False), (0o700 | OTHER_W, False)])
def test_the_keys_folder_writable_by_its_group_or_others_alone_is_refused(tmp_path, monkeypatch,
                                                                         mode, trusted):
    monkeypatch.setenv(owned.CONFIG_ENV, str(tmp_path / "config"))
    key = owned.user_key()
    (tmp_path / "config").chmod(mode)
    if trusted:
        assert owned.user_key() == key
        return
    with pytest.raises(owned.NotOursError, match="nobody else can write"):
        owned.user_key()


@ROOT_ONLY
@pytest.mark.parametrize("whose", ["file", "folder"])
def test_the_key_or_its_folder_of_another_uid_is_refused(tmp_path, monkeypatch, whose):
    monkeypatch.setenv(owned.CONFIG_ENV, str(tmp_path / "config"))
    owned.user_key()
    target = tmp_path / "config" / (owned.KEY_FILE if whose == "file" else "")
    os.lchown(target, NOBODY, NOBODY)
    # the key's folder is refused by the write gate (its owner named), the key file by its seal
    want = "0600 file of uid" if whose == "file" else f"owned by uid {NOBODY}"
    with pytest.raises(owned.NotOursError, match=want):
        owned.user_key()
