"""Smoke tests of the benchmark scripts: each runs end to end on a tiny graph (``--smoke``) and
writes its outputs. No timing assertions: the figures depend on the machine and its load."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(REPO))


def run_script(name: str, out: Path, *extra: str) -> str:
    """Run ``benchmarks/<name> --smoke --out OUT``; return its stdout, fail with its output."""
    proc = subprocess.run([sys.executable, str(BENCH / name), "--smoke", "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_baseline_smoke(tmp_path: Path) -> None:
    out = run_script("baseline.py", tmp_path)
    assert "plexus-torch-agg" in out and "plexus-scipy-auto" in out
    doc = json.loads((tmp_path / "baseline.json").read_text())
    for variant in ("serial", "plexus-torch-agg", "plexus-torch-auto", "plexus-scipy-agg",
                    "plexus-scipy-auto"):
        assert len(doc["epoch_times"][variant]) == 2
    assert (tmp_path / "baseline.txt").exists()


def test_spmm_backends_smoke(tmp_path: Path) -> None:
    run_script("spmm_backends.py", tmp_path)
    rows = read_csv(tmp_path / "spmm_backends.csv")
    backends = {r["backend"] for r in rows}
    assert {"torch", "scipy"} <= backends
    assert {r["op"] for r in rows} == {"mm", "tmm"}
    assert all(float(r["max_abs_diff_vs_scipy"]) < 1e-4 for r in rows)  # backends agree


def test_strong_scaling_smoke(tmp_path: Path) -> None:
    run_script("strong_scaling.py", tmp_path)
    rows = read_csv(tmp_path / "strong_scaling.csv")
    assert [r["grid"] for r in rows] == ["1x1x1", "2x1x1"]
    assert all(r["volumes_equal"] == "True" for r in rows)  # ledger == perf model
    assert all(float(r["max_loss_diff_vs_1x1x1"]) < 1e-4 for r in rows)
    for name in ("strong_scaling.json", "strong_scaling.txt"):
        assert (tmp_path / name).exists()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "strong_scaling.png").stat().st_size > 0


def test_model_vs_measured_smoke(tmp_path: Path) -> None:
    out = run_script("model_vs_measured.py", tmp_path)
    assert "Spearman" in out and "model's choice" in out
    rows = read_csv(tmp_path / "model_vs_measured.csv")
    assert sorted(r["grid"] for r in rows) == ["1x1x2", "1x2x1", "2x1x1"]
    assert sorted(int(r["model_rank"]) for r in rows) == [1, 2, 3]


def test_model_vs_measured_reads_calibration(tmp_path: Path) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"spmm_flops": 1e9, "gemm_flops": 1e10, "alpha": 1e-4,
                               "beta": 1e-9}))
    out = run_script("model_vs_measured.py", tmp_path, "--calibration", str(cal))
    assert str(cal) in out


def test_common_helpers(tmp_path: Path) -> None:
    from benchmarks.common import parse_grids, rank_coords, write_csv, write_json
    from benchmarks.model_vs_measured import ranks_of, spearman

    path = write_csv(tmp_path / "sub" / "t.csv", [{"a": 1, "b": 0.5}, {"a": 2, "c": [1, 2]}])
    assert read_csv(path) == [{"a": "1", "b": "0.5", "c": ""}, {"a": "2", "b": "", "c": "1 2"}]
    assert json.loads(write_json(tmp_path / "t.json", {"x": 1}).read_text()) == {"x": 1}
    assert not list(tmp_path.glob("**/.*.tmp"))  # no temp files left behind
    assert parse_grids("1x1x1, 2x1x2") == [(1, 1, 1), (2, 1, 2)]
    # rank = (x·Y + y)·Z + z, as plexus.grid
    assert [tuple(rank_coords(r, (2, 2, 2)).values()) for r in (0, 1, 2, 5)] == \
        [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 1)]
    assert ranks_of([3.0, 1.0, 2.0, 2.0]) == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_turn_epochs_compute_one_rank_at_a_time() -> None:
    """The work-efficiency epochs: no two ranks' SpMM/GEMM regions overlap in time (4 ranks on
    this machine's 2 cores overlap them otherwise), and the ranks still train together."""
    from benchmarks.common import Job, RunOptions, SMOKE_SPEC, load_bundle, run_jobs
    from plexus.config import ModelConfig

    bundle = load_bundle(SMOKE_SPEC)
    opts = RunOptions(warmup=0, epochs=0, turn_epochs=2, keep_spans=True)
    cfg = ModelConfig(num_layers=3, hidden=16)
    run, = run_jobs(bundle, [Job((2, 1, 2), cfg)], opts, timeout=300)
    spans = sorted((s, e, r["rank"]) for r in run.ranks for ep in r["turn_epochs"]
                   for s, e in ep["spans"])
    assert len(spans) >= 4 * 2 * 6  # 4 ranks, 2 epochs, >= 6 regions (3 layers, fwd + bwd)
    for (s0, e0, r0), (s1, e1, r1) in zip(spans, spans[1:]):
        assert e0 <= s1, f"rank {r0} and rank {r1} computed at the same time"
    assert all(len(r["turn_epochs"]) == 2 and not r["epochs"] for r in run.ranks)
    assert run.stat("compute", cpu=True, turns=True)[0] > 0
    losses = run.ranks[0]["losses"]
    assert all(r["losses"] == losses for r in run.ranks)
