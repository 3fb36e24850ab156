"""The suite's own layout: a folder per subject, file names unique across folders (pytest imports
each by its name), and a fast subset (`-m "not slow"`) that never starts a shared world."""

from __future__ import annotations

import ast
import multiprocessing
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

import slow_rule
from helpers import REPO

TESTS = REPO / "tests"
FAST = './run test -m "not slow"'
# shared fixtures that are plain data written in a moment (no world, no run): fast tests may share
# them with slow ones
DATA_FIXTURES = {"datasets/test_proteins.py::standin", "partitioners/test_stream_partition.py::toy"}


def suite_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_sits_in_a_subject_folder_under_a_name_used_once():
    files = suite_files()
    assert not [p.name for p in files if p.parent == TESTS], "test files belong in a subject folder"
    twice = [name for name, n in Counter(p.name for p in files).items() if n > 1]
    assert not twice, f"test file names used in two folders: {twice}"


def _is_slow(node: ast.expr) -> bool:
    return ast.unparse(node) == "pytest.mark.slow"


def _slow_module(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "pytestmark"
                                                 for t in n.targets) and
               any(_is_slow(e) for e in ast.walk(n.value)) for n in tree.body)


def _module_fixtures(tree: ast.Module) -> set[str]:
    """Names of the module- or session-scoped fixtures a file defines (its shared worlds)."""
    names = set()
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            for d in n.decorator_list:
                if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.fixture" and any(
                        k.arg == "scope" and getattr(k.value, "value", None) in ("module", "session")
                        for k in d.keywords):
                    names.add(n.name)
    return names


def test_a_shared_fixture_is_used_by_slow_tests_only_or_by_fast_tests_only():
    """A module-scoped fixture (a world, a trained run) used by one fast test would be started by
    the fast subset anyway: its users are all slow or all fast."""
    mixed = []
    for path in suite_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _slow_module(tree):
            continue
        shared = _module_fixtures(tree)
        users: dict[str, set[bool]] = {}
        for n in tree.body:
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"):
                slow = any(_is_slow(d) for d in n.decorator_list)
                for arg in n.args.args:
                    if arg.arg in shared:
                        users.setdefault(arg.arg, set()).add(slow)
        where = path.relative_to(TESTS)
        mixed += [f"{where}::{name}" for name, kinds in users.items()
                  if len(kinds) == 2 and f"{where}::{name}" not in DATA_FIXTURES]
    assert not mixed, f"fixtures shared by slow and fast tests: {mixed}"


def test_the_slow_marker_is_registered_and_the_fast_subset_documented():
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("slow:") for m in options["markers"])
    assert "-m" not in options.get("addopts", ""), "the whole suite must run everything"
    for doc in ("README.md", "ARCHITECTURE.md"):
        assert FAST in (REPO / doc).read_text(encoding="utf-8"), doc


# ---- the slow rule: a fast test starts no multi-rank world -----------------------------------
_GRID = re.compile(r"""grid\s*=\s*['"](\d+)x(\d+)x(\d+)['"]""")
_RUN_WORLD = re.compile(r"run_world\(\s*(\w+)")


def _ranks(dims: tuple[str, str, str]) -> int:
    return int(dims[0]) * int(dims[1]) * int(dims[2])


def _world_starts(test: ast.FunctionDef) -> list[str]:
    """The multi-rank worlds a test function starts, as far as its own code shows: a
    ``run_world(n, ...)`` or a shared world's ``worlds.ranks(n, ...)``/``worlds.merged(n, ...)``
    (n > 1 or not a literal), a ``launch(..., grid=...)`` of more than one rank (or a grid not
    written out), and the same calls inside a script the test writes and runs (a string holding
    ``launch(`` or ``run_world(``)."""
    found = []
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            shared = name in ("ranks", "merged") and ast.unparse(f).startswith("worlds.")
            if name == "run_world" or shared:  # tests/worlds.py's shared world of n ranks
                n = node.args[0] if node.args else None
                if not (isinstance(n, ast.Constant) and isinstance(n.value, int) and n.value <= 1):
                    found.append(ast.unparse(node)[:70])
            elif name == "launch" and ast.unparse(f) in ("plexus.launch", "launch"):
                grid = next((k.value for k in node.keywords if k.arg == "grid"), None)
                text = grid.value if isinstance(grid, ast.Constant) else None
                dims = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text) if isinstance(text, str) else None
                if dims is None or _ranks(dims.groups()) > 1:
                    found.append(ast.unparse(node)[:70])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            s = node.value
            if "launch(" in s and any(_ranks(g) > 1 for g in _GRID.findall(s)):
                found.append(f"a script: {s[:60]!r}")
            for n in _RUN_WORLD.findall(s):
                if not (n.isdigit() and int(n) <= 1):
                    found.append(f"a script: {s[:60]!r}")
    return found


