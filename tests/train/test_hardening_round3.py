"""Hardening, round 3 (issue 24): each numbered finding of the issue, reproduced as written, must
now end in one line (or work), never a signal, a traceback, lost data or a hang.

1 the Python API's inputs; 2 outputs on one file; 3 a diverged state on disk; 4 BatchNorm
statistics in a checkpoint; 5 resumed logs; 6-7 hostile study folders; 8 the checkpoint lock;
9 full disks, hand-edited JSON, SIGINT, a script without a ``__main__`` guard; 10 two sweeps on
one folder; 11 plexus-model's calibration and world size, --seed on resume.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import plexus_datasets
import scipy.sparse as sp

from cli_helpers import (cli_env, job_workers, read_log, session_processes, tool_here, train,
                         wait_for_epoch)
from helpers import REPO, assert_one_line

SMALL = ["--grid", "1x1x1", "--quiet", "--eval-every", "0"]
TINY = ["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3"]  # trains in ms


def run_main(args: list[str], capsys) -> tuple[int, str]:
    from plexus.train import main

    code = main(args)
    return code, capsys.readouterr().err


# ---- 1: the Python API checks what it is given as the loaders check files ------------------------
_CRAFTED = r"""
import numpy as np, scipy.sparse as sp, plexus
from plexus_datasets import DatasetError
x, y = np.ones((5, 3), np.float32), np.array([0, 1, 0, 1, 0])
def crafted(kind, end):
    m = (sp.csr_matrix if kind == "csr" else sp.csc_matrix)(np.eye(5, k=1))
    m.indptr = np.array([0, 1, 2, 3, 4, end], dtype=m.indptr.dtype)
    return m
for kind, end in (("csr", 4000000), ("csr", 50), ("csc", 4000000), ("csc", 50)):
    for call in (lambda m: plexus.Graph.from_scipy(m, x, y, train=[0, 1], val=[2], test=[3, 4]),
                 plexus.gcn_normalize):
        try:
            call(crafted(kind, end))
        except DatasetError as e:
            print("refused:", e)
