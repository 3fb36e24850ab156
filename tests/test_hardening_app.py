"""Hardening of plexus-train's own side (issue 16): output paths that refuse to replace what is
not a regular file, timeouts on every process group, a job that dies with its launcher and
leaves nothing behind, checkpoints and options that fail in one line, a locked checkpoint
directory, and a seeded fuzz of checkpoints and output targets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import cli_env, session_processes

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


# ---- jobs: start, watch, end ------------------------------------------------------------------
def _start(tmpdir: Path, *args: str) -> subprocess.Popen:
    """plexus-train in its own session, with its own temporary directory (so that what it
    leaves there is its own)."""
    tmpdir.mkdir(exist_ok=True)
    return subprocess.Popen(["plexus-train", *args], env=dict(cli_env(), TMPDIR=str(tmpdir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for_epoch(proc: subprocess.Popen, epoch: int, limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the job ended before epoch {epoch}: {proc.stderr.read()[-2000:]}")
        if line.startswith("epoch") and int(line.split()[1].split("/")[0]) >= epoch:
            return
    pytest.fail(f"no epoch {epoch} within {limit_s} s")


def _gone_within(sid: int, seconds: float, but: int | None = None) -> list[int]:
    """Processes of session ``sid`` (except ``but``) still alive after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = [p for p in session_processes(sid) if p != but]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _semaphores_of(sid: int) -> set[str]:
    """Named semaphores (/dev/shm/sem.*) mapped by the processes of session ``sid``."""
    names = set()
    for pid in session_processes(sid):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names.update(line.split("/dev/shm/", 1)[1].split()[0] for line in maps.splitlines()
                     if "/dev/shm/sem." in line)
    return names


def _leftovers(tmpdir: Path) -> list[str]:
    """What a run left in its temporary directory, except torch's persistent compile cache
    (``torchinductor_USER``: shared by every run, made by importing torch._dynamo)."""
    return sorted(p.name for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_"))


# ---- item 4: --timeout reaches every process group, and the stuck rank is named --------------
@pytest.mark.parametrize("grid", ["2x2x1", "2x2x2"])
def test_a_hung_rank_ends_a_job_with_two_or_three_cut_axes_naming_it(grid, tmp_path):
    proc = _start(tmp_path / "tmp", "--grid", grid, "--epochs", "100000", "--eval-every", "0",
                  "--timeout", "8", "--inject-fault", "hang:1:2")
    try:
        _wait_for_epoch(proc, 2)
        start = time.monotonic()
        proc.stdout.close()
        try:
            err = proc.stderr.read()
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"grid {grid}: the job was still running 60 s after rank 1 hung")
        took = time.monotonic() - start
        assert not _gone_within(proc.pid, 5), "processes of the job left running"
    finally:
        _kill_session(proc)
    assert code == 1 and took < 60, (code, took)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "waited longer than --timeout 8 s" in err, err
    assert "rank 1 is the stuck one" in err, err


# ---- item 5: SIGKILL of the launcher ends the job and leaves nothing --------------------------
def test_sigkill_of_the_launcher_ends_every_process_and_leaves_no_file(tmp_path):
    ck = tmp_path / "ck"
    tmpdir = tmp_path / "tmp"
    proc = _start(tmpdir, "--grid", "2x2x1", "--epochs", "100000", "--eval-every", "0",
                  "--checkpoint", str(ck), "--checkpoint-every", "1")
    try:
        _wait_for_epoch(proc, 2)
        semaphores = _semaphores_of(proc.pid)
        assert semaphores, "the job's processes share multiprocessing semaphores"
        assert len(session_processes(proc.pid)) >= 6  # launcher, fork server, tracker, 4 workers
        os.kill(proc.pid, signal.SIGKILL)
        left = _gone_within(proc.pid, 10, but=proc.pid)
        assert not left, f"processes of the job alive 10 s after the launcher was killed: {left}"
    finally:
        _kill_session(proc)
    for _ in range(50):  # the resource tracker unlinks the semaphores as it exits
        still = sorted(s for s in semaphores if (Path("/dev/shm") / s).exists())
        if not still:
            break
        time.sleep(0.1)
    assert not still, f"semaphores left in /dev/shm: {still}"
    assert not _leftovers(tmpdir), f"files left in the temporary directory: {_leftovers(tmpdir)}"
    # nothing writes the checkpoint any more
    stamp = {p.name: p.stat().st_mtime_ns for p in ck.iterdir()}
    time.sleep(2)
    assert {p.name: p.stat().st_mtime_ns for p in ck.iterdir()} == stamp


# ---- item 6: no pytorch-errorfile after a worker raised ---------------------------------------
def test_a_raising_worker_leaves_no_error_file(tmp_path):
    tmpdir = tmp_path / "tmp"
    proc = _start(tmpdir, "--grid", "2x1x1", "--epochs", "100000", "--eval-every", "0",
                  "--inject-fault", "raise:1:2")
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        _kill_session(proc)
    assert proc.returncode == 1 and "fault injected on rank 1" in err, err
    assert not _leftovers(tmpdir), f"files left in the temporary directory: {_leftovers(tmpdir)}"