def _fast_tests() -> list[tuple[str, ast.FunctionDef]]:
    """("file::name", its code) of every test function neither it nor its module marks slow."""
    out = []
    for path in suite_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not _slow_module(tree):
            out += [(f"{path.relative_to(TESTS)}::{n.name}", n) for n in tree.body
                    if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                    and not any(_is_slow(d) for d in n.decorator_list)]
    return out


def test_no_fast_test_starts_a_multi_rank_world():
    """A test that starts a world of several ranks (`plexus.runtime.world.run_world`,
    `plexus.launch`, directly or in a script it runs) is `@pytest.mark.slow` (or its module is):
    the fast subset starts none."""
    bad = [f"{where}: {w}" for where, test in _fast_tests() for w in _world_starts(test)]
    assert not bad, "fast tests that start a multi-rank world (mark them slow):\n" + \
        "\n".join(bad)


def _tool_runs(test: ast.FunctionDef) -> int:
    """The training runs a test completes in its own process, as far as its code shows: calls of
    a tool's ``main`` (any name ending in ``main``) given ``--epochs`` and checked to succeed
    (``== 0``). One is a fast test's share; more are an end-to-end test (issue 58: a fast test
    ran plexus-train three times)."""
    return sum(isinstance(n, ast.Compare) and isinstance(n.left, ast.Call)
               and len(n.ops) == 1 and isinstance(n.ops[0], ast.Eq)
               and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value == 0
               and ast.unparse(n.left.func).split(".")[-1].endswith("main")
               and "'--epochs'" in ast.unparse(n.left) for n in ast.walk(test))


def test_no_fast_test_trains_end_to_end_more_than_once():
    bad = [f"{where}: {_tool_runs(test)} runs" for where, test in _fast_tests()
           if _tool_runs(test) > 1]
    assert not bad, "fast tests that train end to end more than once (mark them slow):\n" + \
        "\n".join(bad)


def test_the_run_rule_counts_completed_training_runs():
    def runs(source: str) -> int:
        return _tool_runs(ast.parse(source).body[0])

    assert runs("def test_a():\n    assert main(['--epochs', '3']) == 0\n"
                "    assert main([*base, '--epochs', '5']) == 0\n") == 2
    assert runs("def test_a():\n    assert run_main(['--epochs', '1']) == 0\n") == 1
    assert runs("def test_a():\n    assert main(['--epochs', '1', '--lr', 'x']) == 2\n") == 0
    assert runs("def test_a():\n    assert model_main(['--nodes', '9']) == 0\n") == 0


# (the rule reads test functions' own code: these samples live outside any)
STARTS_A_WORLD = ("def test_a():\n    run_world(2, fn)\n",
                  "def test_a():\n    run_world(world, fn)\n",
                  "def test_a():\n    plexus.launch(fn, g, grid='2x1x1')\n",
                  "def test_a():\n    plexus.launch(fn, g, grid=dims)\n",
                  "def test_a():\n    launch(fn, g)\n",
                  "def test_a(p):\n    p.write_text(\"plexus.launch(fn, grid='1x2x2')\")\n",
                  "def test_a(p):\n    p.write_text('run_world(4, fn)')\n",
                  "def test_a():\n    worlds.ranks(2, 'family')\n",
                  "def test_a():\n    worlds.merged(size, 'family')\n")