"""


def test_a_crafted_sparse_matrix_is_refused_not_a_segfault():
    proc = subprocess.run([sys.executable, "-c", _CRAFTED], capture_output=True, text=True,
                          timeout=120, env=cli_env())
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -11/-6: a signal
    lines = proc.stdout.splitlines()
    assert len(lines) == 8 and all("indptr runs from 0 to" in line for line in lines), lines


def _graph(**edit):
    import plexus

    args = dict(adj=sp.csr_matrix(np.eye(5, k=1)), features=np.ones((5, 3), np.float32),
                labels=np.array([0, 1, 0, 1, 0]), train=[0, 1], val=[2], test=[3, 4])
    args.update(edit)
    return plexus.Graph.from_scipy(args.pop("adj"), args.pop("features"), args.pop("labels"),
                                   **args)


@pytest.mark.parametrize("edit, needle", [
    ({"labels": np.array([0.7, 1.9, 0, 1, 0])}, "whole numbers"),
    ({"labels": np.array([0, np.nan, 0, 1, 0])}, "NaN"),
    ({"labels": np.array([0, 2**63, 0, 1, 0], dtype=np.uint64)}, "labels range"),
    ({"labels": np.ones((5, 2))}, "labels have shape"),
    ({"features": np.array([["a"] * 3] * 5)}, "must hold numbers"),
    ({"features": np.ones((4, 3))}, "features have shape"),
    ({"features": [[1, 2], [3]]}, "not an array"),
    ({"features": np.full((5, 3), 1e300)}, "NaN/Inf"),
    ({"train": np.array([0.0, 1.0])}, "bool mask or an array of node indices"),
    ({"train": np.array([1, 0, 1, 0, 0])}, "0/1 mask"),
    ({"train": [7]}, "indices must lie in"),
    ({"num_classes": 10**15}, "logits for"),
    ({"num_classes": 1.5}, "num_classes must be a positive integer"),
    ({"directed": "yes"}, "directed must be True or False"),
    ({"adj": np.ones((5, 4))}, "square"),
])
def test_api_inputs_are_refused_in_one_line(edit, needle):
    from plexus_datasets import DatasetError

    with pytest.raises(DatasetError, match=re.escape(needle)) as caught:
        _graph(**edit)
    assert_one_line(caught)


def test_api_inputs_that_mean_what_they_say_are_taken():
    import torch

    import plexus

    g = _graph(labels=np.array([0.0, 1.0, 0.0, 1.0, -1.0]), train=np.array([0, 1]),
               test=np.array([2, 3]))
    assert g.labels.tolist() == [0, 1, 0, 1, -1] and g.labels.dtype == np.int64
    t = _graph(adj=torch.eye(5).roll(1, 1), features=torch.ones(5, 3), labels=torch.zeros(5, 1),
               train=torch.tensor([True, False, False, False, False]))
    assert t.num_edges == 10 and t.train_mask.sum() == 1

    class Data:  # PyG's shape, duck-typed
        edge_index = torch.tensor([[0, 1], [1, 2]])
        x, y = torch.ones(5, 2), torch.zeros(5, dtype=torch.long)

    assert plexus.Graph.from_pyg(Data()).num_edges == 2  # directed: some edge lacks its reverse
    Data.edge_index = torch.tensor([[0.0, 1.0], [1.0, 2.0]])
    with pytest.raises(plexus_datasets.DatasetError, match="integer array of shape"):
        plexus.Graph.from_pyg(Data())
    Data.edge_index, Data.num_nodes = torch.tensor([[0, 1], [1, 2]]), 10**12
    with pytest.raises(plexus_datasets.DatasetError, match="num_nodes is"):
        plexus.Graph.from_pyg(Data())


def test_a_graph_built_by_hand_is_checked_before_it_is_cut():
    """`distributed_model`/`cut_shard` take a `Graph` built field by field too: its arrays are
    checked (`Graph.check_structure`) before scipy or the partitioner touch them."""
    from plexus.api import cut_shard
    from plexus_partition.model.grid import GridShape
    from plexus_datasets import DatasetError
    from plexus.engine.config import ModelConfig

    good = _graph()
    cases = {"indptr": lambda g: setattr(g.adj, "indptr", np.array([0, 1, 2, 3, 4, 50],
                                                                   np.int32)),
             "features float64": lambda g: setattr(g, "features", g.features.astype(np.float64)),
             "labels float": lambda g: setattr(g, "labels", g.labels.astype(np.float32)),
             "mask int": lambda g: setattr(g, "val_mask", g.val_mask.astype(np.int8)),
             "a dense adjacency": lambda g: setattr(g, "adj", g.adj.toarray())}
    for name, edit in cases.items():
        g = _graph()
        edit(g)
        with pytest.raises(DatasetError):
            cut_shard(g, GridShape(1, 1, 1), {"x": 0, "y": 0, "z": 0}, ModelConfig())
    assert cut_shard(good, GridShape(1, 1, 1), {"x": 0, "y": 0, "z": 0}, ModelConfig())


# ---- 2: one registry of outputs ----------------------------------------------------------------
def _collisions(tmp: Path) -> dict[str, tuple[list[str], str]]:
    data = tmp / "g.npz"
    from fuzzing.samples import write_npz

    write_npz(data)
    (tmp / "real.log").write_text("")
    (tmp / "link.log").symlink_to(tmp / "real.log")
    (tmp / "hard.log").write_text("")
    os.link(tmp / "hard.log", tmp / "hard2.log")
    return {
        "log over the checkpoint": (["--checkpoint", f"{tmp}/cko", "--log-json",
                                     f"{tmp}/cko/checkpoint.pt"], "--checkpoint writes"),
        "predictions and export": (["--save-predictions", f"{tmp}/same.x", "--export",
                                    f"{tmp}/same.x"], "is the directory of --save-predictions"),
        "csv and json": (["--log-csv", f"{tmp}/same.log", "--log-json", f"{tmp}/same.log"],
                         "both are"),
        "through a symlink": (["--log-csv", f"{tmp}/link.log", "--export", f"{tmp}/real.log"],
                              "both are"),
        "a hard link": (["--log-csv", f"{tmp}/hard.log", "--export", f"{tmp}/hard2.log"],
                        "both are"),
        "the json log's .tmp": (["--log-json", f"{tmp}/a.json", "--log-csv",
                                 f"{tmp}/a.json.tmp"], "both are"),
        "the lock file": (["--checkpoint", str(tmp), "--export", f"{tmp}/checkpoint.lock"],
                          "--checkpoint writes"),
        "a file inside a file": (["--log-json", f"{tmp}/x", "--log-csv", f"{tmp}/x/y"],
                                 "to be a directory"),
        "the dataset": (["--dataset", f"npz:{data}", "--save-predictions", str(data)],
                        "would overwrite the input"),
    }


@pytest.mark.parametrize("case", [
    "log over the checkpoint", "predictions and export", "csv and json", "through a symlink",
    "a hard link", "the json log's .tmp", "the lock file", "a file inside a file",
    "the dataset"])
def test_two_outputs_on_one_file_are_one_line_before_anything_runs(case, tmp_path, capsys):
    args, needle = _collisions(tmp_path)[case]
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    code, err = run_main([*SMALL, "--epochs", "1", *args], capsys)
    assert code == 2
    assert_one_line(err, needle, prog="plexus-train")
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before  # nothing made


# ---- 3: no non-finite state on disk -----------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--lr", "inf"], "--lr must be > 0 and at most"), (["--lr", "1e38"], "--lr must be"),
    (["--lr", "nan"], "--lr must be"), (["--weight-decay", "inf"], "--weight-decay must be")])
def test_float_options_out_of_range_are_one_line(args, needle, capsys):
    code, err = run_main([*SMALL, "--epochs", "4", *args], capsys)
    assert code == 2
    assert_one_line(err, needle, prog="plexus-train")


@pytest.mark.parametrize("prog, args", [
    ("plexus-train", ["--grid", "auto", "--world-size", "999999999999", "--epochs", "1"]),
    ("plexus-model", ["--world-size", "999999999999", "--nodes", "1000", "--nnz", "5000",
                      "--features", "8", "--classes", "3"])])
def test_a_huge_world_size_answers_at_once(prog, args):
    """(Before the bound, both spent minutes factorizing the world size: a wait past 60 s fails
    here. The tool's main in this process: a number past the bounds table in a tool's own
    process is tests/core/test_bounds.py's end-to-end case.)"""
    proc = tool_here(prog, *args, timeout=60)
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "--world-size must be in [1, 1048576]", prog=prog)


