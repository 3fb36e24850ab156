"""Failures are fast, loud and safe (issue 7): dead, raising and stuck ranks end the whole job;
a diverged loss stops the run; a run that cannot fit is refused; bad input is one line and
exit status 2; a checkpoint killed mid-write leaves the previous one usable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import (cli_env, job_workers, launched, losses, read_log, session_processes,
                         train, wait_for_epoch)
from helpers import assert_one_line
from plexus.train import checkpoint as ckpt
from plexus.api import memcheck
from plexus_datasets import load_dataset
from plexus_partition.store import write_store
from plexus.train import main

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


# ---- a failing rank ends the job --------------------------------------------------------------
def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["plexus-train", *args], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _ends_within(proc: subprocess.Popen, seconds: float) -> tuple[int, str, float]:
    """(exit status, stderr, seconds taken); the job's whole session is gone afterwards."""
    start = time.monotonic()
    proc.stdout.close()  # rank 0 must not block on a full pipe
    try:
        err = proc.stderr.read()
        code = proc.wait(timeout=max(1.0, seconds - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        code, err = None, ""
    took = time.monotonic() - start
    left = []
    for _ in range(50):  # the fork server and workers need a moment to be reaped
        left = session_processes(proc.pid)
        if not left:
            break
        time.sleep(0.1)
    if code is None or left:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert code is not None, f"the job was still running {seconds} s after the failure"
    assert not left, f"processes of the job left running: {left}"
    return code, err, took


@pytest.mark.slow
def test_a_sigkilled_worker_ends_the_2x2x1_job_within_60s_and_the_run_resumes(tmp_path):
    ck = tmp_path / "ck"
    proc = _start("--grid", "2x2x1", "--epochs", "100000", "--eval-every", "0",
                  "--checkpoint", str(ck), "--checkpoint-every", "2")
    try:
        wait_for_epoch(proc, 4)  # epoch 2's checkpoint is written before epoch 3 starts
        workers = job_workers(proc.pid)
        assert len(workers) == 4, workers
        os.kill(workers[2], signal.SIGKILL)
        code, err, took = _ends_within(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code != 0 and took < 60
    assert "plexus-train: error: worker rank" in err and "SIGKILL" in err, err

    # The killed run resumes (on another grid) with the uninterrupted run's losses.
    k = ckpt.saved_epoch(ckpt.load_checkpoint(ck))
    assert k >= 2
    resumed, whole = tmp_path / "resumed.json", tmp_path / "whole.json"
    common = ["--grid", "1x1x1", "--quiet", "--eval-every", "0", "--epochs", str(k + 3)]
    assert main([*common, "--checkpoint", str(ck), "--resume", "--log-json", str(resumed)]) == 0
    assert main([*common, "--log-json", str(whole)]) == 0
    records = read_log(resumed)[0]
    assert [r["epoch"] for r in records] == [k + 1, k + 2, k + 3]
    np.testing.assert_allclose(losses(records), losses(read_log(whole)[0])[k:], atol=1e-5,
                               rtol=0)


def _fault_ends_the_job(grid: str, fault: str, after_epoch: int, *extra: str) -> str:
    """Start a long run with ``--inject-fault``, wait for the epoch before it, and return the
    job's stderr once it has ended (with a failure, within 60 s)."""
    proc = _start("--grid", grid, "--epochs", "100000", "--eval-every", "0", *extra,
                  "--inject-fault", fault)
    try:
        wait_for_epoch(proc, after_epoch)
        code, err, took = _ends_within(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code != 0 and took < 60
    return err


@pytest.mark.slow
def test_a_worker_raising_on_one_rank_ends_the_job_within_60s():
    err = _fault_ends_the_job("2x2x1", "raise:2:3", 3)
    assert "plexus-train: error: worker rank 2 failed" in err, err
    assert "fault injected on rank 2 after epoch 3" in err


@pytest.mark.slow
def test_a_stuck_rank_times_out_and_ends_the_job():
    err = _fault_ends_the_job("1x1x2", "hang:1:2", 2, "--timeout", "8")
    assert err.startswith("plexus-train: error: worker rank 0 failed") and "Traceback" not in err
    assert "waited longer than --timeout 8 s: a peer is stuck or dead" in err, err


@pytest.mark.slow
def test_a_rank_stuck_joining_ends_the_job_when_its_peer_gives_up(monkeypatch, capfd):
    """One rank never gets through the rendezvous (seen once under load: a store client that
    never answered) while its peer gives up with a one-line error: the job ends with that
    error and status 2, instead of the launcher waiting for the stuck rank's return value."""
    from plexus_partition.launch.env import LaunchError
    from plexus.train import entry

    def join(env, timeout_s, **kwargs):
        if env.rank == 1:
            time.sleep(120)  # stuck; the launcher must end it
        raise LaunchError("could not join the job (planted)")

    monkeypatch.setattr(entry, "init_process_group", join)  # the forked workers inherit it
    start = time.monotonic()
    code = main(["--grid", "2x1x1", "--epochs", "1", "--no-cache", "--threads", "1", "--quiet"])
    took = time.monotonic() - start
    err = capfd.readouterr().err
    assert code == 2 and took < 60, (code, took, err)
    assert "plexus-train: error: rank 0: could not join the job (planted)" in err, err
    assert "Traceback" not in err and "worker rank" not in err, err


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_inject_fault_is_checked():
    proc = train("--grid", "1x1x1", "--inject-fault", "explode:0:1")
    assert proc.returncode == 2 and "expected KIND:RANK:EPOCH" in proc.stderr


# ---- a diverged loss stops the run ------------------------------------------------------------
def test_nan_loss_stops_the_run_naming_epoch_and_last_checkpoint(tmp_path, capsys):
    ck = tmp_path / "ck"
    # fp16 activations overflow at once with such steps (an --lr above 1000 is refused)
    code = main(["--grid", "1x1x1", "--epochs", "6", "--lr", "1000", "--dtype", "fp16",
                 "--checkpoint", str(ck), "--checkpoint-every", "1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert_one_line(err)
    assert "loss is nan at epoch 2" in err
    assert f"last good checkpoint: {ck / 'checkpoint.pt'} (epoch 1)" in err
    assert ckpt.saved_epoch(ckpt.load_checkpoint(ck)) == 1  # the diverged state was not saved


@pytest.mark.slow
def test_nan_loss_stops_every_rank(tmp_path):
    proc = train("--grid", "1x2x1", "--epochs", "6", "--lr", "1000", "--dtype", "fp16",
                 "--quiet", "--log-json", str(tmp_path / "log.json"), timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.count("plexus-train: error: loss is nan at epoch 2") == 1, proc.stderr
    assert "no checkpoint was written" in proc.stderr
    assert not (tmp_path / "log.json").exists()  # an unfinished run publishes no log


# ---- the memory check ---------------------------------------------------------------------
def test_memory_check_refuses_then_force_runs(monkeypatch, capsys):
    monkeypatch.setattr(memcheck, "host_available_bytes", lambda: 4096.0)
    assert main(["--grid", "1x1x1", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "predicted memory per rank on grid 1x1x1 is")
    assert "4.0 KiB is available" in err and "--force" in err
    assert main(["--grid", "1x1x1", "--epochs", "1", "--quiet", "--force"]) == 0


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_memory_check_before_building_a_huge_graph():
    # 131072 nodes x 60000 features of float32 = 29 GiB: refused from the spec's sizes alone
    start = time.monotonic()
    proc = train("--grid", "1x1x1", "--dataset", "rmat:scale=17,features=60000", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "predicted memory per rank on grid 1x1x1 is" in proc.stderr
    assert time.monotonic() - start < 60


def test_prediction_grows_with_the_graph_and_shrinks_with_ranks():
    from plexus_partition.model.model import ModelConfig
    from plexus.perfmodel import ModelSpec

    model = ModelConfig(order="agg")  # the paper's order: every layer's AGG is a full-width block
    # all-reduces only, layer 0 gathered per step: the cut's own scaling (the exchanges'
    # buffers and the kept input are priced by hand in tests/perfmodel/test_comm_options.py)
    opts = {"sparse_comm": "off", "keep_input": False}
    small = memcheck.predicted_memory(ModelSpec(10**5, 10**6, 100, 7, model, **opts), (1, 1, 1))
    big = memcheck.predicted_memory(ModelSpec(10**6, 10**7, 100, 7, model, **opts), (1, 1, 1))
    spread = memcheck.predicted_memory(ModelSpec(10**6, 10**7, 100, 7, model, **opts),
                                       (2, 2, 2))
    # Per rank the graph's part shrinks with the ranks (activations are cut by two of the three
    # axes: 1/4 on 2x2x2, blocks of Â by all three); the process's own overhead does not.
    overhead = memcheck.predicted_memory(ModelSpec(1, 1, 1, 1, model), (1, 1, 1))
    assert small < big and spread - overhead < (big - overhead) / 3
    with pytest.raises(memcheck.MemoryCheckError, match="on grid 2x2x2 is"):
        memcheck.check_memory(big, memcheck.Available(small, "test"), (2, 2, 2))


# ---- bad input: one line, status 2 --------------------------------------------------------
def _npz(path: Path, *, features=None, labels=None, truncate=False) -> str:
    g = load_dataset("cora")
    import scipy.sparse as sp

    a = sp.csr_matrix(g.adj)
    feats = g.features.copy() if features is None else features
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=feats,
             labels=g.labels if labels is None else labels)
    if truncate:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return f"npz:{path}"


def _bad_features(value: float) -> np.ndarray:
    f = load_dataset("cora").features.copy()
    f[5, 3] = value
    return f


@pytest.mark.parametrize("make, needle", [
    (lambda p: _npz(p, truncate=True), "g.npz"),
    (lambda p: _npz(p, features=_bad_features(np.nan)), "NaN"),
    (lambda p: _npz(p, features=_bad_features(np.inf)), "Inf"),
    (lambda p: _npz(p, labels=np.full(2708, 9) - np.arange(2708) % 30), "label"),
])
def test_bad_dataset_files_exit_2(tmp_path, capsys, make, needle):
    spec = make(tmp_path / "g.npz")
    assert main(["--grid", "1x1x1", "--dataset", spec]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, needle, prog="plexus-train")


def test_a_shard_store_for_a_grid_too_big_for_the_graph_is_refused(tmp_path, capsys):
    from plexus_partition.cli import main as partition

    assert partition(["--dataset", "cora", "--grid", "1x1x8", "--layers", "2", "--orders", "agg",
                      "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "axis z has 8 ranks but cuts the 7 classes")
    assert not (tmp_path / "refused").exists()
    store = tmp_path / "store"  # cut through the API, which leaves the check to its users
    write_store(load_dataset("cora"), store, {"x": 1, "y": 1, "z": 8}, 2, "agg", "double", 0)
    assert main(["--shards", str(store)]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "axis z has 8 ranks but cuts the 7 classes")


@pytest.mark.parametrize("grid, order, needle", [
    ("1x1x8", "agg", "axis z has 8 ranks but cuts the 7 classes"),
    ("32x1x1", "agg", "axis x has 32 ranks but cuts the 16 hidden features of layer 1"),
    ("32x1x1", None, "axis x has 32 ranks but cuts the 7 classes"),  # the default, auto: c,c
])
def test_grid_axis_larger_than_what_it_cuts(grid, order, needle, capsys):
    assert main(["--grid", grid, *(["--order", order] if order else [])]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, needle)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / "cora"
    write_store(load_dataset("cora"), path, {"x": 1, "y": 1, "z": 1}, 2, "agg", "double", 0)
    return path


@pytest.mark.parametrize("args, needle", [
    (["--grid", "2x1x1"], "was cut for grid 1x1x1"),
    (["--layers", "3"], "was cut for 2 gcn layers: drop --layers"),
    (["--perm", "single"], "was cut with permutation double"),
])
def test_shard_store_for_another_configuration_exits_2(store, args, needle, capsys):
    argv = ["--shards", str(store), "--epochs", "1", *args]
    if "--grid" not in args:
        argv += ["--grid", "1x1x1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line(err, needle)


def test_a_store_cut_with_agg_trains_with_its_orders_when_none_is_given(store, capsys):
    """The default order (auto) does not override a store's: without --order the store's
    orders win; an explicit order that resolves to others is refused."""
    from plexus.train.cli import build_parser

    opts = launched(build_parser().parse_args(["--shards", str(store), "--quiet"]))
    assert opts.model.layer_orders(1433, 7) == ("agg", "agg")
    assert main(["--shards", str(store), "--order", "auto", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--order auto gives layer orders combine,combine")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_shard_file_exits_2(store, tmp_path, damage, capsys):
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    shard = sorted(copy.glob("rank-*.npz"))[0]  # a rank file (not the manifest, not the seal)
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 100]
    else:
        data[len(data) // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    assert main(["--grid", "1x1x1", "--shards", str(copy), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, shard.name)


# ---- kill -9 during a checkpoint write ---------------------------------------------------------
_KILL_MID_WRITE = textwrap.dedent("""
    import os, signal, sys
    import torch
    from plexus.train import checkpoint as ckpt

    directory, where = sys.argv[1], sys.argv[2]
    payload = ckpt.load_checkpoint(directory)
    payload["state"]["epoch"] = 999  # a newer state that must never become visible
    real_save = torch.save
    def dying_save(obj, f):
        real_save(obj, f)
        if where == "mid-write":  # half the bytes reached the file, then the process dies
            f.flush()
            f.truncate(f.tell() // 2)
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    torch.save = dying_save
    if where == "before-rename":  # everything written and synced, the rename not yet done
        # the rename over the old file (plexus_datasets.base.owned renames by directory descriptor)
        os.replace = os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    ckpt.save_checkpoint(directory, payload)
    """)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["mid-write", "before-rename"])
def test_kill_9_during_a_checkpoint_write_keeps_the_previous_one(tmp_path, where):
    ck = tmp_path / "ck"
    base = ["--grid", "1x1x1", "--quiet", "--checkpoint", str(ck)]
    assert main([*base, "--epochs", "5"]) == 0
    proc = subprocess.run([sys.executable, "-c", _KILL_MID_WRITE, str(ck), where],
                          env=cli_env(), capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert any(p.name.endswith(".tmp") for p in ck.iterdir())  # the write really was cut short
    assert ckpt.saved_epoch(ckpt.load_checkpoint(ck)) == 5

    resumed, whole = tmp_path / "resumed.json", tmp_path / "whole.json"
    assert main([*base, "--epochs", "8", "--resume", "--log-json", str(resumed)]) == 0
    assert main(["--grid", "1x1x1", "--quiet", "--epochs", "8", "--log-json", str(whole)]) == 0
    records, _ = read_log(resumed)
    assert [r["epoch"] for r in records] == [6, 7, 8]
    np.testing.assert_allclose(losses(records), losses(read_log(whole)[0])[5:], atol=1e-6,
                               rtol=0)
    assert not any(p.name.endswith(".tmp") for p in ck.iterdir())  # the next save cleaned up


def test_the_root_cause_is_reported_not_the_peers_broken_connections():
    from types import SimpleNamespace

    from plexus.runtime.local import _failures

    def failure(exitcode, message, timestamp, sig=""):
        data = {"message": message, "extraInfo": {"py_callstack": "Traceback ..."}}
        return SimpleNamespace(exitcode=exitcode, message=data, timestamp=timestamp,
                               signal_name=lambda: sig)

    reset = "RuntimeError: Read error [127.0.0.1]:1: Connection reset by peer"
    error = SimpleNamespace(failures={
        0: failure(1, reset, 10), 1: failure(-15, "", 12, "SIGTERM"),
        2: failure(1, "InjectedFault: fault injected on rank 2", 11)})
    assert [f.rank for f in _failures(error)] == [2, 0, 1]
    error.failures[3] = failure(-9, "", 13, "SIGKILL")  # a killed rank outranks everything
    assert [f.rank for f in _failures(error)] == [3, 2, 0, 1]
    timeout = SimpleNamespace(failures={0: failure(1, "Timed out waiting 5000ms", 10),
                                        1: failure(-15, "", 9, "SIGTERM")})
    assert [f.rank for f in _failures(timeout)] == [0, 1]


def _exit_on_rank_1() -> int:
    import torch.distributed as dist  # noqa: PLC0415

    if dist.get_rank() == 1:
        os._exit(3)  # dies without a report, as a signal or a failed start would leave it
    return 0


@pytest.mark.slow
def test_run_world_ends_at_once_when_a_rank_dies_without_reporting():
    from plexus.runtime.world import run_world  # noqa: PLC0415

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 exited with status 3 without reporting"):
        run_world(2, _exit_on_rank_1, timeout=600)
    assert time.monotonic() - start < 60