STARTS_NONE = ("def test_a():\n    run_world(1, fn)\n",
               "def test_a():\n    worlds.ranks(1, 'family')\n",
               "def test_a():\n    plexus.launch(fn, g, grid='1x1x1')\n",
               "def test_a(p):\n    p.write_text(\"plexus.launch(fn, grid='1x1x1')\")\n",
               "def test_a():\n    train('--grid', '2x2x2', '--dataset', 'nope')\n")


def test_the_world_rule_sees_each_way_a_test_starts_one():
    def starts(source: str) -> bool:
        return bool(_world_starts(ast.parse(source).body[0]))

    for source in STARTS_A_WORLD:
        assert starts(source), source
    for source in STARTS_NONE:
        assert not starts(source), source


# ---- the slow rule at run time (tests/slow_rule.py, watched by the conftest) -------------------
TOOLS = (["plexus-train", "--grid", "2x1x1"], [sys.executable, "benchmarks/compare.py", "HEAD"],
         [sys.executable, "-m", "plexus.train"], ["torchrun", "x.py"],
         "plexus-model --help", [Path("/venv/bin/plexus-bench"), "check"],
         [sys.executable, "-c", "from plexus.studies.cli import sweep_main; sweep_main()"],
         ["python3", "-P", "-c", "import plexus, sys"])
NOT_TOOLS = ([sys.executable, "-c", "import json"], ["git", "status"], ["find", "."], [],
             ["python3", "-c", "pass", "a"], [sys.executable, "-c", "print('plexus')"],
             [sys.executable, "-c", "import plexus_partition"])  # (the partitioner: no torch)


def test_the_run_time_slow_rule_knows_a_tool_and_a_world():
    """Every tool command counts (a ``python -c`` snippet when it imports the project), no
    other program does; one process of a
    world is allowed (``run_world(1, ...)``), two are a world."""
    for argv in TOOLS:
        assert slow_rule.tool_command(argv), argv
    for argv in NOT_TOOLS:
        assert not slow_rule.tool_command(argv), argv
    rank = "a process of a world: p"
    assert slow_rule.breaks_the_rule([rank]) == []
    assert slow_rule.breaks_the_rule([rank, rank]) == [rank, rank]
    assert slow_rule.breaks_the_rule(["a tool process: x", rank]) == ["a tool process: x"]


def test_the_run_time_watch_records_each_start():
    """The watch sees a subprocess that runs a tool (even one that then fails to start), no
    other subprocess, and every fresh interpreter `multiprocessing` starts (not a fork); nothing
    after it ends. (Each start is
    made in a watch of its own: this test's own, the conftest's, would fail it.)"""
    with slow_rule.watch() as record:
        with pytest.raises(FileNotFoundError):
            subprocess.run(["plexus-no-such-tool-58"])
        subprocess.run(["true"], check=True)
        fork = multiprocessing.get_context("fork").Process

        class Spawned(fork):  # as a spawned rank reads to the watch; forked here (no start-up)
            _start_method = "spawn"

        for kind in (fork, Spawned):  # a fork is no fresh interpreter; a spawned one is
            p = kind(target=int)
            p.start()
            p.join()
    assert len(record) == 2 and "plexus-no-such-tool-58" in record[0], record
    assert record[1].startswith("a process of a world"), record
    with slow_rule.watch() as later:  # (inside a watch of its own: this test's is the outer one)
        with pytest.raises(FileNotFoundError):
            subprocess.run(["plexus-no-such-tool-58"])
    assert len(record) == 2 and len(later) == 1


