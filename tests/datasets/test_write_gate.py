"""`plexus_datasets.base.gate`, the one gate of every write (issue 56, item 1): where a write to a
path lands, and the refusals, before anything is written, of a path another user could have
chosen. The oracle of where a write lands is ``os.path.realpath``; two-user cases chown to
uid/gid 65534."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import NOBODY, assert_one_line, sticky_folder
from plexus_datasets.base.gate import UnsafeTargetError, write_target

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another owner")


def test_a_write_lands_where_realpath_says_through_this_users_own_links(tmp_path):
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "abs").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "rel").symlink_to("deep")
    (tmp_path / "real" / "deep" / "up").symlink_to("../..")
    for path in ("abs/out.json", "abs/rel/x/../y.json", "abs/rel/up/real/new/z.npy",
                 "real/./deep/f", "abs/rel"):
        assert write_target(tmp_path / path) == Path(os.path.realpath(tmp_path / path)), path


def test_this_users_own_link_in_a_folder_others_can_write_is_not_followed(tmp_path):
    with sticky_folder("plexus-gate-") as shared:
        (shared / "mine").symlink_to(tmp_path)
        with pytest.raises(UnsafeTargetError, match="which others can write") as e:
            write_target(shared / "mine" / "out.json")
        assert_one_line(e)
        assert write_target(shared / "new.json") == shared / "new.json"  # made by this user


def test_a_component_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UnsafeTargetError, match="not a directory") as e:
        write_target(tmp_path / "f" / "out.json")
    assert_one_line(e)


@ROOT_ONLY
def test_another_users_link_file_or_folder_is_refused(tmp_path):
    (tmp_path / "theirs").mkdir()
    os.chown(tmp_path / "theirs", NOBODY, NOBODY)
    (tmp_path / "their-file").write_text("x")
    os.chown(tmp_path / "their-file", NOBODY, NOBODY)
    (tmp_path / "their-link").symlink_to(tmp_path)
    os.lchown(tmp_path / "their-link", NOBODY, NOBODY)
    for path, needle in (("theirs/out.json", f"owned by uid {NOBODY}"),
                         ("their-file", "another user's file"),
                         ("their-link/out.json", "a symlink another user could have made")):
        with pytest.raises(UnsafeTargetError, match=needle) as e:
            write_target(tmp_path / path)
        assert_one_line(e)


@ROOT_ONLY
def test_a_group_writable_folder_is_trusted_only_for_the_users_private_group(tmp_path):
    folder = tmp_path / "group"
    folder.mkdir()
    folder.chmod(0o775)
    os.chown(folder, 0, NOBODY)  # a group others belong to
    with pytest.raises(UnsafeTargetError, match="writable by others"):
        write_target(folder / "out.json")
    with pytest.raises(UnsafeTargetError, match="a folder others can write"):
        write_target(folder, directory=True)
    os.chown(folder, 0, 0)  # root's own group, nobody else in it: a umask-002 folder
    assert write_target(folder / "out.json") == folder / "out.json"


@ROOT_ONLY
def test_a_sticky_folder_of_another_user_protects_nothing(tmp_path):
    """The owner of a sticky folder may remove or rename any entry in it."""
    folder = tmp_path / "bobs-scratch"
    folder.mkdir()
    folder.chmod(0o1777)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(UnsafeTargetError, match=f"owned by uid {NOBODY}.*another user's") as e:
        write_target(folder / "out.json")
    assert_one_line(e)