def test_a_non_finite_step_is_never_saved_and_the_last_good_checkpoint_is_finite(tmp_path,
                                                                                 capsys):
    """The optimizer step of epoch 3 leaves NaN in a weight (the loss before it is finite):
    the run stops before saving that state, naming the tensor and the last good checkpoint,
    which is epoch 2's and finite."""
    from plexus.engine.config import ModelConfig
    from plexus.train import checkpoint as ckpt

    ck = tmp_path / "ck"
    code, err = run_main([*SMALL, *TINY, "--epochs", "6", "--checkpoint", str(ck),
                          "--checkpoint-every", "1", "--inject-fault", "nan:0:3"], capsys)
    assert code == 1
    assert_one_line(err, "the optimizer step of epoch 3", "W0",
                    f"last good checkpoint: {ck}/checkpoint.pt (epoch 2)", prog="plexus-train")
    payload = ckpt.load_checkpoint(ck)
    assert ckpt.saved_epoch(payload) == 2
    ckpt.check_state(payload, ModelConfig())  # finite, every tensor


# ---- 4: every buffer of a checkpoint is checked -----------------------------------------------
@pytest.fixture(scope="module")
def bn_checkpoint(tmp_path_factory) -> dict:
    """A 2-epoch Cora checkpoint of GCN+BatchNorm, with the best epoch's weights kept."""
    from plexus.train import checkpoint as ckpt
    from plexus.train import main

    import torch.distributed as dist

    if dist.is_initialized():  # left by a run that failed in this process before
        dist.destroy_process_group()
    ck = tmp_path_factory.mktemp("bn")
    assert main([*SMALL, *TINY, "--epochs", "2", "--norm", "batch", "--eval-every", "1",
                 "--export-best", "--export", str(ck / "w.pt"), "--checkpoint", str(ck)]) == 0
    return ckpt.load_checkpoint(ck)


def _stat(name: str, value):
    def edit(p):
        p["state"]["stats"][name] = value(p["state"]["stats"][name])
    return edit


BAD_BUFFERS = {
    "mean0 NaN": (_stat("mean0", lambda t: t * float("nan")), "mean0 holds NaN"),
    "var0 of shape (3,)": (_stat("var0", lambda t: t[:3]), "var0 is a torch.strided"),
    "var0 negative": (_stat("var0", lambda t: -t - 1), "var0 has negative values"),
    "var0 int64": (_stat("var0", lambda t: t.long()), "var0 is a torch.strided torch.int64"),
    "var0 missing": (lambda p: p["state"]["stats"].pop("var0"), "missing ['var0']"),
    "an extra buffer": (lambda p: p["state"]["stats"].__setitem__("mean7", p["state"]["stats"]
                                                                  ["mean0"]), "unknown ['mean7']"),
    "stats not a dict": (lambda p: p["state"].__setitem__("stats", [1]), "stats is not a dict"),
    "best weights NaN": (lambda p: p["extra"]["best_params"].__setitem__(
        "W1", p["extra"]["best_params"]["W1"] * float("nan")), "W1 holds NaN"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_BUFFERS))
