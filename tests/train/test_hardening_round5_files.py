"""Hardening, round 5 (issue 46, items 1, 2 and the cache's mutants of item 6): deletions only of
what this user's Plexus provably made, and a cache trusted only when it is this user's, private,
and what it holds carries this user's seal. Two-user cases run a forked child as uid 65534."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import cache_plan
from fuzzing.storedamage import contents, forge_store, reseal_without_key, store_labels
from helpers import NOBODY, as_nobody, assert_one_line, sticky_folder
from plexus_partition.cli import main as partition_main
from plexus.train.cache import Cache, CacheError, cached_options
from plexus.train.cli import main as train_main

TINY = "rmat:scale=6,edge_factor=4,features=8,classes=3"
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root to act as a second user")


def _build(root: Path, grid: str = "1x1x1", say=None) -> Path:
    """A store of the tiny graph in the cache at ``root``, no longer held by this process."""
    store = cached_options(cache_plan(TINY, grid=grid), Cache(root, say or (lambda s: None)),
                           None)[1]
    store.hold.release()
    return Path(store.path)


def _users_things(folder: Path) -> dict[str, bytes]:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "model.py").write_text("print('my thesis')\n")
    (folder / "notes.md").write_text("# two years of notes\n")
    return contents(folder)


@pytest.fixture
def shared():
    """A folder everyone may create in, as /tmp (sticky)."""
    with sticky_folder("plexus-round5-") as folder:
        yield folder


# ---- the cache: clean and eviction ----------------------------------------------------------
def test_cache_clean_removes_only_sealed_entries_and_keeps_a_users_folder_in_graphs(tmp_path,
                                                                                    capsys):
    root = tmp_path / "cache"
    store = _build(root)
    thesis = _users_things(root / "graphs" / "thesis")
    mine = _users_things(root / "my-notes")  # a folder of the user's own beside the stores
    assert train_main(["--cache", str(root), "--cache-clean"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert not store.exists()
    assert contents(root / "graphs" / "thesis") == thesis and contents(root / "my-notes") == mine


def test_a_graphs_link_in_the_cache_is_never_followed(tmp_path, capsys):
    root, victim = tmp_path / "cache", tmp_path / "elsewhere"
    _build(root)
    kept = _users_things(victim / "project")
    os.symlink(victim, root / "graphs", target_is_directory=True)
    assert train_main(["--cache", str(root), "--cache-clean"]) == 0
    assert contents(victim / "project") == kept


def _plant_graphs_link(cache: str, victim: str) -> str:
    os.mkdir(cache, 0o777)
    os.chmod(cache, 0o777)
    os.symlink(victim, os.path.join(cache, "graphs"))
    return "planted"


@ROOT_ONLY
def test_another_users_cache_with_a_graphs_link_is_refused_and_nothing_is_lost(shared, capsys):
    victim = shared / "victim"
    victim.mkdir(mode=0o700)
    kept = {name: _users_things(victim / name) for name in ("thesis", "data")}
    cache = shared / "cache"
    assert as_nobody(_plant_graphs_link, str(cache), str(victim)) == "planted"
    assert train_main(["--cache", str(cache), "--cache-clean"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err)
    assert f"owned by uid {NOBODY}" in err and "docs/shared-machines.md" in err
    assert {name: contents(victim / name) for name in kept} == kept


def test_a_cache_others_can_write_is_refused_in_one_line(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    for mode in (0o770, 0o730, 0o707, 0o777):  # group (or others) may write: not trusted
        root.chmod(mode)
        with pytest.raises(CacheError, match="writable by group or others") as e:
            cached_options(cache_plan(TINY, grid="1x1x1"), Cache(root), None)
        assert_one_line(e)
    root.chmod(0o750)  # read by the group, written by nobody else: trusted
    assert _build(root).is_dir()
    fresh = tmp_path / "new-cache"
    _build(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o700  # made private


# ---- forged stores ----------------------------------------------------------------------------
def test_a_users_own_store_edited_and_rehashed_is_rebuilt_saying_so(tmp_path):
    root = tmp_path / "cache"
    store = _build(root)
    labels = store_labels(store)
    assert any(any(v > 0 for v in rank) for rank in labels)  # the oracle: real labels
    forge_store(store)
    said: list[str] = []
    again = cached_options(cache_plan(TINY, grid="1x1x1"), Cache(root, said.append), None)[1]
    again.hold.release()
    assert again.built and again.path == str(store)
    assert any("building it again" in s for s in said), said
    assert store_labels(store) == labels


def test_a_seal_rewritten_without_the_key_is_not_trusted(tmp_path):
    """The forgery above, and the seal's listing rewritten to match it too: only the HMAC, which
    needs this user's key, tells."""
    root = tmp_path / "cache"
    store = _build(root)
    labels = store_labels(store)
    forge_store(store)
    reseal_without_key(store)
    said: list[str] = []
    with pytest.raises(CacheError, match="does not verify") as e:
        _build(root, say=said.append)
    assert_one_line(e)
    assert store_labels(store) != labels  # left as found: not provably ours, so not removed


