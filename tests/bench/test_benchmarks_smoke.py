"""Smoke tests of the benchmark scripts: each runs end to end on a tiny graph (``--smoke``) and
writes its outputs. No timing assertions: the figures depend on the machine and its load."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow  # worlds or end-to-end runs: left out of the fast subset
BENCH = REPO / "benchmarks"


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
    # a thin user of plexus-sweep + plexus-report: one plexus-train run per grid
    run_script("strong_scaling.py", tmp_path)
    rows = read_csv(tmp_path / "report" / "runs.csv")
    assert [r["grid"] for r in rows] == ["1x1x1", "2x1x1"]
    assert all(r["comm_bytes_match_model"] == "True" for r in rows)  # ledger == perf model
    assert all(float(r["loss_diff_vs_1x1x1"]) < 1e-4 for r in rows)
    assert all(r["timed_epochs"] == "2" for r in rows)  # --warmup 1 + --epochs 2
    assert (tmp_path / "manifest.json").exists()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "report" / "strong_scaling.png").stat().st_size > 0


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


def test_gpu_model_smoke(tmp_path: Path) -> None:
    """benchmarks/gpu_model.py (what a lent GPU runs) end to end on this machine: calibrates,
    predicts and measures every kind at three sizes; each row's ratio is its two figures'."""
    out = run_script("gpu_model.py", tmp_path, "--dtypes", "fp32")
    rows = json.loads((tmp_path / "gpu_model.json").read_text())["rows"]
    assert {(r["kind"], r["scale"]) for r in rows} == {
        (k, s) for k in ("gcn", "sage", "gat") for s in (8, 9, 10)}
    assert all(r["ratio"] == r["predicted_s"] / r["measured_s"] for r in rows)
    assert f"calibration: calibration {tmp_path / 'calibration.json'}" in out
    assert "cases within [0.75, 1.33]" in out


def test_common_helpers(tmp_path: Path) -> None:
    from plexus_partition.model.grid import GridShape
    from plexus.bench.output import ranks_of, spearman, write_csv, write_json

    def parse_grids(text: str) -> list[tuple[int, int, int]]:  # as the benchmarks' --grids
        return [GridShape.parse(t).dims for t in text.split(",") if t.strip()]

    def rank_coords(rank: int, dims: tuple[int, int, int]) -> dict[str, int]:
        return GridShape.of(dims).coords(rank)

    path = write_csv(tmp_path / "sub" / "t.csv", [{"a": 1, "b": 0.5}, {"a": 2, "c": [1, 2]}])
    assert read_csv(path) == [{"a": "1", "b": "0.5", "c": ""}, {"a": "2", "b": "", "c": "1 2"}]
    assert json.loads(write_json(tmp_path / "t.json", {"x": 1}).read_text()) == {"x": 1}
    assert not list(tmp_path.glob("**/.*.tmp"))  # no temp files left behind
    assert parse_grids("1x1x1, 2x1x2") == [(1, 1, 1), (2, 1, 2)]
    # rank = (x·Y + y)·Z + z, as plexus_partition.model.grid
    assert [tuple(rank_coords(r, (2, 2, 2)).values()) for r in (0, 1, 2, 5)] == \
        [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 1)]
    assert ranks_of([3.0, 1.0, 2.0, 2.0]) == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals that overlap at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:  # at equal times an end (-1) sorts before a start
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("slots", [1, 2])
def test_turn_epochs_compute_at_most_slots_ranks_at_a_time(slots: int) -> None:
    """The work-efficiency epochs: at most ``slots`` ranks are inside an SpMM/GEMM region at
    any instant (4 ranks on this machine's 2 cores overlap more otherwise), every rank measures
    every region, and the ranks still train together."""
    from plexus.engine.config import ModelConfig
    from plexus.testing.gridrun import Job, RunOptions, load_bundle, run_jobs

    bundle = load_bundle("rmat:scale=9,edge_factor=4,features=16,classes=4,seed=0")
    opts = RunOptions(warmup=0, epochs=0, turn_epochs=2, turn_slots=slots, keep_spans=True)
    run, = run_jobs(bundle, [Job((2, 1, 2), ModelConfig(num_layers=3, hidden=16))], opts,
                    timeout=300)
    spans = [(s, e) for r in run.ranks for ep in r["turn_epochs"] for s, e in ep["spans"]]
    counts = {len(ep["spans"]) for r in run.ranks for ep in r["turn_epochs"]}
    assert len(counts) == 1 and counts.pop() >= 6  # 3 layers, forward and backward
    assert most_at_once(spans) <= slots
    assert all(len(r["turn_epochs"]) == 2 and not r["epochs"] for r in run.ranks)
    assert run.stat("compute", cpu=True, turns=True)[0] > 0
    losses = run.ranks[0]["losses"]
    assert all(r["losses"] == losses for r in run.ranks)


def test_most_at_once() -> None:
    assert most_at_once([(0, 1), (1, 2), (2, 3)]) == 1
    assert most_at_once([(0, 2), (1, 3), (1.5, 4), (3.5, 5)]) == 3


def test_work_efficiency_smoke(tmp_path: Path) -> None:
    out = run_script("work_efficiency.py", tmp_path)
    assert "fake process group" in out and "G=2:" in out and "G=4:" in out
    rows = read_csv(tmp_path / "work_efficiency.csv")
    assert [(r["grid"], r["world"]) for r in rows] == [("2x1x1", "2"), ("1x2x2", "4")]
    for r in rows:  # every rank's SpMMs and GEMMs ran and were timed
        assert float(r["sum_spmm_s"]) > 0 and float(r["sum_gemm_s"]) > 0
        total = float(r["sum_spmm_s"]) + float(r["sum_gemm_s"])
        base = float(r["base_spmm_s"]) + float(r["base_gemm_s"])
        assert float(r["work_efficiency"]) == pytest.approx(total / base, rel=1e-4)


def test_fuzz_inputs_smoke(tmp_path: Path) -> None:
    out = run_script("fuzz_inputs.py", tmp_path, "--kinds", "npz,planetoid")
    assert "unacceptable outcomes: 0" in out
    doc = json.loads((tmp_path / "fuzz_inputs.json").read_text())
    assert sum(doc["counts"]["npz"].values()) == 5 and doc["bad"] == []


def test_fuzz_stores_smoke(tmp_path: Path) -> None:
    out = run_script("fuzz_stores.py", tmp_path, "--kinds", "outputs")
    assert "unacceptable outcomes: 0; cases over 1024 MiB of peak RSS: 0" in out
    doc = json.loads((tmp_path / "fuzz_stores.json").read_text())
    assert sum(doc["summary"]["outputs"]["outcomes"].values()) == 5 and doc["bad"] == []


def test_cache_setup_smoke(tmp_path: Path) -> None:
    out = run_script("cache_setup.py", tmp_path)
    assert "built the shard store" in out and "reusing the cached shard store" in out
    runs = json.loads((tmp_path / "cache_setup.json").read_text())["runs"]
    assert [r["built"] for r in runs] == [True, False] and runs[0]["store"] == runs[1]["store"]
    assert all(len(r["peak_rss"]) == 2 for r in runs)


def test_memory_smoke(tmp_path: Path) -> None:
    out = run_script("memory.py", tmp_path, "--grids", "1x1x1,2x1x1", "--skip-pyg")
    assert "model/meas" in out
    doc = json.loads((tmp_path / "memory.json").read_text())
    for grid, world in (("1x1x1", 1), ("2x1x1", 2)):
        run = doc["plexus"][grid]
        assert run["ok"] and len(run["peak_rss"]) == world and run["predicted"] > 0


def test_proteins_smoke(tmp_path: Path) -> None:
    out = run_script("proteins.py", tmp_path, "--grids", "1x1x1", "--workdir",
                     str(tmp_path / "work"))
    assert "PyG GCNConv adj_t" in out and "model/meas" in out
    doc = json.loads((tmp_path / "proteins.json").read_text())
    assert doc["pyg"]["ok"] and doc["plexus"]["1x1x1"]["ok"]
    assert doc["plexus"]["1x1x1"]["predicted"] > 0


def test_memory_smoke_with_store(tmp_path: Path) -> None:
    out = run_script("memory.py", tmp_path, "--grids", "2x1x1", "--skip-pyg", "--store")
    assert "cut beforehand by plexus-partition" in out
    assert json.loads((tmp_path / "memory.json").read_text())["plexus"]["2x1x1"]["ok"]


def test_spmm_epoch_smoke(tmp_path: Path) -> None:
    out = run_script("spmm_epoch.py", tmp_path)
    for engine in ("before", "+locality", "+auto", "after"):
        assert engine in out
    assert "largest loss difference" in out and (tmp_path / "spmm_epoch.txt").exists()


def test_precision_smoke(tmp_path: Path) -> None:
    out = run_script("precision.py", tmp_path)
    assert "bf16 - fp32 mean test accuracy" in out and "bf16 recompute" in out
    doc = json.loads((tmp_path / "precision.json").read_text())
    assert set(doc["cora"]) == {"fp32", "bf16"} and all(r["ok"] for r in doc["rmat"]["runs"])
    assert (tmp_path / "precision.txt").exists()


def test_partition_stream_smoke(tmp_path: Path) -> None:
    out = run_script("partition_stream.py", tmp_path, "--repeats", "1")
    assert "peak RSS <= 3 GiB" in out and "--jobs 2 speed-up" in out
    doc = json.loads((tmp_path / "partition_stream.json").read_text())
    assert [r["scale"] for r in doc["runs"]] == [10, 11] and doc["runs"][0]["nnz"] > 0
    assert (tmp_path / "partition_stream.txt").exists()


def test_gpu_smoke(tmp_path: Path) -> None:
    """The GPU benchmark end to end on a CPU: every case and variant, launches counted as ATen
    operators (the launches a GPU would make), well under the 1,000 the GPU issue allows; its
    results re-priced by the memory model."""
    out = run_script("gpu.py", tmp_path)
    doc = json.loads((tmp_path / "gpu.json").read_text())
    variants = {(r["case"], r["variant"]) for r in doc["rows"]}
    assert {("gcn", "pyg-gcnconv-adj_t"), ("gcn", "plexus-fp32"), ("gcn", "plexus-bf16"),
            ("gat", "pyg-gatconv"), ("gat", "plexus-fp32"), ("gat", "plexus-bf16")} <= variants
    launches = {r["variant"]: r["launches"] for r in doc["rows"] if r["case"] == "launches"}
    assert set(launches) == {"plexus-gcn-fp32", "plexus-gat-fp32"}
    assert all(0 < n < 1000 for n in launches.values())
    assert "ratios" in out
    assert subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--reprice",
                           str(REPO / "benchmarks/results/gpu.txt")], capture_output=True,
                          text=True, timeout=120, cwd=REPO).stdout.count("re-priced") == 5


def test_nn_checks_smoke(tmp_path: Path) -> None:
    out = run_script("nn_checks.py", tmp_path)
    assert "checked / unchecked" in out and (tmp_path / "nn_checks.txt").read_text() == out
    losses = {line.split()[0]: line.split()[-1] for line in out.splitlines() if "loss" in line}
    assert losses["checked"] == losses["unchecked"]  # the same maths, with and without checks