def test_a_damaged_buffer_in_a_checkpoint_is_one_line(bn_checkpoint, case, tmp_path, capsys):
    import copy

    import torch

    edit, needle = BAD_BUFFERS[case]
    payload = copy.deepcopy(bn_checkpoint)
    edit(payload)
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save(payload, ck / "checkpoint.pt")
    code, err = run_main([*SMALL, *TINY, "--epochs", "4", "--norm", "batch", "--checkpoint",
                          str(ck), "--resume"], capsys)
    assert code == 2
    assert_one_line(err, needle, prog="plexus-train")


@pytest.mark.slow
def test_expected_buffers_are_the_engines_own(bn_checkpoint):
    from plexus.engine.config import ModelConfig
    from plexus.train import checkpoint as ckpt

    saved = {k: tuple(v.shape) for k, v in bn_checkpoint["state"]["stats"].items()}
    assert saved == ckpt.buffer_shapes(ModelConfig(norm="batch"), 8, 3) != {}
    assert set(bn_checkpoint["extra"]["best_params"]) == set(bn_checkpoint["state"]["params"]) \
        | set(saved)


# ---- 5: resumed runs keep their logs whole ----------------------------------------------------
def _readme_requeue_flags() -> list[str]:
    """The checkpoint and log flags of the README's SLURM requeue recipe, as written there."""
    text = (REPO / "README.md").read_text()
    line = next(l for l in text.splitlines() if "--resume auto --log-json" in l)
    flags = shlex.split(line.strip().rstrip("\\"))
    start = flags.index("--checkpoint")
    return [f.replace("$SLURM_JOB_ID", "4242") for f in flags[start:]]


def _tensorboard_steps(logdir: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), purge_orphaned_data=True)
    acc.Reload()
    return [e.step for e in acc.Scalars("loss/train")]


@pytest.mark.slow
def test_the_readme_requeue_recipe_keeps_every_log_whole(tmp_path):
    """The README's recipe, preempted by SIGKILL after epoch 3 (checkpoint at epoch 2) and run
    again: the JSON log, the CSV and TensorBoard hold epochs 1..6 once each."""
    pytest.importorskip("tensorboard")
    flags = _readme_requeue_flags()
    assert flags[:2] == ["--checkpoint", "ckpt/4242"] and "--resume" in flags
    command = ["--grid", "1x1x1", *TINY, "--epochs", "6", "--checkpoint-every", "2",
               "--eval-every", "0", *flags, "--log-csv", "logs/4242.csv", "--tensorboard", "tb"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "ckpt").mkdir()
    first = subprocess.run(["plexus-train", *command, "--inject-fault", "kill:0:3"],
                           cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    again = subprocess.run(["plexus-train", *command], cwd=tmp_path, env=cli_env(),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed from" in again.stdout and "at epoch 2" in again.stdout
    records, summary = read_log(tmp_path / "logs/4242.json")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5, 6] and summary["epochs"] == 6
    rows = (tmp_path / "logs/4242.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["epoch", "1", "2", "3", "4", "5", "6"]
    assert _tensorboard_steps(tmp_path / "tb") == [1, 2, 3, 4, 5, 6]
    assert not (tmp_path / "logs/4242.json.tmp").exists()


def test_resume_auto_appends_to_the_csv_and_json_logs(tmp_path, capsys):
    """The issue's reproduction: 3 epochs, then 6, both with --resume auto."""
    args = [*SMALL, *TINY, "--checkpoint", str(tmp_path / "ck"), "--resume", "auto", "--log-csv",
            str(tmp_path / "q.csv"), "--log-json", str(tmp_path / "q.json")]
    for epochs in ("3", "6"):
        assert run_main([*args, "--epochs", epochs], capsys)[0] == 0
    records, _ = read_log(tmp_path / "q.json")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r.split(",")[0] for r in (tmp_path / "q.csv").read_text().splitlines()] == \
        ["epoch", "1", "2", "3", "4", "5", "6"]


# ---- 6, 7, 9, 10: hostile study folders -------------------------------------------------------
SPEC = "rmat:scale=6,edge_factor=4,features=8,classes=3"


def study(tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """plexus-sweep's or plexus-report's main in its own process (the end-to-end form: its exit
    status and stderr as a user sees them)."""
    main = {"sweep": "sweep_main", "report": "report_main"}[tool]
    code = f"import sys; from plexus.studies.cli import {main}; sys.exit({main}())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=cli_env())


def study_here(tool: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """The same main called in this process (issue 58 item 5: the table of hostile folders as
    calls of the checking code, `test_a_hostile_folder_answers_the_same_in_a_process` runs a
    case of each class end to end): its return value and what it printed, as `study` gives
    them; a wait past ``timeout`` seconds (a FIFO read) fails the test instead of hanging it."""
    import contextlib
    import io

    from plexus.studies import cli

    def stuck(signum, frame):
        raise TimeoutError(f"plexus-{tool} {' '.join(args)} waited {timeout} s")

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = getattr(cli, f"{tool}_main")(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return subprocess.CompletedProcess([f"plexus-{tool}", *args], code, out.getvalue(),
                                       err.getvalue())


@pytest.fixture
def planned(tmp_path) -> tuple[Path, str]:
    """A results folder whose one run is planned (SLURM scripts written, nothing run)."""
    out = tmp_path / "out"
    res = study_here("sweep", "--dataset", SPEC, "--world-sizes", "1", "--grids", "1x1x1",
                     "--epochs", "2", "--launcher", "slurm", "--out", str(out))
    assert res.returncode == 0, res.stderr
    rid = next(iter(json.loads((out / "manifest.json").read_text())["runs"]))
    return out, rid


SWEEP_LOCAL = ["--dataset", SPEC, "--world-sizes", "1", "--grids", "1x1x1", "--epochs", "2"]


@pytest.mark.parametrize("what, needle", [
    ("out is a fifo", "is a FIFO"), ("json is a fifo", "is a FIFO"),
    ("out links out", "leads out of the results folder"),
    ("json links out", "leads out of the results folder"),
    ("json links to a fifo", "is a FIFO")])
def test_sweep_never_writes_through_links_or_waits_on_fifos(planned, tmp_path, what, needle):
    out, rid = planned
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    target = out / "runs" / f"{rid}.{'out' if what.startswith('out') else 'json'}"
    if "fifo" in what and "links" not in what:
        os.mkfifo(target)
    elif "links to a fifo" in what:  # a FIFO inside the folder
        os.mkfifo(out / "fifo")
        target.symlink_to(out / "fifo")
    else:
        target.symlink_to(victim)
    res = study_here("sweep", *SWEEP_LOCAL, "--out", str(out), timeout=60)
    assert res.returncode == 2
    assert_one_line(res.stderr, needle, prog="plexus-sweep")
    assert victim.read_text() == "keep me\n"


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.__setitem__("requests", {}), "requests: expected an array"),
    (lambda m: m["runs"].__setitem__(next(iter(m["runs"])), "x"), "expected an object"),
    (lambda m: m.pop("common"), "the field 'common' is missing"),
    (lambda m: [1, 2], "expected an object, got an array"),
])
def test_a_hand_edited_manifest_is_one_line(planned, edit, needle):
    out, _ = planned
    path = out / "manifest.json"
    doc = json.loads(path.read_text())
    edited = edit(doc)
    path.write_text(json.dumps(edited if isinstance(edited, list) else doc))
    for tool, args in (("sweep", [*SWEEP_LOCAL, "--launcher", "slurm", "--out", str(out)]),
                       ("report", [str(out)])):
        res = study_here(tool, *args)
        assert res.returncode == 2, (tool, res.stderr)
        assert_one_line(res.stderr, needle, prog=f"plexus-{tool}")


def test_a_log_line_that_is_not_an_object_is_one_line(planned):
    out, rid = planned
    (out / "runs" / f"{rid}.json").write_text("[1, 2]\n")
    res = study_here("sweep", *SWEEP_LOCAL, "--launcher", "slurm", "--out", str(out))
    assert res.returncode == 0, res.stderr  # not a complete log: the run is still to do
    res = study_here("report", str(out))
    assert res.returncode == 2
    assert_one_line(res.stderr, "line 1", "expected an object, got an array", prog="plexus-report")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, str]:
    """A results folder with one complete run (a real plexus-train run of 2 epochs)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    res = study("sweep", *SWEEP_LOCAL, "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr
    rid = next(iter(json.loads((out / "manifest.json").read_text())["runs"]))
    return out, rid


def _copy(finished, tmp_path) -> tuple[Path, Path]:
    out, rid = finished
    mine = tmp_path / "out"
    shutil.copytree(out, mine, symlinks=True)
    return mine, mine / "runs" / f"{rid}.json"


@pytest.mark.slow
@pytest.mark.parametrize("what, needle", [
    ("a fifo", "is a FIFO"), ("a link to a fifo", "is a FIFO"),
    ("Infinity", "not valid JSON"), ("graph a string", "graph: expected an object"),
    ("a list line", "expected an object, got an array"),
    ("csv to /dev/null", "is a symlink to a character device"),
    ("report dir out", "leads out of the results folder")])
def test_report_inputs_and_targets_are_one_line(finished, tmp_path, what, needle):
    mine, log = _copy(finished, tmp_path)
    text = log.read_text()
    if what == "a fifo":
        os.mkfifo(mine / "runs" / "x.json")
    elif what == "a link to a fifo":  # a FIFO inside the folder
        os.mkfifo(mine / "fifo")
        (mine / "runs" / "x.json").symlink_to(mine / "fifo")
    elif what == "Infinity":
        log.write_text(text.replace('"loss": ', '"loss": Infinity, "was": ', 1))
    elif what == "graph a string":
        lines = text.splitlines()
        summary = json.loads(lines[-1])
        summary["graph"] = "str"
        log.write_text("\n".join([*lines[:-1], json.dumps(summary)]) + "\n")
    elif what == "a list line":
        log.write_text("[1, 2]\n" + text)
    elif what == "csv to /dev/null":
        (mine / "report").mkdir(exist_ok=True)
        (mine / "report" / "runs.csv").symlink_to(os.devnull)
    else:
        shutil.rmtree(mine / "report", ignore_errors=True)
        (tmp_path / "elsewhere").mkdir()
        (mine / "report").symlink_to(tmp_path / "elsewhere")
    res = study_here("report", str(mine), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line(res.stderr, needle, prog="plexus-report")
    assert not (tmp_path / "elsewhere").exists() or not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.slow  # three processes: plexus-sweep's and plexus-report's
def test_a_hostile_folder_answers_the_same_in_a_process(planned, finished, tmp_path):
    """One case of each class above end to end (the others call the mains in this process):
    a FIFO in a planned folder's place (plexus-sweep), a hand-edited manifest (plexus-sweep)
    and a finished run's log read through a FIFO (plexus-report), each exit 2 in one line."""
    out, rid = planned
    os.mkfifo(out / "runs" / f"{rid}.json")
    res = study("sweep", *SWEEP_LOCAL, "--out", str(out), timeout=60)
    assert res.returncode == 2
    assert_one_line(res.stderr, "is a FIFO", prog="plexus-sweep")
    os.unlink(out / "runs" / f"{rid}.json")
    path = out / "manifest.json"
    path.write_text(json.dumps([1, 2]))
    res = study("sweep", *SWEEP_LOCAL, "--launcher", "slurm", "--out", str(out))
    assert res.returncode == 2
    assert_one_line(res.stderr, "expected an object, got an array", prog="plexus-sweep")
    mine, _ = _copy(finished, tmp_path / "finished")
    os.mkfifo(mine / "runs" / "x.json")
    res = study("report", str(mine), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line(res.stderr, "is a FIFO", prog="plexus-report")


def test_a_second_sweep_on_one_folder_is_refused(planned):
    from plexus.studies.folder import ResultsFolder

    out, rid = planned
    manifest = out / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["runs"][rid]["state"] = "running"  # as a sweep killed mid-run leaves it
    manifest.write_text(json.dumps(doc))
    lock = ResultsFolder(out).lock()  # another sweep, running
    try:
        res = study_here("sweep", *SWEEP_LOCAL, "--launcher", "slurm", "--out", str(out))
        assert res.returncode == 2
        assert_one_line(res.stderr, f"another plexus-sweep (pid {os.getpid()}) is "
                        "running on this results folder", prog="plexus-sweep")
    finally:
        lock.release()
    res = study_here("sweep", *SWEEP_LOCAL, "--launcher", "slurm", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(manifest.read_text())["runs"][rid]["state"] == "script written"


# ---- 8: the checkpoint lock -------------------------------------------------------------------
def test_the_lock_file_is_never_written_through_a_link_or_a_special_file(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    lock = ck / "checkpoint.lock"
    cases = [("hard link", lambda: os.link(victim, lock), "has 2 hard links"),
             ("fifo", lambda: os.mkfifo(lock), "is a FIFO"),
             ("symlink to /dev/null", lambda: lock.symlink_to(os.devnull), "is a symlink"),
             ("directory", lambda: lock.mkdir(), "is a directory")]
    for name, make, needle in cases:
        make()
        code, err = run_main([*SMALL, "--epochs", "1", "--checkpoint", str(ck)], capsys)
        assert code == 2, name
        assert_one_line(err, str(lock), needle, prog="plexus-train")
        (lock.rmdir if lock.is_dir() and not lock.is_symlink() else lock.unlink)()
    assert victim.read_text() == "victim\n"
    assert not (ck / "checkpoint.pt").exists()


# ---- 9: a full disk and other OS errors on outputs --------------------------------------------
def _limited(args: list[str], max_bytes: int, cwd: Path) -> subprocess.CompletedProcess:
    """plexus-train with every file it writes limited to ``max_bytes`` (RLIMIT_FSIZE: a write
    past it fails with EFBIG, as a full disk fails with ENOSPC)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return subprocess.run(["plexus-train", *args], cwd=cwd, env=cli_env(), capture_output=True,
                          text=True, timeout=300, preexec_fn=limit)


@pytest.mark.slow
def test_an_output_error_is_one_line_and_leaves_the_previous_checkpoint(tmp_path, capsys):
    from plexus.train import checkpoint as ckpt

    ck = tmp_path / "ck"
    assert run_main([*SMALL, *TINY, "--epochs", "2", "--checkpoint", str(ck)], capsys)[0] == 0
    before = (ck / "checkpoint.pt").read_bytes()
    assert len(before) > 2048
    proc = _limited([*SMALL, *TINY, "--epochs", "5", "--checkpoint", str(ck),
                     "--checkpoint-every", "1", "--resume", "--log-json", "log.json"], 2048,
                    tmp_path)
    assert proc.returncode == 1
    assert_one_line(proc.stderr, "cannot write the checkpoint", "File too large",
                    prog="plexus-train")
    assert (ck / "checkpoint.pt").read_bytes() == before
    assert ckpt.saved_epoch(ckpt.load_checkpoint(ck)) == 2
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint.lock", "checkpoint.pt"]
    assert not (tmp_path / "log.json").exists() and not (tmp_path / "log.json.tmp").exists()


@pytest.mark.slow
def test_csv_rows_are_never_cut_by_a_full_disk(tmp_path):
    proc = _limited([*SMALL, *TINY, "--epochs", "20", "--log-csv", "e.csv", "--log-json",
                     "e.json"], 500, tmp_path)
    assert proc.returncode == 1
    assert_one_line(proc.stderr, "cannot write the", "File too large", prog="plexus-train")
    text = (tmp_path / "e.csv").read_text()
    assert text.endswith("\n") and len(text.splitlines()) >= 2
    assert all(len(row.split(",")) == 7 for row in text.splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.csv"]  # no JSON, no .tmp


_IN_TMPFS = r"""
set -e
mount -t tmpfs -o size=400k plexus-test "$1"
cp -r "$2" "$1/ck"
cd "$1"
set +e
plexus-train --grid 1x1x1 --quiet --eval-every 0 --epochs 6 --checkpoint ck \
    --checkpoint-every 1 --resume --log-csv e.csv 2> err.txt
echo "status $?" >> err.txt
python -c "import sys; from plexus.train import checkpoint as c; print('epoch', c.saved_epoch(c.load_checkpoint('ck')))" >> err.txt
ls -A ck >> err.txt
tail -c 1 e.csv | od -c | head -1 >> err.txt
cat err.txt
"""


@pytest.mark.slow
def test_a_full_tmpfs_is_one_line_naming_the_file(tmp_path, capsys):
    """ENOSPC itself, on a 400 KiB tmpfs in a private mount namespace (skipped where
    unprivileged namespaces are not allowed): a second checkpoint does not fit beside the
    first."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unprivileged mount namespaces are not allowed here")
    mnt, ck = tmp_path / "mnt", tmp_path / "ck"
    mnt.mkdir()
    assert run_main([*SMALL, "--epochs", "2", "--checkpoint", str(ck)], capsys)[0] == 0
    (ck / "checkpoint.lock").unlink()
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           _IN_TMPFS, "sh", str(mnt), str(ck)], env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("plexus-train: error: cannot write the checkpoint"), proc.stdout
    assert "No space left on device" in lines[0] and lines[1] == "status 1", lines
    assert lines[2] == "epoch 2", lines  # the checkpoint before the disk filled, intact
    assert sorted(lines[3:5]) == ["checkpoint.lock", "checkpoint.pt"], lines
    assert "\\n" in lines[5], lines  # the CSV ends with a whole row


# ---- 9: SIGINT and scripts without a __main__ guard -------------------------------------------
def _train_2x1x1(tmpdir: Path, epochs: int) -> subprocess.Popen:
    """plexus-train on 2x1x1 in its own session, with its temporary files in ``tmpdir``."""
    tmpdir.mkdir()
    return subprocess.Popen(["plexus-train", "--grid", "2x1x1", "--epochs", str(epochs),
                             "--eval-every", "0"], env=dict(cli_env(), TMPDIR=str(tmpdir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _no_temporary_files_left(tmpdir: Path) -> bool:
    return [p.name for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.slow
def test_sigint_to_one_worker_is_one_line_naming_it(tmp_path):
    tmpdir = tmp_path / "tmp"
    proc = _train_2x1x1(tmpdir, 100000)
    try:
        wait_for_epoch(proc, 2)
        worker = job_workers(proc.pid)[-1]
        os.kill(worker, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1
    assert_one_line(err, f"was killed by signal SIGINT (pid {worker})", "worker rank",
                    prog="plexus-train")
    time.sleep(1)
    assert not [p for p in session_processes(proc.pid) if p != proc.pid]
    assert _no_temporary_files_left(tmpdir)


@pytest.mark.slow
def test_sigint_to_the_launcher_while_it_starts_is_one_line(tmp_path, delay=2.0):
    tmpdir = tmp_path / "tmp"
    proc = _train_2x1x1(tmpdir, 3)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode == 0:
        pytest.skip("the run ended before the signal (a fast machine)")
    assert proc.returncode == 130, err
    assert_one_line(err, "SIGINT", prog="plexus-train")
    time.sleep(1)
    assert not session_processes(proc.pid)
    assert _no_temporary_files_left(tmpdir)


@pytest.mark.slow  # a script that starts a world of 2 ranks
def test_launch_in_a_script_without_a_main_guard_is_one_line(tmp_path):
    script = tmp_path / "noguard.py"
    script.write_text("import plexus\n\ndef fn(grid):\n    return grid.rank\n\n"
                      "print(plexus.launch(fn, grid='2x1x1'))\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.run([sys.executable, str(script)], env=dict(cli_env(), TMPDIR=str(tmpdir)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert_one_line(proc.stderr, f"{script}:6")
    assert 'if __name__ == "__main__"' in proc.stderr
    assert list(tmpdir.iterdir()) == []


# ---- 11: plexus-model's inputs, --seed on resume ----------------------------------------------
SIZES = ["--nodes", "1000", "--nnz", "5000", "--features", "8", "--classes", "3"]


@pytest.mark.parametrize("content, needle", [
    ({"spmm_flop": 1e9, "gemm_flops": 1e10}, "unknown key 'spmm_flop'"),
    ({"gemm_flops": 1e10}, "spmm_flops is missing"),
    ({"spmm_flops": 1e9, "gemm_flops": 1e10, "alpha": 1e-5}, "without its partner"),
    ('{"spmm_flops": Infinity, "gemm_flops": 1}', "not valid JSON"),
    ([1, 2], "must be a JSON object"),
    ({"spmm_flops": 1e9, "gemm_flops": 1e10, "worlds": {"4": {"alpha": 1e-5}}},
     "worlds.4 must be a world size >= 2 (digits) with both alpha and beta")])
def test_a_malformed_calibration_is_one_line_not_the_defaults(content, needle, tmp_path,
                                                             capsys):
    from plexus.perfmodel.cli import model_main

    cal = tmp_path / "cal.json"
    cal.write_text(content if isinstance(content, str) else json.dumps(content))
    assert model_main(["--world-size", "4", *SIZES, "--calibration", str(cal)]) == 2
    assert_one_line(capsys.readouterr().err, needle, prog="plexus-model")


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_a_calibration_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "cal.json")
    proc = train("--world-size", "4", *SIZES, "--calibration", str(tmp_path / "cal.json"),
                 launcher=("plexus-model",), timeout=60)
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "not a regular file", prog="plexus-model")


def test_the_largest_world_size_is_ranked_at_once(capsys):
    from plexus.perfmodel.cli import model_main

    start = time.perf_counter()
    assert model_main(["--world-size", str(1 << 20), *SIZES, "--top", "1"]) == 0
    assert time.perf_counter() - start < 30


def test_changing_the_seed_on_resume_is_refused(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert run_main([*SMALL, *TINY, "--epochs", "1", "--checkpoint", str(ck)], capsys)[0] == 0
    code, err = run_main([*SMALL, *TINY, "--epochs", "2", "--checkpoint", str(ck), "--resume",
                          "--seed", "3"], capsys)
    assert code == 2
    assert_one_line(err, "--seed 3 but", "trained with --seed 0", prog="plexus-train")
