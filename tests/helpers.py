"""What every test folder shares: the checkout's root, and the one-line error rule asserted.
(Importable by module name, as engine_checks is: tests/conftest.py puts this folder on the path.)"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def shipped_torch_sparse() -> bool:
    """Whether ../shared/wheels holds the torch-sparse build for this environment (torch
    2.13.0 CPU, Python 3.11), which ./run then installs: there the backend must load, and the
    tests that run it against the default must not skip."""
    import sys

    import torch

    wheels = list((REPO.parent / "shared" / "wheels").glob("torch_sparse-*-cp311-*.whl"))
    return bool(wheels) and sys.version_info[:2] == (3, 11) \
        and torch.__version__.startswith("2.13.0") and not torch.version.cuda
#: the three projects' package folders: the engine, the datasets project, the partitioner project
PRODUCT_ROOTS = (REPO / "plexus", REPO / "datasets" / "plexus_datasets",
                 REPO / "partitioners" / "plexus_partition")


def product_modules() -> list[Path]:
    """Every module of the three projects."""
    return sorted(p for root in PRODUCT_ROOTS for p in root.rglob("*.py"))


def assert_one_line(err: str | subprocess.CompletedProcess | pytest.ExceptionInfo | BaseException,
                    *needles: str, prog: str | None = None) -> str:
    """The project's bad-input rule, asserted: a tool's stderr (or a finished process, which must
    have exited 2) is one line, ``{prog}: error: ...`` when ``prog`` is given; a raised error's
    message (``pytest.raises``' info or the error) has no line break. Every needle must be in
    it; returns the text."""
    if isinstance(err, subprocess.CompletedProcess):
        assert err.returncode == 2, (err.returncode, err.stderr[-2000:])
        err = err.stderr
    if isinstance(err, (pytest.ExceptionInfo, BaseException)):
        text = str(err.value if isinstance(err, pytest.ExceptionInfo) else err)
        assert "\n" not in text, text
    else:
        text = err
        assert text.count("\n") == 1, text[-3000:]
    if prog is not None:
        assert text.startswith(f"{prog}: error: "), text[-3000:]
    for needle in needles:
        assert needle in text, text
    return text


# ---- a second user on the machine (tests run as root act as uid/gid 65534 in a child) -------
NOBODY = 65534  # the second user of the two-user tests


def as_nobody(fn, *args):
    """``fn(*args)`` in a forked child that dropped to uid/gid 65534; its JSON-able result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, json.dumps(fn(*args)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return json.loads(out)


@contextlib.contextmanager
def sticky_folder(prefix: str):
    """A folder everyone may create in, as /tmp (mode 1777), removed afterwards (the test's own
    scratch: root may remove what the second user made in it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def merged_world(world: int, fn, *args) -> dict[str, list[str]]:
    """``fn(*args)`` run on a local world of ``world`` ranks, each rank returning {check name:
    [failures]}; the ranks' failures merged per check (the shared-world tests' pattern)."""
    from plexus.testing.localworld import run_world  # noqa: PLC0415

    merged: dict[str, list[str]] = {}
    for rank_result in run_world(world, fn, *args):
        for key, fails in rank_result.items():
            merged.setdefault(key, []).extend(fails)
    return merged
