"""Issue 39 (a PyG user's third contact), items 2, 4, 8 and 9: threads as the user says them,
start-up without the set-up script, the cache's size cap and its in-use locks, one default order
from plexus-partition to plexus-train, API errors in API terms, ogbn-proteins' tasks scored in
one vectorised pass equal to OGB's Evaluator. (The sweep report's warnings and statistics are
tested on the shared study of tests/studies/test_studies.py; bench check's memory per check in
tests/bench/test_bench_check.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli_env, launched, read_log
from helpers import REPO, assert_one_line


# ---- threads --------------------------------------------------------------------------------
def test_threads_per_rank_come_from_the_flag_then_omp_then_a_share_of_the_cores():
    from plexus_partition.launch.env import LaunchError, threads_per_worker

    assert threads_per_worker(1, cores=8, environ={}) == 8  # nobody said: the cores shared
    assert threads_per_worker(4, cores=8, environ={}) == 2
    assert threads_per_worker(1, cores=8, environ={"OMP_NUM_THREADS": "1"}) == 1
    assert threads_per_worker(1, cores=8, environ={"OMP_NUM_THREADS": "3,2"}) == 3
    assert threads_per_worker(1, cores=8, requested=2, environ={"OMP_NUM_THREADS": "1"}) == 2
    for bad in ("0", "x", "-1"):
        with pytest.raises(LaunchError, match="OMP_NUM_THREADS"):
            threads_per_worker(1, cores=8, environ={"OMP_NUM_THREADS": bad})


@pytest.mark.parametrize("args, env, needle", [
    (["--threads", "0"], {}, "--threads must be >= 1, got 0"),
    ([], {"OMP_NUM_THREADS": "many"}, "OMP_NUM_THREADS='many' is not a positive integer"),
])
def test_bad_threads_are_one_line_and_status_2(args, env, needle, monkeypatch, capsys):
    from plexus.train.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["--grid", "1x1x1", "--epochs", "1", *args]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, needle)


def test_sweep_and_partition_refuse_zero_threads(capsys):
    from plexus_partition.cli import main as partition
    from plexus.studies.cli import sweep_main

    assert sweep_main(["--dataset", "cora", "--out", "unused", "--threads", "0"]) == 2
    assert partition(["--dataset", "cora", "--grid", "1x1x1", "--layers", "2", "--stats-only",
                      "--threads", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.endswith("--threads must be >= 1, got 0") for line in err] == [True, True]


def run_as_setup_script(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                        setup_s: float = 0.0) -> tuple[subprocess.CompletedProcess, float]:
    """plexus-train exec'd by a shell that first spent ``setup_s`` seconds, as ./run does (its
    install) and says so in PLEXUS_SETUP_DONE; returns the process and the seconds it took."""
    script = (f"sleep {setup_s}; export PLEXUS_SETUP_DONE=$EPOCHREALTIME; "
              f'exec "{sys.executable}" -m plexus.train "$@"')
    start = time.time()
    proc = subprocess.run(["bash", "-c", script, "bash", *args], env={**cli_env(), **(env or {})},
                          capture_output=True, text=True, timeout=300)
    return proc, time.time() - start


@pytest.mark.slow
def test_omp_num_threads_is_used_and_shown_and_startup_leaves_the_setup_out(tmp_path):
    log = tmp_path / "run.json"
    proc, elapsed = run_as_setup_script(
        tmp_path, "--grid", "1x1x1", "--epochs", "1", "--log-json", str(log),
        env={"OMP_NUM_THREADS": "1"}, setup_s=2.0)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "(1 rank, cpu, 1 thread per rank, OMP_NUM_THREADS=1)" in first, first
    _, summary = read_log(log)
    assert summary["environment"]["threads_per_rank"] == 1
    # the 2 s before the command are named, and not in the run's wall time
    assert summary["setup_script_s"] >= 1.9
    assert summary["wall_time"]["total_s"] <= elapsed - 1.9 + 0.1
    assert "after ./run's set-up (" in proc.stdout and "not counted" in proc.stdout


@pytest.mark.slow
def test_threads_flag_wins_over_omp_num_threads(tmp_path):
    log = tmp_path / "run.json"
    proc, _ = run_as_setup_script(tmp_path, "--grid", "1x1x1", "--epochs", "1", "--threads", "2",
                                  "--log-json", str(log), env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "2 threads per rank, --threads" in proc.stdout.splitlines()[0]
    _, summary = read_log(log)
    assert summary["environment"]["threads_per_rank"] == 2


def test_command_start_counts_from_the_setup_script_only_for_the_process_it_started():
    from plexus.core.timing import SETUP_DONE_ENV, command_start_time, process_start_time

    began = process_start_time()  # (from /proc: 10 ms steps, read anew each call)
    assert began is not None
    # this process started before the moment: as if ./run had exec'd it after its set-up
    done = began + 0.5
    for text in (f"{done:.6f}", f"{done:.6f}".replace(".", ",")):  # a locale's decimal comma
        start, left_out = command_start_time({SETUP_DONE_ENV: text})
        assert start == pytest.approx(done, abs=1e-6) and left_out == pytest.approx(0.5, abs=0.05)
    # a moment before this process began: a child of the command (a sweep's run), not ./run's
    for environ in ({SETUP_DONE_ENV: f"{began - 5:.6f}"}, {SETUP_DONE_ENV: "soon"}, {}):
        start, left_out = command_start_time(environ)
        assert start == pytest.approx(began, abs=0.05) and left_out == 0.0


# ---- the cache: cap, LRU eviction, in-use locks, list and clean -----------------------------
def tiny_store(root: Path, name: str, seed: int) -> Path:
    from plexus_datasets import rmat_graph
    from plexus_partition.store import write_store

    path = root / name
    write_store(rmat_graph(6, 4, 8, 3, seed=seed), path, {"x": 1, "y": 1, "z": 2}, 2, "agg",
                "double", 0)
    return path


@pytest.fixture
def cache_of_three(tmp_path) -> tuple[Path, list[Path]]:
    """A cache directory of three stores, used one hour apart (oldest first)."""
    from plexus.train.cacheuse import hold_store

    root = tmp_path / "cache"
    stores = [tiny_store(root, f"g{i}-1x1x2-{i}", i) for i in range(3)]
    for i, store in enumerate(stores):
        hold_store(root, store).release()  # a run used it ...
        when = time.time() - 3600 * (3 - i)  # ... this long ago
        os.utime(root / "locks" / f"{store.name}.use", (when, when))
    return root, stores


def test_eviction_goes_least_recently_used_first_and_never_takes_a_store_in_use(cache_of_three):
    from plexus.train.cacheuse import entries, evict, hold_store

    root, (old, middle, new) = cache_of_three
    found = entries(root)
    assert [e.path for e in found] == [old, middle, new] and not any(e.in_use for e in found)
    held = hold_store(root, old)  # a run holds the oldest: marked used now, and kept
    assert [e.path for e in entries(root)] == [middle, new, old]
    assert [e.in_use for e in entries(root)] == [False, False, True]
    one = found[0].bytes
    gone = evict(root, max_bytes=2 * one + one // 2)  # room for two: the least recent goes
    assert [e.path for e in gone] == [middle] and not middle.exists()
    gone = evict(root, max_bytes=0)  # everything no run holds
    assert [e.path for e in gone] == [new] and old.exists()
    held.release()
    assert [e.path for e in evict(root, max_bytes=0)] == [old] and not old.exists()
    assert entries(root) == [] and not [p for p in root.iterdir() if p.name.startswith(".")]


def test_cache_list_and_clean_on_the_command_line(cache_of_three, capsys):
    from plexus.train.cacheuse import hold_store
    from plexus.train.cli import main

    root, (old, middle, new) = cache_of_three
    held = hold_store(root, middle)
    assert main(["--cache", str(root), "--cache-list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [str(p) in line for line, p in zip(lines, (middle, new, old))] == [True] * 3
    assert "IN USE" in lines[0] and "IN USE" not in lines[1] + lines[2]
    assert lines[-1].startswith(f"plexus-train: cache {root}: 3 entries")
    assert main(["--cache", str(root), "--cache-clean"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 entries" in out and "1 entry" in out.splitlines()[-1]
    assert middle.exists() and not old.exists() and not new.exists()
    held.release()
    assert main(["--cache", str(root), "--cache-max-gb", "-1", "--cache-list"]) == 2
    assert "--cache-max-gb must be a number of GiB > 0" in capsys.readouterr().err


def test_a_run_holds_its_store_and_the_cap_evicts_the_others(tmp_path, monkeypatch):
    from plexus.train.cache import Cache, cached_options
    from plexus.train.cacheuse import MAX_GB_ENV, entries, evict
    from plexus.train.cli import build_parser

    root = tmp_path / "cache"
    other = tiny_store(root, "other-1x1x2-0", 0)
    os.utime(other, (time.time() - 60, time.time() - 60))
    monkeypatch.setenv(MAX_GB_ENV, "1e-6")  # a cap smaller than any store
    opts = launched(build_parser().parse_args(
        ["--grid", "1x1x2", "--cache", str(root), "--epochs", "1"]))
    assert opts.cache_max_bytes == int(1e-6 * 2**30)
    said: list[str] = []
    new, store = cached_options(opts, Cache(root, said.append), 2)
    assert store.hold is not None and new.shards == store.path
    assert not other.exists()  # evicted for the cap once the run had its own store
    assert any("removed 1 least recently used entry" in s for s in said), said
    assert evict(root, 0) == [] and Path(store.path).exists()  # held: never evicted
    store.hold.release()
    assert [e.path for e in evict(root, 0)] == [Path(store.path)]
    assert entries(root) == []


# ---- one default order from partition to training -------------------------------------------
@pytest.mark.parametrize("dataset, extra", [("cora", []), ("cora", ["--hidden", "2000"]),
                                            ("rmat:scale=7,features=4", ["--hidden", "8"])])
def test_partition_cuts_the_orders_plexus_train_resolves_by_default(dataset, extra, tmp_path):
    from plexus_datasets import load_dataset
    from plexus_partition import read_manifest
    from plexus_partition.cli import main as partition
    from plexus.train.cli import build_parser

    out = tmp_path / "store"
    assert partition(["--dataset", dataset, "--grid", "1x1x2", "--layers", "2", "--out", str(out),
                      *extra]) == 0
    opts = launched(build_parser().parse_args(
        ["--grid", "1x1x2", "--dataset", dataset, "--no-cache", *extra]))
    g = load_dataset(dataset)
    want = opts.model.orders(g.num_features, g.num_classes)
    assert read_manifest(out)["orders"] == want
    if extra == ["--hidden", "2000"]:  # a widening first layer: auto aggregates it first
        assert want == ["agg", "combine"]
    # and plexus-train --shards takes the store's orders as its own default
    shards = launched(build_parser().parse_args(["--shards", str(out), *extra]))
    assert shards.model.orders(g.num_features, g.num_classes) == want


def test_partition_auto_orders_cut_gin_stores_as_plexus_train_resolves_them(tmp_path, capsys):
    from plexus_datasets import load_dataset
    from plexus_partition import read_manifest
    from plexus_partition.cli import main as partition
    from plexus.train.cli import build_parser

    out = tmp_path / "gin"
    # --layers counts GNN layers, as plexus-train's: two GIN layers are four stages (agg, dense)
    assert partition(["--dataset", "cora", "--grid", "1x1x1", "--layers", "2", "--model",
                      "gin", "--out", str(out)]) == 0
    assert (read_manifest(out)["num_stages"], read_manifest(out)["gnn_layers"]) == (4, 2)
    g = load_dataset("cora")
    want = launched(build_parser().parse_args(
        ["--grid", "1x1x1", "--dataset", "cora", "--model", "gin", "--no-cache"])
    ).model.orders(g.num_features, g.num_classes)
    assert read_manifest(out)["orders"] == want and "dense" in want


# ---- API errors in API terms ----------------------------------------------------------------
@pytest.mark.parametrize("spec", ["ogbn-arxiv", "citeseer"])
def test_missing_root_is_said_in_api_terms_and_in_flag_terms(spec, capsys):
    import plexus
    from plexus_datasets import DatasetError
    from plexus.train.cli import main

    with pytest.raises(DatasetError) as e:
        plexus.load_dataset(spec)
    assert "root=DIR" in str(e.value) and "--root" not in str(e.value)
    assert main(["--dataset", spec, "--grid", "1x1x1"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--root DIR")
    assert "root=DIR" not in err


# ---- OGB's ROC-AUC in one vectorised pass ---------------------------------------------------
def test_block_rocauc_equals_ogbs_evaluator_task_by_task_and_on_average():
    from ogb.nodeproppred import Evaluator
    from sklearn.metrics import roc_auc_score

    from plexus.engine.rocauc import block_rocauc, mean_rocauc

    rng = np.random.default_rng(3)
    n, tasks = 600, 112
    y = rng.integers(0, 2, (n, tasks))
    scores = np.round(rng.standard_normal((n, tasks)) + 0.7 * y, 1)  # many ties
    y[rng.random((n, tasks)) < 0.2] = -1  # missing labels
    y[:, 5] = np.where(y[:, 5] < 0, -1, 1)  # a task without a negative: left out, as ogb does
    per_task = block_rocauc(y, scores)
    assert per_task.shape == (tasks,) and np.isnan(per_task[5])
    for t in range(tasks):
        keep = y[:, t] >= 0
        if t != 5:
            assert per_task[t] == pytest.approx(roc_auc_score(y[keep, t], scores[keep, t]),
                                                abs=1e-12)
    truth = np.where(y < 0, np.nan, y).astype(np.float64)
    official = Evaluator("ogbn-proteins").eval({"y_true": truth, "y_pred": scores})["rocauc"]
    assert mean_rocauc(per_task) == pytest.approx(official, abs=1e-12)


# ---- plexus-model --grid, as plexus-train takes it ------------------------------------------
def test_plexus_model_takes_grid_auto_and_one_grid_without_data(capsys, monkeypatch):
    from plexus.perfmodel.cli import model_main

    monkeypatch.delenv("PLEXUS_CALIBRATION", raising=False)
    assert model_main(["--dataset", "ogbn-papers100M", "--grid", "auto", "--world-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "published sizes, no data read" in out and "uncalibrated (GPU defaults)" in out
    assert "out of core" in out and "world size 8: 10 grids" in out, out
    assert model_main(["--dataset", "ogbn-papers100M", "--grid", "auto"]) == 0  # this machine
    assert "world size " in capsys.readouterr().out
    assert model_main(["--dataset", "ogbn-papers100M", "--grid", "2x2x2"]) == 0
    rows = [l for l in capsys.readouterr().out.splitlines() if "2x2x2 " in l]
    assert len(rows) == 1 and "grid 2x2x2, rank" not in rows[0], rows
    for bad, said in ((["--grid", "2x2x2", "--world-size", "4"], "is a world of 8"),
                      (["--grid", "2x2"], "bad grid")):
        assert model_main(["--dataset", "ogbn-papers100M", *bad]) == 2
        err = capsys.readouterr().err
        assert_one_line(err, said)


# ---- ./run keeps the caller's directory -------------------------------------------------------
def test_run_script_runs_commands_where_they_were_typed(tmp_path):
    repo = REPO
    if not (repo / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: ./run would set up a new environment")
    proc = subprocess.run([str(repo / "run"), "python", "-c", "import os; print(os.getcwd())"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # `cd /tmp; ~/plexus/run plexus-train --save-predictions res` writes /tmp/res, not ~/plexus/res
    assert Path(proc.stdout.strip()).resolve() == tmp_path.resolve(), proc.stdout
