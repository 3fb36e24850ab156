"""Hardening, round 7 (issue 56, the rest): every file read back as this user's own state goes
through the gate's trusted read (`plexus_datasets.base.gate.open_trusted`): a shard store's
manifest and rank files, a sweep's manifest, the cache's records, the log lines a resumed run
keeps. Each is refused in one line naming the path and the fix when a co-user planted it (a
forked child of uid 65534, `helpers.as_nobody`), when it is a link they made, or when others may
rewrite it (mode 666). Also: a full disk while the cache builds a store, and a resume with
another --lr."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_helpers import cli_env
from fuzzing.storedamage import contents
from helpers import NOBODY, as_nobody, assert_one_line, sticky_folder
from plexus.train.cli import main as train_main

TINY = "rmat:scale=6,edge_factor=4,features=8,classes=3"
RUN = ["--dataset", TINY, "--grid", "1x1x1", "--epochs", "1", "--quiet", "--eval-every", "0"]
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root to act as a second user")


def _plant_link(link: str, to: str) -> str:
    os.symlink(to, link)
    return "planted"


def _chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, uid, uid)


def _refused(argv: list[str], capsys, *needles: str) -> str:
    assert train_main(argv) == 2
    return assert_one_line(capsys.readouterr().err, *needles, prog="plexus-train")


# ---- a shard store: its manifest and its rank files ------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A 1x1x1 store of the tiny graph, cut by plexus-partition (copied by each test)."""
    from plexus_partition.cli import main as partition_main

    out = tmp_path_factory.mktemp("store") / "S"
    assert partition_main(["--dataset", TINY, "--grid", "1x1x1", "--out", str(out)]) == 0
    return out


SHARDS = ["--epochs", "1", "--quiet", "--eval-every", "0"]


def test_ones_own_store_trains(store, tmp_path):
    mine = tmp_path / "S"
    shutil.copytree(store, mine)
    assert train_main(["--shards", str(mine), *SHARDS]) == 0


@ROOT_ONLY
@pytest.mark.parametrize("case", ["their-link", "their-store"])
def test_a_co_users_store_or_link_to_one_is_refused(case, store, tmp_path, capsys):
    with sticky_folder("plexus-round7-") as shared:
        planted = shared / "S"
        if case == "their-link":  # their link to a store of mine: they chose which one
            shutil.copytree(store, tmp_path / "S")
            assert as_nobody(_plant_link, str(planted), str(tmp_path / "S")) == "planted"
            needle = "a symlink another user could have made"
        else:  # their store (their manifest, their rank file)
            shutil.copytree(store, planted)
            _chown_tree(planted, NOBODY)
            needle = f"owned by uid {NOBODY}"
        before = contents(tmp_path)
        line = _refused(["--shards", str(planted), *SHARDS], capsys, "manifest.json", needle)
        assert "give" in line or "use a folder" in line  # the fix
        assert contents(tmp_path) == before


@ROOT_ONLY
@pytest.mark.parametrize("what", ["manifest", "rank file"])
@pytest.mark.parametrize("how", ["theirs", "writable"])
def test_a_stores_file_of_another_uid_or_writable_by_others_is_refused(what, how, store,
                                                                       tmp_path, capsys):
    mine = tmp_path / "S"
    shutil.copytree(store, mine)
    name = "manifest.json" if what == "manifest" else next(
        p.name for p in mine.iterdir() if p.name.startswith("rank-"))
    if how == "theirs":
        os.chown(mine / name, NOBODY, NOBODY)
        needles: tuple[str, ...] = (f"owned by uid {NOBODY}", "of your own")
    else:
        (mine / name).chmod(0o666)
        needles = ("writable by others (mode 666)", f"chmod go-w {mine / name}")
    _refused(["--shards", str(mine), *SHARDS], capsys, name, *needles)


# ---- a sweep's manifest ----------------------------------------------------------------------
SWEEP = ["--dataset", "cora", "--grids", "1x1x1", "--world-sizes", "1", "--launcher", "slurm",
         "--no-calibrate"]


def _sweep(out: Path, capsys) -> tuple[int, str]:
    from plexus.studies.cli import sweep_main

    code = sweep_main([*SWEEP, "--out", str(out)])
    return code, capsys.readouterr().err


@ROOT_ONLY
@pytest.mark.parametrize("how", ["theirs", "writable", "their-link"])
def test_a_sweeps_manifest_another_user_could_have_chosen_is_refused(how, tmp_path, capsys):
    with sticky_folder("plexus-round7-sweep-") as shared:
        out = (tmp_path if how != "their-link" else shared) / "results"
        assert _sweep(out, capsys)[0] == 0  # the manifest of a first invocation
        manifest = out / "manifest.json"
        if how == "theirs":
            os.chown(manifest, NOBODY, NOBODY)
            needle = f"owned by uid {NOBODY}"
        elif how == "writable":
            manifest.chmod(0o666)
            needle = "writable by others"
        else:  # the results folder is sticky and shared: their link where the manifest was
            out.chmod(0o1777)
            manifest.rename(out / "mine.json")
            assert as_nobody(_plant_link, str(manifest), str(out / "mine.json")) == "planted"
            needle = "a symlink another user could have made"
        before = contents(out)
        code, err = _sweep(out, capsys)
        assert code == 2
        assert_one_line(err, str(manifest), needle, prog="plexus-sweep")
        assert contents(out) == before


# ---- the cache's records ---------------------------------------------------------------------
@ROOT_ONLY
@pytest.mark.parametrize("how", ["theirs", "writable"])
def test_a_cache_record_another_user_could_have_chosen_is_refused(how, tmp_path, capsys):
    cache = tmp_path / "c"
    assert train_main([*RUN, "--cache", str(cache)]) == 0
    capsys.readouterr()
    (record,) = (cache / "sources").iterdir()
    if how == "theirs":
        os.chown(record, NOBODY, NOBODY)
        needle = f"owned by uid {NOBODY}"
    else:
        record.chmod(0o666)
        needle = "writable by others"
    _refused([*RUN, "--cache", str(cache)], capsys, "--cache", str(record), needle)


def test_a_verified_stamp_others_may_rewrite_proves_nothing(tmp_path, capsys):
    """A stamp says the store's files were hashed; one others may rewrite (mode 666), forged to
    the stats of a damaged rank file, must not spare the hashing: the store is rebuilt."""
    from plexus.train.cachedir import Cache

    cache = tmp_path / "c"
    assert train_main([*RUN, "--cache", str(cache)]) == 0
    (store,) = [p for p in cache.iterdir() if p.name.startswith("rmat-")]
    manifest = json.loads((store / "manifest.json").read_text())
    rank = store / manifest["ranks"][0]["file"]
    data = bytearray(rank.read_bytes())
    data[-30] ^= 0xFF  # same size, other bytes
    rank.write_bytes(bytes(data))
    stamp = cache / "verified" / f"{store.name}.json"
    stamp.write_text(json.dumps(Cache._stats(store, manifest["ranks"])))  # forged
    stamp.chmod(0o666)
    said: list[str] = []
    assert Cache(cache, said.append).verified(store, manifest["ranks"]) is False
    assert said and "differs from its manifest's sha256" in said[0]


# ---- the log lines a resumed run keeps ------------------------------------------------------
@pytest.mark.parametrize("flag", ["--log-json", "--log-csv"])
def test_a_resumed_log_others_may_rewrite_is_refused(flag, tmp_path, capsys):
    log, ck = tmp_path / "log.out", tmp_path / "ck"
    assert train_main([*RUN, "--epochs", "2", "--checkpoint", str(ck), flag, str(log)]) == 0
    log.chmod(0o666)  # another user may have rewritten the epochs it keeps
    before = log.read_bytes()
    _refused([*RUN, "--epochs", "3", "--checkpoint", str(ck), "--resume", flag, str(log)],
             capsys, str(log), "writable by others", "chmod go-w")
    assert log.read_bytes() == before


# ---- a full disk while the cache builds a store -----------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("scale", [8, 10])  # in this process (small), in a child (streamed)
def test_a_full_disk_while_the_cache_builds_is_one_line_and_leaves_no_work(scale, tmp_path):
    """RLIMIT_FSIZE in the child: a write past 8 KiB fails with EFBIG, as a full disk fails
    with ENOSPC."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    proc = subprocess.run(["plexus-train", "--grid", "2x1x1", "--quiet", "--eval-every", "0",
                           "--epochs", "1", "--dataset",
                           f"rmat:scale={scale},edge_factor=8,features=32,classes=3", "--cache",
                           "c"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=300, preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert_one_line(proc.stderr, "cannot write the shard store into the cache c",
                    "File too large", "free space there, or give another --cache DIR",
                    prog="plexus-train")
    assert "Errno" not in proc.stderr
    left = sorted(str(p.relative_to(tmp_path / "c")) for p in (tmp_path / "c").rglob("*"))
    assert [p for p in left if not p.startswith("locks")] == [], left


@pytest.mark.slow
@pytest.mark.parametrize("scale", [8, 10])  # rank 0 cuts in its process (small), in a child
def test_a_full_disk_while_rank_0_builds_the_cache_under_torchrun_is_one_line(scale, tmp_path):
    """The same full disk under a torchrun-style launch (two ranks started apart, RANK and
    MASTER_PORT set, no launcher of ours): rank 0 builds the store (`join_cached_store`) and
    says why in one line; rank 1 stops without a traceback; the cache keeps no work. The
    oracle that the limit is the cause: the same two ranks without it train."""
    from plexus.runtime.local import free_port

    def ranks(limited: bool) -> list[tuple[int, str]]:
        def limit() -> None:
            if limited:
                resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

        port, procs = free_port(), []
        for rank in range(2):
            env = {**cli_env(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "PLEXUS_JOB_SECRET": "s"}
            procs.append(subprocess.Popen(
                ["plexus-train", "--grid", "2x1x1", "--quiet", "--eval-every", "0", "--epochs",
                 "1", "--timeout", "120", "--dataset",
                 f"rmat:scale={scale},edge_factor=8,features=32,classes=3", "--cache", "c"],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, preexec_fn=limit))
        errs = [p.communicate(timeout=300)[1] for p in procs]
        return [(p.returncode, err) for p, err in zip(procs, errs)]

    (code0, err0), (code1, err1) = ranks(limited=True)
    assert (code0, code1) == (2, 2), (err0[-2000:], err1[-2000:])
    assert_one_line(err0, "cannot write the shard store into the cache c", "File too large",
                    "free space there, or give another --cache DIR", prog="plexus-train")
    assert "Errno" not in err0 and "Traceback" not in err1, err1[-2000:]
    left = sorted(str(p.relative_to(tmp_path / "c")) for p in (tmp_path / "c").rglob("*"))
    assert [p for p in left if not p.startswith("locks")] == [], left
    assert [code for code, _ in ranks(limited=False)] == [0, 0]


# ---- a resume with another --lr ----------------------------------------------------------------
@pytest.mark.slow
def test_a_resume_with_another_lr_is_refused_in_one_line(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert train_main([*RUN, "--epochs", "2", "--lr", "0.01", "--checkpoint", str(ck)]) == 0
    before = (ck / "checkpoint.pt").read_bytes()
    _refused([*RUN, "--epochs", "4", "--lr", "0.05", "--checkpoint", str(ck), "--resume"],
             capsys, "--lr 0.01 (now 0.05)", "give the same options")
    assert (ck / "checkpoint.pt").read_bytes() == before
    assert train_main([*RUN, "--epochs", "3", "--lr", "0.01", "--checkpoint", str(ck),
                       "--resume"]) == 0