class _Worker:
    """A stand-in for xdist's worker: records the tests it is sent."""

    def __init__(self, name: str, events: list) -> None:
        self.events = events  # every worker's, in the order they happen
        self.name, self.sent, self.done, self.shutting_down = name, [], [], False
        self.gateway = type("gateway", (), {"id": name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)
        self.events.append(("sent", indices, self.name))

    def shutdown(self) -> None:
        self.shutting_down = True


class _XdistConfig:
    """What xdist's scheduler reads of a `./run test` session's config (``-n 2 --dist
    loadfile``) at the repository root."""

    rootpath = REPO
    option = type("option", (), {"loadscopereorder": True})()

    def getvalue(self, name: str):
        return {"dist": "loadfile", "tx": ["2*popen"], "numprocesses": 2}[name]


def test_the_shared_worlds_go_to_one_worker_and_every_other_file_stays_whole(request):
    """`./run test`'s scheduler (the conftest's, for ``--dist loadfile``: tests/workers.py),
    driven through a whole run of the suite's test files with two stand-in workers: every test
    of the files that declare a shared world (as their imports declare them here) sent to one
    worker, that piece of work first and alone; every other file's tests all to one worker;
    every test sent once, both workers used."""
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("xdist is off (-p no:xdist): no scheduler to drive")
    import importlib.util

    import worlds

    files = sorted(suite_files())
    # The declarations, as a whole run's collection makes them, made under throwaway module
    # names: the session's registry is put back after, or its worlds would pickle the
    # throwaway modules' functions (which no rank can import).
    saved = {size: dict(families) for size, families in worlds._declared.items()}
    try:
        for path in files:
            if "worlds.declare(" in path.read_text(encoding="utf-8"):
                spec = importlib.util.spec_from_file_location(f"_layout_{path.stem}", path)
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
        declaring = {Path(f) for f in worlds.declared_files()}
    finally:
        worlds._declared.clear()
        worlds._declared.update(saved)
    assert len(declaring) >= 5, declaring
    # a collection, by path from the root: three tests of each file, but one file that is not
    # a world's has more than all the worlds' files together (the worlds still go first)
    big = next(p for p in files if p not in declaring)
    ids = [f"{p.relative_to(REPO).as_posix()}::test_{k}" for p in files
           for k in range(3 * len(declaring) + 1 if p == big else 3)]
    sched = request.config.hook.pytest_xdist_make_scheduler(config=_XdistConfig(), log=None)
    events: list = []
    nodes = [_Worker("gw0", events), _Worker("gw1", events)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, ids)
    sched.schedule()
    first = events[0][1]  # the first tests sent
    while sched.has_pending or not sched.tests_finished:
        progressed = False
        for node in nodes:
            pending = node.sent[len(node.done):]
            # as xdist's worker: it runs the last test it holds only once it is sent another
            # (the next test's set-up is planned from it) or told to stop
            if len(pending) > 1 or pending and node.shutting_down:
                node.done.append(pending[0])
                events.append(("done", [pending[0]], node.name))
                sched.mark_test_complete(node, pending[0])
                progressed = True
        assert progressed, "the scheduler stopped with tests unsent"
    sent = {i: node.name for node in nodes for i in node.sent}
    assert sorted(i for node in nodes for i in node.sent) == list(range(len(ids)))
    worker_of = {}
    for i, test in enumerate(ids):
        piece = "worlds" if REPO / test.split("::")[0] in declaring else test.split("::")[0]
        worker_of.setdefault(piece, set()).add(sent[i])
    assert all(len(w) == 1 for w in worker_of.values()), worker_of
    world_ids = {i for i, t in enumerate(ids) if REPO / t.split("::")[0] in declaring}
    assert set(first) <= world_ids, "the worlds' piece of work did not start first"
    # and alone: no other test is sent to another worker before the last of the worlds' is done
    world_worker = sent[min(world_ids)]
    last_world_done = max(k for k, (what, got, _) in enumerate(events)
                          if what == "done" and got[0] in world_ids)
    first_other_sent = min(k for k, (what, got, who) in enumerate(events)
                           if what == "sent" and who != world_worker)
    assert last_world_done < first_other_sent, events[:4]
    assert all(node.sent for node in nodes), "a worker was never given work"
    assert len(worker_of) == len(files) - len(declaring) + 1


@pytest.mark.slow
def test_the_suite_runs_with_xdist_turned_off():
    # `./run test -p no:xdist` (the run script leaves such a command its own): the conftest's
    # xdist hook must not stop pytest when xdist's hooks are not there
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q",
                           "tests/docs/test_suite_layout.py::"
                           "test_every_test_file_sits_in_a_subject_folder_under_a_name_used_once"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr
