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

from cli_helpers import cli_env, session_processes, wait_for_epoch
from helpers import REPO, assert_one_line

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


# ---- jobs: start, watch, end ------------------------------------------------------------------
def _start(tmpdir: Path, *args: str) -> subprocess.Popen:
    """plexus-train in its own session, with its own temporary directory (so that what it
    leaves there is its own)."""
    tmpdir.mkdir(exist_ok=True)
    return subprocess.Popen(["plexus-train", *args], env=dict(cli_env(), TMPDIR=str(tmpdir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


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
@pytest.mark.slow
@pytest.mark.parametrize("grid", ["2x2x1", "2x2x2"])
def test_a_hung_rank_ends_a_job_with_two_or_three_cut_axes_naming_it(grid, tmp_path):
    proc = _start(tmp_path / "tmp", "--grid", grid, "--epochs", "100000", "--eval-every", "0",
                  "--timeout", "8", "--inject-fault", "hang:1:2")
    try:
        wait_for_epoch(proc, 2)
        start = time.monotonic()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"grid {grid}: the job was still running 60 s after rank 1 hung")
        code, took = proc.returncode, time.monotonic() - start
        assert not _gone_within(proc.pid, 5), "processes of the job left running"
    finally:
        _kill_session(proc)
    assert code == 1 and took < 60, (code, took)
    assert_one_line(err)
    assert "Traceback" not in err
    assert "waited longer than --timeout 8 s" in err, err
    assert "rank 1 is the stuck one" in err, err


# ---- item 5: SIGKILL of the launcher ends the job and leaves nothing --------------------------
@pytest.mark.slow
def test_sigkill_of_the_launcher_ends_every_process_and_leaves_no_file(tmp_path):
    ck = tmp_path / "ck"
    tmpdir = tmp_path / "tmp"
    proc = _start(tmpdir, "--grid", "2x2x1", "--epochs", "100000", "--eval-every", "0",
                  "--checkpoint", str(ck), "--checkpoint-every", "1")
    try:
        wait_for_epoch(proc, 2)
        semaphores = _semaphores_of(proc.pid)
        assert semaphores, "the job's processes share multiprocessing semaphores"
        # the launcher and 4 workers (forked from it: one thread each), at least
        assert len(session_processes(proc.pid)) >= 5
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
@pytest.mark.slow
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


# ---- item 2: an output path never replaces what is not a regular file -------------------------
def _node(path: Path) -> tuple:
    """What identifies a node and its state: type, inode, size, mtime."""
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns


def _one_error_line(err: str, needle: str) -> None:
    assert_one_line(err, prog="plexus-train")
    assert needle in err, err


@pytest.fixture
def nodes(tmp_path) -> dict[str, Path]:
    """A FIFO, symlinks to it, to /dev/null and to nothing, and a directory, in tmp_path."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    made = {"fifo": fifo, "dir": tmp_path / "dir"}
    made["dir"].mkdir()
    for name, to in [("to-fifo", fifo), ("to-null", Path(os.devnull)),
                     ("to-nothing", tmp_path / "nothing")]:
        made[name] = tmp_path / name
        made[name].symlink_to(to)
    return made


@pytest.mark.parametrize("name, needle", [
    ("fifo", "is a FIFO"), ("to-fifo", "is a symlink to a FIFO"),
    ("to-null", "is a symlink to a character device"), ("to-nothing", "a symlink to nothing"),
    ("dir", "is a directory")])
def test_log_json_at_a_device_node_or_a_symlink_to_one_is_refused(nodes, name, needle, capsys):
    from plexus.train import main

    before = {n: _node(p) for n, p in nodes.items()}
    devnull = _node(Path(os.devnull))
    assert main(["--grid", "1x1x1", "--epochs", "1", "--log-json", str(nodes[name])]) == 2
    _one_error_line(capsys.readouterr().err, needle)
    assert {n: _node(p) for n, p in nodes.items()} == before
    assert _node(Path(os.devnull)) == devnull
    assert sorted(p.name for p in nodes["fifo"].parent.iterdir()) == sorted(
        p.name for p in nodes.values())  # no temporary file beside them


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_log_json_whose_temporary_file_is_a_fifo_is_refused(tmp_path):
    from cli_helpers import train

    fifo = tmp_path / "log.json.tmp"
    os.mkfifo(fifo)
    before = _node(fifo)
    # (a subprocess: opening a FIFO without a reader blocks, which must fail the test, not hang it)
    proc = train("--grid", "1x1x1", "--epochs", "1", "--log-json", str(tmp_path / "log.json"),
                 timeout=120)
    assert proc.returncode == 2
    _one_error_line(proc.stderr, "is a FIFO")
    assert _node(fifo) == before and not (tmp_path / "log.json").exists()


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_log_json_at_the_processes_stdout_is_refused(tmp_path):
    from cli_helpers import train

    proc = train("--grid", "1x1x1", "--epochs", "1", "--log-json", "/proc/self/fd/1")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    _one_error_line(proc.stderr, "is a symlink to a FIFO")


def test_checkpoint_file_that_is_a_fifo_is_refused(nodes, tmp_path, capsys):
    from plexus.train import main

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "checkpoint.pt").symlink_to(nodes["fifo"])
    before = _node(nodes["fifo"])
    assert main(["--grid", "1x1x1", "--epochs", "1", "--checkpoint", str(ck)]) == 2
    _one_error_line(capsys.readouterr().err, "--checkpoint")
    assert _node(nodes["fifo"]) == before
    assert main(["--grid", "1x1x1", "--epochs", "1", "--checkpoint", str(nodes["fifo"])]) == 2
    _one_error_line(capsys.readouterr().err, "not a directory")


def test_the_atomic_writer_refuses_non_regular_targets_and_follows_links_to_files(nodes,
                                                                                  tmp_path):
    from plexus_datasets.base.atomic import UnsafeTargetError, atomic_file

    for name in ("fifo", "to-fifo", "to-null", "to-nothing", "dir"):
        with pytest.raises(UnsafeTargetError):
            with atomic_file(nodes[name], "w") as f:
                f.write("never")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in nodes.values())
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with atomic_file(link, "w") as f:
        f.write("new")
    assert link.is_symlink() and real.read_text() == "new"


# ---- item 8: two runs on one checkpoint directory ---------------------------------------------
@pytest.mark.slow
def test_a_second_run_on_a_checkpoint_directory_in_use_is_refused(tmp_path):
    from cli_helpers import train

    ck = tmp_path / "ck"
    first = _start(tmp_path / "tmp", "--grid", "1x1x1", "--epochs", "100000", "--eval-every",
                   "0", "--checkpoint", str(ck), "--checkpoint-every", "1")
    try:
        wait_for_epoch(first, 2)
        second = train("--grid", "1x1x1", "--epochs", "1", "--checkpoint", str(ck))
        assert second.returncode == 2, second.stderr
        _one_error_line(second.stderr, f"in use by another running plexus-train (pid "
                                       f"{first.pid})")
        assert first.poll() is None  # the first run goes on
    finally:
        _kill_session(first)
    # the lock dies with its holder: the directory is usable again
    third = train("--grid", "1x1x1", "--epochs", "3", "--checkpoint", str(ck), "--quiet")
    assert third.returncode == 0, third.stderr


@pytest.mark.slow  # plexus-train end to end, two runs (test_suite_layout's run rule)
def test_the_checkpoint_lock_is_released_at_the_end_of_a_run(tmp_path):
    from plexus.train import checkpoint as ckpt
    from plexus.train import main

    ck = tmp_path / "ck"
    assert main(["--grid", "1x1x1", "--epochs", "2", "--quiet", "--checkpoint", str(ck)]) == 0
    lock = ckpt.lock_directory(ck)
    with pytest.raises(ckpt.CheckpointError, match="in use by another running"):
        ckpt.lock_directory(ck)
    lock.release()
    assert main(["--grid", "1x1x1", "--epochs", "3", "--quiet", "--checkpoint", str(ck),
                 "--resume"]) == 0


# ---- item 7: options and consoles -------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--timeout", "inf"], "--timeout must be > 0"), (["--timeout", "1e300"], "--timeout must"),
    (["--timeout", "nan"], "--timeout must"), (["--seed", str(2**64)], "--seed must be in"),
    (["--seed", str(2**63)], "--seed must be in")])
def test_out_of_range_timeout_and_seed_are_one_line(args, needle, capsys):
    from plexus.train import main

    assert main(["--grid", "1x1x1", "--epochs", "1", *args]) == 2
    _one_error_line(capsys.readouterr().err, needle)


@pytest.mark.slow
@pytest.mark.parametrize("grid", ["1x1x1", "1x2x1"])
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_closed_or_full_stdout_does_not_end_the_run(grid, stdout, tmp_path):
    """Decision: stdout is only a console; when it cannot be written (closed, full, a pipe
    whose reader left) the run goes on without it, exit status 0, the JSON log complete."""
    log = tmp_path / "log.json"
    cmd = ["plexus-train", "--grid", grid, "--epochs", "2", "--log-json", str(log)]
    if stdout == "closed":
        proc = subprocess.run(cmd, env=cli_env(), stderr=subprocess.PIPE, text=True,
                              timeout=300, pass_fds=(), close_fds=True,
                              preexec_fn=lambda: os.close(1))
    else:
        with open("/dev/full", "w") as full:
            proc = subprocess.run(cmd, env=cli_env(), stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert log.read_text().splitlines()[-1].startswith('{"summary": true')


# ---- items 7 and 9: checkpoints that are not what a resume needs ------------------------------
@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> dict:
    """The payload of a real 2-epoch Cora checkpoint (1x1x1, the default model)."""
    from plexus.train import checkpoint as ckpt
    from plexus.train import main

    ck = tmp_path_factory.mktemp("good")
    assert main(["--grid", "1x1x1", "--epochs", "2", "--quiet", "--checkpoint", str(ck)]) == 0
    return ckpt.load_checkpoint(ck)


def _edited(payload: dict, edit) -> dict:
    import copy

    out = copy.deepcopy(payload)
    edit(out)
    return out


def _set(path: tuple, value):
    def edit(payload):
        where = payload
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
    return edit


def _drop(path: tuple):
    def edit(payload):
        where = payload
        for key in path[:-1]:
            where = where[key]
        del where[path[-1]]
    return edit


def _scaled(name: str, factor: float, moment: str | None = None):
    def edit(payload):
        state = payload["state"]
        if moment is None:
            state["params"][name] = state["params"][name] * factor
        else:
            state["adam"][name][moment] = state["adam"][name][moment] * factor
    return edit


def _reshaped(name: str, moment: str | None = None):
    def edit(payload):
        state = payload["state"]
        holder = state["params"] if moment is None else state["adam"][name]
        key = name if moment is None else moment
        holder[key] = holder[key][:-1]
    return edit


BAD_CHECKPOINTS = {
    "W0 transposed": (lambda p: _set(("state", "params", "W0"), p["state"]["params"]["W0"].T)(p),
                      "W0 is a torch.strided torch.float32 tensor of shape (16, 1433)"),
    "b1 missing": (_drop(("state", "params", "b1")), "missing ['b1']"),
    "unknown parameter": (_set(("state", "params", "W9"), None), "is not a tensor"),
    "W0 Adam exp_avg a row short": (_reshaped("W0", "exp_avg"), "W0 Adam exp_avg is a"),
    "W1 a row short": (_reshaped("W1"), "W1 is a"),
    "Adam state without moments": (_set(("state", "adam", "W0"), {"step": 2.0}),
                                   "Adam state of 'W0' is not step"),
    "Adam step a string": (_set(("state", "adam", "W0", "step"), "two"), "wrong type"),
    "Adam state of b0 missing": (_drop(("state", "adam", "b0")), "not for every parameter"),
    "Adam exp_avg_sq negative": (_scaled("W0", -1.0, "exp_avg_sq"), "negative values"),
    "epoch -5": (_set(("state", "epoch"), -5), "epoch -5 is not a count"),
    "epoch a string": (_set(("state", "epoch"), "2"), "is not a count"),
    "epoch a bool": (_set(("state", "epoch"), True), "is not a count"),
    "W0 NaN": (_scaled("W0", float("nan")), "W0 holds NaN"),
    "W0 integer": (lambda p: _set(("state", "params", "W0"),
                                  p["state"]["params"]["W0"].long())(p), "dense float"),
    "dataset size a string": (_set(("dataset", "num_nodes"), "2708"), "dataset record"),
    "model hidden a float": (_set(("model", "hidden"), 16.0), "model record"),
    "train a list": (_set(("train",), []), "train is missing or not a dict"),
    "extra a list": (_set(("extra",), []), "extra is not a dict"),
    "best val_acc a string": (_set(("extra", "best", "val_acc"), "high"), "best-validation"),
    "format a bool": (_set(("format",), True), "format True"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINTS))
def test_a_malformed_checkpoint_is_one_line_and_status_2(good_checkpoint, case, tmp_path,
                                                         capsys):
    import torch

    from plexus.train import main

    edit, needle = BAD_CHECKPOINTS[case]
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save(_edited(good_checkpoint, edit), ck / "checkpoint.pt")
    assert main(["--grid", "1x1x1", "--epochs", "4", "--quiet", "--checkpoint", str(ck),
                 "--resume"]) == 2
    _one_error_line(capsys.readouterr().err, needle)


@pytest.mark.slow
def test_a_resumed_state_that_diverges_at_once_is_not_called_good(good_checkpoint, tmp_path,
                                                                  capsys):
    import torch

    from plexus.train import main

    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save(_edited(good_checkpoint, lambda p: [_scaled(n, 1e30)(p) for n in ("W0", "W1")]),
               ck / "checkpoint.pt")
    assert main(["--grid", "1x1x1", "--epochs", "4", "--quiet", "--checkpoint", str(ck),
                 "--resume"]) == 1
    err = capsys.readouterr().err
    assert_one_line(err, "at epoch 3; stopped")
    assert "last good checkpoint" not in err and "no good checkpoint to resume from" in err


def test_parameter_shapes_are_those_the_model_saves(tmp_path):
    from plexus.engine.config import ModelConfig
    from plexus.train import checkpoint as ckpt
    from plexus.train import main

    ck = tmp_path / "ck"
    assert main(["--grid", "1x1x1", "--epochs", "1", "--quiet", "--layers", "3",
                 "--learnable-features", "--checkpoint", str(ck)]) == 0
    payload = ckpt.load_checkpoint(ck)
    saved = {k: tuple(v.shape) for k, v in payload["state"]["params"].items()}
    model = ModelConfig(num_layers=3, learnable_features=True)
    assert saved == ckpt.parameter_shapes(model, 2708, 1433, 7)
    ckpt.check_state(payload, model)


# ---- the fuzz suite (seeded, bounded; `benchmarks/fuzz_app.py --cases N` runs more) ------------
@pytest.mark.slow
def test_fuzzed_checkpoints_and_output_targets_end_in_status_0_or_one_line(tmp_path):
    import json
    import sys

    script = REPO / "benchmarks" / "fuzz_app.py"
    proc = subprocess.run([sys.executable, str(script), "--smoke", "--seed", "0", "--out",
                           str(tmp_path)], env=cli_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"  # < 0: a signal
    report = json.loads((tmp_path / "fuzz_app.json").read_text())
    families = {r["family"] for r in report["results"]}
    statuses = {r["status"] for r in report["results"]}
    assert report["cases"] >= 40 and families == {"checkpoint", "target", "outputs"}
    assert statuses == {0, 2} and not report["failures"]
    outputs = [r for r in report["results"] if r["family"] == "outputs"]
    assert {r["status"] for r in outputs} == {0, 2}  # collisions refused, the rest written
