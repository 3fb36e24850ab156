"""plexus-sweep and plexus-report end to end on a tiny R-MAT graph: a local sweep of four grids
and the model's pick, a weak-scaling series under torchrun in the same folder, the report's CSV
and figures, resuming (completed runs are skipped), and SLURM scripts (checked with ``bash -n``
and run against stand-ins for srun/scontrol)."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import tool_here
from helpers import assert_one_line
from plexus_partition.model.grid import GridShape
from plexus.studies.plan import (PlanError, SweepRequest, plan_runs, slug, weak_dataset)
from plexus.studies.plots import FIGURES

SPEC = "rmat:scale=8,edge_factor=4,features=16,classes=4"
GRIDS = ["1x1x1", "1x2x1", "2x1x1", "1x1x2"]
COMMON = ["--epochs", "3", "--hidden", "8"]


def cli(tool: str, *args: str) -> subprocess.CompletedProcess:
    """plexus-sweep's or plexus-report's main called in this process (the runs a sweep starts
    are processes still): an interpreter per call only added its start (issue 58 item 5). Both
    tools in their own process: `test_a_hostile_folder_answers_the_same_in_a_process`
    (tests/train/test_hardening_round3.py) and tests/studies/test_sweep_shadowing.py."""
    return tool_here(f"plexus-{tool}", *args, timeout=600)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """A strong sweep (local), a weak series (torchrun) in the same folder, then the report."""
    out = tmp_path_factory.mktemp("study")
    strong = ["--dataset", SPEC, "--world-sizes", "1,2", "--grids", ",".join(GRIDS) + ",auto",
              *COMMON, "--out", str(out)]
    first = cli("sweep", *strong)
    assert first.returncode == 0, first.stdout + first.stderr
    mtimes = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    second = cli("sweep", *strong)
    weak = cli("sweep", "--dataset", SPEC, "--world-sizes", "1,2", "--grids", "auto", "--weak",
               *COMMON, "--launcher", "torchrun", "--out", str(out))
    assert weak.returncode == 0, weak.stdout + weak.stderr
    report = cli("report", str(out))
    assert report.returncode == 0, report.stdout + report.stderr
    return {"out": out, "first": first, "second": second, "weak": weak, "report": report,
            "mtimes": mtimes, "manifest": json.loads((out / "manifest.json").read_text()),
            "rows": read_csv(out / "report" / "runs.csv")}


@pytest.mark.slow
def test_local_sweep_runs_every_grid_once(study):
    runs = study["manifest"]["runs"]
    strong = {r["grid"]: r for r in runs.values() if "strong" in r["studies"]}
    assert sorted(strong) == sorted(GRIDS)  # auto's picks are among them: not run twice
    assert all(r["state"] == "complete" and r["launcher"] == "local" for r in strong.values())
    auto = sorted(r["grid"] for r in strong.values() if "auto" in r["picked_by"])
    assert len(auto) == 2 and "1x1x1" in auto  # one pick per world size
    assert "4 run(s) done, 0 already complete" in study["first"].stdout


@pytest.mark.slow
def test_second_invocation_skips_completed_runs(study):
    assert study["second"].returncode == 0
    assert "0 run(s) done, 4 already complete (skipped)" in study["second"].stdout
    # the weak series' G=1 run is the strong 1x1x1 run: reused, not repeated
    assert "1 run(s) done, 1 already complete (skipped)" in study["weak"].stdout
    runs = study["out"] / "runs"
    assert all(runs.joinpath(n).stat().st_mtime_ns == t for n, t in study["mtimes"].items())


@pytest.mark.slow
def test_weak_series_runs_under_torchrun(study):
    runs = study["manifest"]["runs"]
    weak = [r for r in runs.values() if "weak" in r["studies"]]
    assert sorted(r["world_size"] for r in weak) == [1, 2]
    g2 = next(r for r in weak if r["world_size"] == 2)
    assert g2["dataset"] == weak_dataset(SPEC, 2) and "scale=9" in g2["dataset"]
    assert g2["launcher"] == "torchrun" and g2["state"] == "complete"
    assert g2["command"][1:6] == ["-P", "-m", "torch.distributed.run", "--standalone",
                                 "--nproc-per-node"]
    assert study["manifest"]["weak_series"][0]["datasets"] == {"1": SPEC, "2": g2["dataset"]}


@pytest.mark.slow
def test_log_records_where_and_what_it_ran(study):
    from plexus_datasets import gcn_nnz, load_dataset

    log = study["out"] / "runs" / f"{slug(SPEC)}_1x2x1_r0.json"
    summary = json.loads(log.read_text().splitlines()[-1])
    env = summary["environment"]
    assert env["hosts"] == 1 and sum(env["ranks_per_host"].values()) == 2
    assert env["torch"] and env["device"] == "cpu" and env["gpu"] is None
    graph = load_dataset(SPEC, None, seed=0)
    assert summary["graph"] == {"nodes": graph.num_nodes, "nnz": gcn_nnz(graph),
                                "features": graph.num_features, "classes": graph.num_classes}


@pytest.mark.slow
def test_report_csv_has_a_row_per_run(study):
    rows = study["rows"]
    assert len(rows) == 5 and len({r["run_id"] for r in rows}) == 5
    for r in rows:
        assert GridShape.parse(r["grid"]).world_size == int(r["world_size"])
        lo, med, hi = (float(r[k]) for k in ("epoch_time_min_s", "epoch_time_median_s",
                                            "epoch_time_max_s"))
        assert 0 < lo <= med <= hi and r["timed_epochs"] == "2"
        assert float(r["predicted_time_s"]) > 0 and float(r["predicted_memory_bytes"]) > 0
        # the engine's ledger equals the performance model's bytes on every grid
        assert r["comm_bytes_match_model"] == "True"
        assert r["host"] and r["torch"]
        for col in ("mem_peak_rss_max_bytes", "mem_peak_rss_mean_bytes"):
            assert col in r  # filled when the log measured it
    strong = [r for r in rows if "strong" in r["studies"]]
    assert all(float(r["loss_diff_vs_1x1x1"]) < 1e-4 for r in strong)  # same training
    by_grid = {r["grid"]: r for r in strong}
    assert float(by_grid["1x1x1"]["comm_bytes_x_per_epoch"]) == 0
    assert float(by_grid["2x1x1"]["comm_bytes_x_per_epoch"]) > 0
    assert float(by_grid["2x1x1"]["comm_bytes_y_per_epoch"]) == 0
    assert float(by_grid["2x1x1"]["t_all_reduce:x_max_s"]) >= \
        float(by_grid["2x1x1"]["t_all_reduce:x_mean_s"]) > 0
    assert "Spearman" in study["report"].stdout
    # the sweep measured this machine's rates and the report priced its predictions with them
    measured = json.loads((study["out"] / "calibration.json").read_text())
    # collectives timed on a local world of each multi-rank size the sweep ran
    assert sorted(measured["worlds"]) == sorted({str(int(r["world_size"])) for r in rows
                                                 if int(r["world_size"]) > 1})
    assert "predictions priced with" in study["report"].stdout
    assert "UNCALIBRATED" not in study["report"].stderr
    assert all(float(r["predicted_over_measured"]) > 0 for r in rows)
    # one epoch rule: timers over the timed epochs (2..N) as the epoch times
    assert all(r["timers_epochs"] == "timed" for r in rows)
    assert all(r["spread_flagged"] == "False" for r in rows)  # one repeat each: no spread
    assert "weak-scaling efficiency T(1)/T(G), best grid per G: G=1 1.00, G=2 " in \
        study["report"].stdout


@pytest.mark.slow
def test_report_writes_every_figure(study):
    for name in FIGURES:
        path = study["out"] / "report" / name
        assert path.stat().st_size > 5000, name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def write_stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.slow
def test_slurm_scripts(study, tmp_path):
    out = study["out"]
    # a new grid and the old ones: scripts only for what is not complete
    res = cli("sweep", "--dataset", SPEC, "--grids", "1x2x1,2x2x1", *COMMON, "--launcher",
              "slurm", "--tasks-per-node", "2", "--gpus-per-node", "2", "--time", "00:10:00",
              "--setup", "echo setting up", "--out", str(out))
    assert res.returncode == 0, res.stderr
    scripts = sorted((out / "slurm").glob("*.sbatch"))
    assert [p.name for p in scripts] == [f"{slug(SPEC)}_2x2x1_r0.sbatch"]
    text = scripts[0].read_text()
    assert subprocess.run(["bash", "-n", str(scripts[0])]).returncode == 0
    log = out.resolve() / "runs" / f"{slug(SPEC)}_2x2x1_r0.json"
    assert f"LOG={log}" in text
    for line in ("#SBATCH --ntasks=4", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                 "#SBATCH --gpus-per-node=2", "#SBATCH --time=00:10:00"):
        assert line in text.splitlines()
    srun = [l for l in text.splitlines() if l.startswith("srun ")]
    assert len(srun) == 1
    assert srun[0].startswith(f"srun --kill-on-bad-exit=1 --ntasks=4 {sys.executable} "
                              "-P -m plexus.train --grid 2x2x1 ")
    assert srun[0].endswith('--log-json "$LOG"') and f"--dataset {SPEC}" in srun[0]
    assert "bash -n" not in text and "sbatch" in (out / "slurm" / "submit.sh").read_text()

    # run the script with stand-ins for scontrol and srun: srun gets the plexus-train line
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "srun.args"
    write_stub(bin_dir, "scontrol", "echo node001\necho node002\n")
    write_stub(bin_dir, "srun", f'printf "%s\\n" "$@" > {called}\n'
                                'echo "$MASTER_ADDR:$MASTER_PORT" >> ' + str(called) + "\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "1234",
           "SLURM_JOB_NODELIST": "node[001-002]"}
    done = subprocess.run(["bash", str(scripts[0])], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    args = called.read_text().splitlines()
    assert args[:5] == ["--kill-on-bad-exit=1", "--ntasks=4", sys.executable, "-P", "-m"]
    assert args[args.index("--grid") + 1] == "2x2x1"
    assert args[args.index("--log-json") + 1] == str(log)
    assert args[-1] == "node001:21234"
    # a requeued job whose run is complete does not start it again
    called.unlink()
    log.write_text(log.with_name(f"{slug(SPEC)}_1x2x1_r0.json").read_text())
    again = subprocess.run(["bash", str(scripts[0])], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "already complete" in again.stdout and not called.exists()
    log.unlink()


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_slurm_job_array(tmp_path):
    out = tmp_path / "array"
    res = cli("sweep", "--dataset", SPEC, "--world-sizes", "2", "--grids", "all", *COMMON,
              "--launcher", "slurm", "--array", "--out", str(out))
    assert res.returncode == 0, res.stderr
    script = out / "slurm" / "array_G2.sbatch"
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "#SBATCH --array=0-2" in text and "#SBATCH --ntasks=2" in text
    for g in ("1x1x2", "1x2x1", "2x1x1"):
        assert f"--grid {g} " in text
        assert str(out.resolve() / "runs" / f"{slug(SPEC)}_{g}_r0.json") in text
    assert 'srun --kill-on-bad-exit=1 --ntasks=2 ' in text and '"${ARGS[@]}"' in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert {r["state"] for r in manifest["runs"].values()} == {"script written"}


@pytest.mark.slow
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, study):
    out = tmp_path / "nothing"
    for args in (["--grids", "2x2"], ["--grids", "auto"], ["--world-sizes", "2,x"],
                 ["--weak", "--world-sizes", "1,3"], ["--epochs", "0", "--world-sizes", "1"]):
        res = cli("sweep", "--dataset", SPEC, *args, "--out", str(out))
        assert res.returncode == 2, args
        assert_one_line(res.stderr, prog="plexus-sweep")
        assert not out.exists()
    # a folder holding runs of another model is refused
    res = cli("sweep", "--dataset", SPEC, "--grids", "1x1x1", "--epochs", "3", "--hidden", "32",
              "--out", str(study["out"]))
    assert res.returncode == 2 and "model.hidden 8 here, 32 asked" in res.stderr
    res = cli("report", str(tmp_path))
    assert res.returncode == 2 and res.stderr.startswith("plexus-report: error: ")


def test_plan_arithmetic():
    req = SweepRequest(dataset=SPEC, world_sizes=(1, 2, 4), grids="all,auto", repeats=2)
    plans = plan_runs(req, lambda ds, w: GridShape.factorizations(w)[-1])
    assert len(plans) == 2 * (1 + 3 + 6)  # every factorization once, auto's pick among them
    assert {p.run_id for p in plans if p.repeat == 1} == \
        {p.run_id.replace("_r0", "_r1") for p in plans if p.repeat == 0}
    assert weak_dataset("rmat:scale=10,edge_factor=4", 8) == "rmat:scale=13,edge_factor=4"
    assert weak_dataset("rmat:edge_factor=4", 1).startswith("rmat:scale=")
    with pytest.raises(PlanError):
        weak_dataset("cora", 2)
    weak = SweepRequest(dataset="cora", world_sizes=(1, 2), grids="auto", weak=True,
                        weak_datasets=("cora", "pubmed"))
    assert [p.dataset for p in plan_runs(weak, lambda ds, w: GridShape(1, 1, w))] == \
        ["cora", "pubmed"]


def test_sweep_calibrates_each_world_it_runs_up_to_the_cap(tmp_path, monkeypatch):
    """The sweep times collectives on a local world of each multi-rank size it runs (a 32-rank
    run is priced with the largest world measured, `CALIBRATION_MAX_WORLD`), once per folder."""
    import plexus.perfmodel.measure as measure
    from plexus.studies.folder import ResultsFolder
    from plexus.studies.sweep import CALIBRATION_MAX_WORLD, measure_calibration

    asked = []

    def fake(world_size, threads, quick, step_timer=None):
        asked.append((list(world_size), threads, quick))
        assert step_timer is not None  # the engine's step, for the fixed work per stage
        return {"alpha": 1e-4, "beta": 1e-9}

    monkeypatch.setattr(measure, "calibrate", fake)
    req = SweepRequest(dataset=SPEC, world_sizes=(1, 2, 4, 32), grids="auto", repeats=1)
    plans = plan_runs(req, lambda ds, w: GridShape(1, 1, w))
    folder = ResultsFolder(tmp_path / "res", create=True)
    assert measure_calibration(folder, plans, lambda line: None) is not None
    assert asked == [([1, 2, 4, CALIBRATION_MAX_WORLD], 1, True)] and CALIBRATION_MAX_WORLD < 32
    assert measure_calibration(folder, plans, lambda line: None) is None  # kept, not redone
    assert len(asked) == 1


@pytest.mark.slow
def test_report_reads_measured_memory_when_the_log_has_it(study, tmp_path):
    # the memory record agreed with the memory issue: per-rank lists and the prediction
    from plexus.perfmodel import Calibration
    from plexus.studies.collect import collect

    runs = tmp_path / "runs"
    runs.mkdir()
    src = study["out"] / "runs" / f"{slug(SPEC)}_1x2x1_r0.json"
    lines = src.read_text().splitlines()
    summary = json.loads(lines[-1])
    summary["memory"] = {"peak_rss_bytes": [300e6, 100e6], "tracked_peak_bytes": [4e6, 2e6],
                         "cuda_peak_bytes": None, "predicted_bytes": 5e6}
    (runs / src.name).write_text("\n".join(lines[:-1] + [json.dumps(summary)]) + "\n")
    (runs / "broken.json").write_text('{"epoch": 1, "loss": 1.0}\n')  # no summary: not a run
    rows, manifest = collect(tmp_path, Calibration())
    assert len(rows) == 1 and manifest == {}
    r = rows[0]
    assert r["mem_peak_rss_max_bytes"] == 300e6 and r["mem_peak_rss_mean_bytes"] == 200e6
    assert r["mem_tracked_peak_max_bytes"] == 4e6 and r["mem_tracked_peak_mean_bytes"] == 3e6
    assert r["mem_cuda_peak_max_bytes"] is None and r["predicted_memory_bytes"] == 5e6
    assert r["studies"] == "strong"  # no manifest: every log counts as a strong-scaling run


@pytest.mark.slow
def test_a_failed_run_is_reported_and_retried(tmp_path):
    out = tmp_path / "failing"
    args = ["--dataset", SPEC, "--grids", "1x1x1", *COMMON, "--out", str(out),
            "--train-arg=--dropout", "--train-arg=2"]  # plexus-train refuses it: exit 2
    res = cli("sweep", *args)
    assert res.returncode == 1
    assert "failed (exit status 2): plexus-train: error: --dropout must be in [0, 1)" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    (run,) = manifest["runs"].values()
    assert run["state"] == "failed" and run["exit_status"] == 2
    assert not list((out / "runs").glob("*.json"))
    again = cli("sweep", *args)  # not skipped: its log is not complete
    assert again.returncode == 1 and "0 already complete" in again.stdout


@pytest.mark.slow
def test_report_flags_a_repeat_spread_and_draws_only_what_it_has(study, tmp_path, monkeypatch,
                                                                  capsys):
    """Two repeats of 1x1x1 ten times apart: flagged in the CSV, on stderr and in the figure;
    no calibration: the titles say the predictions are uncalibrated; no weak runs: no weak
    figure (an old one is removed)."""
    import plexus.studies.plots as plots
    from plexus.studies.cli import report_main

    runs = tmp_path / "runs"
    runs.mkdir()
    src = (study["out"] / "runs" / f"{slug(SPEC)}_1x1x1_r0.json").read_text().splitlines()
    slow = [json.dumps({**json.loads(line), "epoch_time_s": 10 * json.loads(line)["epoch_time_s"]})
            if '"summary"' not in line else line for line in src]
    (runs / "a_1x1x1_r0.json").write_text("\n".join(src) + "\n")
    (runs / "a_1x1x1_r1.json").write_text("\n".join(slow) + "\n")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "weak_scaling.png").write_bytes(b"old")
    titles = {}
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: (
        titles.__setitem__(Path(path).name, fig.axes[0].get_title()), save(fig, path))[1])
    assert report_main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "differ 10.0x in median epoch time" in err and "UNCALIBRATED" in err
    rows = read_csv(tmp_path / "report" / "runs.csv")
    assert [r["spread_flagged"] for r in rows] == ["True", "True"]
    assert [r["predictions_calibrated"] for r in rows] == ["False", "False"]  # and the CSV
    assert abs(float(rows[0]["repeat_spread"]) - 10.0) < 1e-6
    assert not (tmp_path / "report" / "weak_scaling.png").exists()
    assert "weak_scaling.png" not in titles and "strong_scaling.png" in titles
    for name, title in titles.items():
        assert "UNCALIBRATED: the model's built-in GPU rates" in title, name
        assert "all but the first (warm-up)" in title, name
    calibration = tmp_path / "rates.json"
    calibration.write_text(json.dumps({"spmm_flops": 1e9, "gemm_flops": 1e10}))
    assert report_main([str(tmp_path), "--calibration", str(calibration)]) == 0
    assert "UNCALIBRATED" not in capsys.readouterr().err
    # named inside the results folder, never by the absolute path of the machine that drew it
    assert all("calibrated by rates.json" in t and str(tmp_path) not in t
               for t in titles.values())
    rows = read_csv(tmp_path / "report" / "runs.csv")
    assert [r["predictions_calibrated"] for r in rows] == ["True", "True"]
    assert all(r["calibration"].startswith(str(calibration)) for r in rows)


@pytest.mark.slow
def test_sweep_gives_every_grid_the_same_threads_per_rank(study):
    """Issue 39: 1x1x1 used to run with every core's thread and the other grids with a share,
    so the speed-ups compared threads as well as ranks."""
    runs = study["manifest"]["runs"].values()
    assert all(r["command"][r["command"].index("--threads") + 1] == "1" for r in runs)
    assert {r["threads_per_rank"] for r in study["rows"]} == {"1"}  # local and torchrun alike


@pytest.mark.slow
def test_report_warns_of_threads_and_superlinear_speedups_and_states_one_set_of_statistics(
        study, tmp_path, monkeypatch, capsys):
    """Two repeats of 1x1x1 ten times slower (one of them with 2 threads per rank) beside 1x2x1:
    the report warns, in its text and on the strong-scaling figure, that the threads differ and
    that G=2 runs past the ideal; the prediction statistics it prints are the figure's (per
    configuration: 2, not 3 runs)."""
    import plexus.studies.plots as plots
    from plexus.studies.cli import report_main

    runs = tmp_path / "runs"
    runs.mkdir()

    def copy(grid: str, name: str, slower: float = 1.0, threads: int | None = None) -> None:
        lines = (study["out"] / "runs" / f"{slug(SPEC)}_{grid}_r0.json").read_text().splitlines()
        out = []
        for line in lines:
            rec = json.loads(line)
            if rec.get("summary"):
                if threads is not None:
                    rec["environment"]["threads_per_rank"] = threads
            else:
                rec["epoch_time_s"] *= slower
            out.append(json.dumps(rec))
        (runs / name).write_text("\n".join(out) + "\n")

    def epochs(grid: str) -> list[float]:
        path = study["out"] / "runs" / f"{slug(SPEC)}_{grid}_r0.json"
        return [r["epoch_time_s"] for r in map(json.loads, path.read_text().splitlines())
                if not r.get("summary") and "epoch_time_s" in r]

    # slow enough that 1x2x1 beats it by more than 2x whatever this machine measured
    slower = 10.0 * max(1.0, max(epochs("1x2x1")) / min(epochs("1x1x1")))
    copy("1x1x1", "a_1x1x1_r0.json", slower=slower, threads=2)
    copy("1x1x1", "a_1x1x1_r1.json", slower=slower)
    copy("1x2x1", "a_1x2x1_r0.json")
    figures: dict[str, list[str]] = {}
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: (figures.__setitem__(
        Path(path).name, [fig.axes[0].get_title(), *(t.get_text() for t in fig.axes[0].texts)]),
        save(fig, path))[1])
    assert report_main([str(tmp_path), "--calibration",
                        str(study["out"] / "calibration.json")]) == 0
    captured = capsys.readouterr()
    assert "warning: threads per rank differ across runs (1 on 1x1x1, 1x2x1; 2 on 1x1x1)" in \
        captured.err
    assert "G=2 runs " in captured.err and "past the ideal 2x" in captured.err
    drawn = " ".join(figures["strong_scaling.png"])
    assert "WARNING: threads per rank differ" in drawn and "> ideal 2x" in drawn
    stats = next(line for line in captured.out.splitlines()
                 if line.startswith("predicted / measured epoch time"))
    assert "over 2 configurations" in stats
    assert stats in figures["predicted_vs_measured.png"][0]  # the figure states the same


def test_sweep_passes_its_comm_options_to_every_run():
    """plexus-sweep --comm-dtype/--sparse-comm/--activation reach each plexus-train command, and
    the resume check keeps folders written before the options (their defaults left out)."""
    from plexus.studies.cli import build_request, sweep_parser

    a = sweep_parser().parse_args(["--dataset", "cora", "--out", "o", "--comm-dtype", "bf16",
                                   "--sparse-comm", "off", "--activation", "elu"])
    request = build_request(a)
    args = request.model.train_args()
    assert args[args.index("--comm-dtype") + 1] == "bf16"
    assert args[args.index("--sparse-comm") + 1] == "off"
    assert args[args.index("--activation") + 1] == "elu"
    assert request.common()["model"]["comm_dtype"] == "bf16"
    assert request.common()["model"]["activation"] == "elu"
    default = build_request(sweep_parser().parse_args(["--dataset", "cora", "--out", "o"]))
    for key in ("comm_dtype", "sparse_comm", "activation"):
        assert key not in default.common()["model"]


def test_a_figures_caption_names_the_calibration_file_not_its_folder():
    """Issue 58 item 6: committed figures name no absolute path of the machine that drew them."""
    from plexus.studies.plots import caption

    line = caption("/home/someone/run/rates.json (collectives not measured: default alpha/beta)")
    assert line.endswith("predictions calibrated by rates.json (collectives not measured: "
                         "default alpha/beta)") and "/home" not in line
    assert caption("/srv/cal.json").endswith("predictions calibrated by cal.json")
    assert "UNCALIBRATED" in caption("defaults")
