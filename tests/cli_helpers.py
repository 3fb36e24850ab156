"""Running ``plexus-train`` as a user does, from tests: subprocesses, logs, the job's processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

BIN = Path(sys.executable).parent


def cli_env() -> dict[str, str]:
    """This environment with the venv's bin on PATH and no launcher variables."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID"):
        env.pop(key, None)  # the tests' own runs must not look like launched ranks
    return env


def train(*args: str, timeout: float = 600, launcher: tuple[str, ...] = ("plexus-train",)
          ) -> subprocess.CompletedProcess:
    """Run plexus-train (or a launcher command) with the venv's bin on PATH. On a timeout the
    whole process group goes, workers included."""
    cmd = [*launcher, *args]
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout} s:\n{out[-2000:]}\n"
                    f"{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


#: each console script's main, as `plexus.console` and `plexus_partition.console` start it
TOOL_MAINS = {"plexus-train": "plexus.train.cli:main",
              "plexus-partition": "plexus_partition.cli:main",
              "plexus-model": "plexus.perfmodel.cli:model_main",
              "plexus-bench": "plexus.bench.cli:bench_main",
              "plexus-sweep": "plexus.studies.cli:sweep_main",
              "plexus-report": "plexus.studies.cli:report_main",
              "plexus-predict": "plexus.train.predict:main"}


def tool_here(prog: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``prog``'s main called in this process (issue 58 item 5: a table of refusals as calls of
    the code that refuses, one case of the table kept end to end in a process by `train`): its
    return value and what it printed, as `train` gives them; a wait past ``timeout`` seconds
    fails the test instead of hanging it."""
    import contextlib
    import importlib
    import io

    module, _, function = TOOL_MAINS[prog].partition(":")
    main = getattr(importlib.import_module(module), function)

    def stuck(signum, frame):
        raise TimeoutError(f"{prog} {' '.join(args)} waited {timeout} s")

    import torch
    from threadpoolctl import threadpool_limits

    out, err = io.StringIO(), io.StringIO()
    # a tool sets its process's threads (plexus-partition --threads: OMP_NUM_THREADS, the BLAS
    # pools, torch's): restored after, or they would hold for every later test of the session
    environ, threads = dict(os.environ), torch.get_num_threads()
    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                threadpool_limits(limits=None):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess([prog, *args], code, out.getvalue(), err.getvalue())


def train_here(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """plexus-train's main in this process (`tool_here`): for tests of what a run computes and
    writes, where a process of its own would only add an interpreter's start."""
    return tool_here("plexus-train", *args, timeout=timeout)


def read_log(path: Path) -> tuple[list[dict], dict]:
    """(epoch records, summary) of a --log-json file."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records and records[-1].get("summary") is True, "the log must end with its summary"
    return records[:-1], records[-1]


def losses(records: list[dict]) -> np.ndarray:
    """The loss column of a log's epoch records."""
    return np.array([r["loss"] for r in records])


def _proc_table() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, session id, command line) of every process we can read."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[3]),
                                            (stat.parent / "cmdline").read_bytes())
        except (OSError, IndexError, ValueError):
            continue
    return table


def job_workers(pid: int) -> list[int]:
    """The worker processes under launcher ``pid``: the leaves of its process tree, except
    multiprocessing's resource tracker (workers may hang below a fork server)."""
    table = _proc_table()
    tree, todo = set(), [pid]
    while todo:
        here = todo.pop()
        kids = [p for p, (parent, _, _) in table.items() if parent == here]
        tree.update(kids)
        todo += kids
    parents = {table[p][0] for p in tree if p in table}
    return sorted(p for p in tree
                  if p not in parents and p in table and b"resource_tracker" not in table[p][2])


def session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (a job started with start_new_session)."""
    alive = []
    for pid, (_, session, _) in _proc_table().items():
        if session != sid:
            continue
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_for_epoch(proc: subprocess.Popen, epoch: int, limit_s: float = 300) -> None:
    """Read rank 0's lines until epoch ``epoch`` has been printed (training is under way)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the job ended before epoch {epoch}: {proc.stderr.read()[-2000:]}")
        if line.startswith("epoch") and int(line.split()[1].split("/")[0]) >= epoch:
            return
    pytest.fail(f"no epoch {epoch} within {limit_s} s")


def cache_plan(dataset: str = "cora", grid: str = "2x1x1", **changes):
    """A one-epoch run's plan for the shard-store cache's tests (the cache keys a store by it)."""
    from plexus_partition.model.grid import GridShape
    from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
    from plexus.train.plan import RunRequest

    model = changes.pop("model", ModelConfig())
    seed = changes.pop("seed", 0)
    engine = changes.pop("engine", EngineConfig())
    return RunRequest(grid=GridShape.parse(grid), dataset=dataset, root=None, model=model,
                      train=TrainConfig(epochs=1, seed=seed), engine=engine, **changes)


def launched(args):
    """``plexus-train``'s parsed options as a local run's launching process makes them: the
    request (`build_plan`), resolved there where the graph's sizes are cheap to learn
    (`resolve_at_launch`; else the request, which rank 0 resolves)."""
    from plexus.train.cli import build_plan  # noqa: PLC0415 (torch: only the tests that plan)
    from plexus.train.resolve import resolve_at_launch  # noqa: PLC0415

    return resolve_at_launch(build_plan(args, None))