def _plant_forged_cache(cache: str, real_store: str) -> str:
    os.mkdir(cache, 0o755)
    target = os.path.join(cache, os.path.basename(real_store))
    shutil.copytree(real_store, target)
    forge_store(Path(target))
    shutil.copytree(os.path.join(os.path.dirname(real_store), "sources"),
                    os.path.join(cache, "sources"))
    return "planted"


@ROOT_ONLY
def test_a_forged_store_in_another_users_cache_is_refused(shared, tmp_path):
    own = tmp_path / "cache"
    store = _build(own)
    readable = shared / "copy"  # what the co-user copies: a real store of this graph
    shutil.copytree(own, readable)
    for p in [readable, *readable.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    cache = shared / "cache"
    assert as_nobody(_plant_forged_cache, str(cache), str(readable / store.name)) == "planted"
    with pytest.raises(CacheError, match=f"owned by uid {NOBODY}") as e:
        cached_options(cache_plan(TINY, grid="1x1x1"), Cache(cache), None)
    assert_one_line(e)


def test_a_store_not_sealed_by_this_user_is_neither_reused_nor_removed(tmp_path):
    root = tmp_path / "cache"
    store = _build(root)
    (store / ".plexus-seal.json").unlink(missing_ok=True)  # a copy, or an older Plexus
    forge_store(store)
    before = contents(store)
    with pytest.raises(CacheError, match="not sealed") as e:
        cached_options(cache_plan(TINY, grid="1x1x1"), Cache(root), None)
    assert_one_line(e)
    assert contents(store) == before


@ROOT_ONLY
def test_a_store_of_another_owner_in_a_private_cache_is_refused(tmp_path):
    root = tmp_path / "cache"
    store = _build(root)
    for p in [store, *store.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)
    with pytest.raises(CacheError, match=f"owned by uid {NOBODY}"):
        cached_options(cache_plan(TINY, grid="1x1x1"), Cache(root), None)
    assert store.exists()


# ---- plexus-partition --out DIR --force --------------------------------------------------------
def _partition(out: Path, *extra: str) -> int:
    return partition_main(["--dataset", TINY, "--grid", "1x1x1", "--layers", "2", "--out",
                           str(out), *extra])


def test_force_never_replaces_a_folder_that_merely_holds_a_store_manifest(tmp_path, capsys):
    project = tmp_path / "project"
    _users_things(project)
    (project / "manifest.json").write_text(json.dumps({"format": "plexus-shard-store"}))
    before = contents(project)
    assert _partition(project, "--force") == 2
    err = capsys.readouterr().err
    assert_one_line(err)
    assert "refusing" in err
    assert contents(project) == before


def test_force_never_wipes_a_store_a_user_added_a_file_to(tmp_path, capsys):
    out = tmp_path / "store"
    assert _partition(out) == 0
    (out / "notes.txt").write_text("which run this was\n")
    before = contents(out)
    assert _partition(out, "--force") == 2
    assert "notes.txt" in capsys.readouterr().err
    assert contents(out) == before
    (out / "notes.txt").unlink()  # the store as written: --force replaces it
    assert _partition(out, "--force") == 0 and (out / "manifest.json").is_file()


# ---- the cache's mutants (issue 46, item 6) ---------------------------------------------------
def test_entry_sizes_are_every_byte_on_disk(tmp_path):
    from plexus.train.cacheuse import entries

    root = tmp_path / "cache"
    _build(root, "1x2x1")
    (entry,) = [e for e in entries(root) if e.kind == "store"]
    found = subprocess.run(["find", str(entry.path), "-type", "f", "-printf", "%s\n"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(found) >= 3 and entry.bytes == sum(map(int, found))  # find(1): the oracle


def _hold_in_child(lock: Path) -> subprocess.Popen:
    """Another process holding ``lock`` shared, as a run does (fcntl, not the code under test)."""
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


@pytest.fixture
def held_store(tmp_path):
    from plexus.train.cacheuse import use_lock_path

    root = tmp_path / "cache"
    store = _build(root)
    child = _hold_in_child(use_lock_path(root, store))
    try:
        yield root, store
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_eviction_never_even_tries_a_store_a_run_holds(held_store, monkeypatch):
    from plexus.train import cacheuse

    root, store = held_store
    tried = []
    monkeypatch.setattr(cacheuse, "remove", lambda root, entry: tried.append(entry) or False)
    assert cacheuse.evict(root, 0) == [] and tried == []
    assert store.exists()


def test_removing_a_held_store_fails_under_its_lock(held_store):
    from plexus.train import cacheuse

    root, store = held_store
    (entry,) = [e for e in cacheuse.entries(root) if e.path == store]
    stale = entry.__class__(**{**entry.__dict__, "in_use": False})  # seen free a moment ago
    assert cacheuse.remove(root, stale) is False
    assert contents(store) and store.exists()


def test_the_running_store_is_kept_even_when_no_lock_holds_it(tmp_path):
    from plexus.train.cacheuse import evict

    root = tmp_path / "cache"
    _, store = cached_options(cache_plan(TINY, grid="1x1x1"), Cache(root), None)
    store.hold.release()
    assert evict(root, 0, keep=(Path(store.path),)) == [] and Path(store.path).exists()


@pytest.mark.parametrize("mode", [0o770, 0o750, 0o720, 0o707, 0o705])
def test_a_work_directory_readable_or_writable_by_the_group_is_not_private(tmp_path, mode):
    from plexus_partition import PartitionError
    from plexus_partition.workdir import check_work_dir, stage_work_dir

    work = stage_work_dir(tmp_path / "store", "k" * 64)
    check_work_dir(work, "k" * 64)  # as made: private
    work.chmod(mode)
    with pytest.raises(PartitionError, match="not private"):
        check_work_dir(work, "k" * 64)


def test_a_work_directory_signature_copied_by_hand_does_not_verify(tmp_path):
    from plexus_partition import PartitionError
    from plexus_partition.workdir import FORMAT, SIGNATURE, check_work_dir

    work = tmp_path / ".store.work-x"
    work.mkdir(mode=0o700)
    (work / SIGNATURE).write_text(json.dumps({"format": FORMAT, "key": "k", "uid": os.geteuid(),
                                              "mac": "0" * 64}))
    (work / SIGNATURE).chmod(0o600)
    with pytest.raises(PartitionError, match="does not verify"):
        check_work_dir(work, "k")


# ---- the cache fuzz (benchmarks/fuzz_cache.py runs 500 cases; here a few) --------------------
@pytest.mark.slow
def test_a_sample_of_the_cache_fuzz_is_all_ok_or_one_line(tmp_path):
    from helpers import REPO

    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fuzz_cache.py"),
                           "--cases", "10", "--seed", "46", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    summary = json.loads((tmp_path / "fuzz_cache.json").read_text())
    assert done.returncode == 0 and summary["bad"] == [], done.stdout + done.stderr[-2000:]
    assert summary["cases"] == 10 and sum(summary["outcomes"].values()) == 10
    assert summary["outcomes"].get("error", 0) > 0  # the plants reach the checks
