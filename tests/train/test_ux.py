"""What a new user meets first: consistent tools, help texts, refusals, requeue-friendly runs,
logs people read (issue 17)."""

from __future__ import annotations

import argparse

import pytest

from plexus_partition.model import modelopts
from plexus.engine.config import ModelConfig
from plexus_partition import cli as partition_cli
from plexus.perfmodel.cli import model_main
from plexus.train.cli import build_parser as train_parser


def _model_actions(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    """The model group's options: dest -> (flags, default)."""
    group = next(g for g in parser._action_groups if g.title == "model")
    return {a.dest: (tuple(a.option_strings), a.default) for a in group._group_actions}


# ---- one set of model options ------------------------------------------------------------
def test_plexus_model_and_plexus_train_share_model_options_and_defaults():
    from plexus.perfmodel.cli import _model_parser

    train, model = _model_actions(train_parser()), _model_actions(_model_parser())
    # every model option, the kind's included (the performance model prices every kind)
    assert train == model
    assert {modelopts.flag(f) for f in ModelConfig.field_names()} == {
        flags[0] for flags, _ in model.values()}
    # the defaults are ModelConfig's: the options without any flag give the default model
    args = train_parser().parse_args(["--grid", "1x1x1"])
    assert modelopts.model_config(args) == ModelConfig()
    # and both tools take --dtype and --recompute
    from plexus.perfmodel.cli import _model_parser as mp

    ranked = mp().parse_args(["-G", "2", "--dtype", "bf16", "--recompute"])
    assert (ranked.dtype, ranked.recompute) == ("bf16", True)


def test_the_default_order_is_auto_and_agg_is_one_flag_away():
    """One default product order for every tool that takes one (ModelConfig's: "auto", combine
    first on narrowing layers); the paper's "agg" is ``--order agg``."""
    from plexus.studies.cli import sweep_parser
    from plexus.studies.plan import ModelOptions
    from cli_helpers import launched

    assert ModelConfig().order == modelopts.DEFAULT_ORDER == "auto"
    opts = launched(train_parser().parse_args(["--grid", "1x1x1", "--quiet"]))
    assert opts.model.layer_orders(1433, 7) == ("combine", "combine")  # Cora: 1433 > 16 > 7
    assert ModelConfig(num_layers=3, hidden=64).layer_orders(16, 7) == ("agg", "agg", "combine")
    paper = launched(train_parser().parse_args(["--grid", "1x1x1", "--order", "agg"]))
    assert paper.model.layer_orders(1433, 7) == ("agg", "agg")
    sweep = sweep_parser().parse_args(["--dataset", "cora", "--out", "x"])
    assert sweep.order == ModelOptions().order == modelopts.DEFAULT_ORDER
    order_help = next(a.help for a in train_parser()._actions if "--order" in a.option_strings)
    assert "(default auto" in order_help and "agg ((Â·H)·W, the paper's)" in order_help


def test_plexus_model_says_which_model_it_used(capsys):
    assert model_main(["-G", "2", "--dataset", "cora", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "layers=2 hidden=16 order=auto bias=yes" in out
    assert "model: gcn, 2 layers, hidden 16, order auto, bias" in out
    assert model_main(["-G", "2", "--dataset", "cora", "--top", "1", "--layers", "3",
                       "--hidden", "128", "--no-bias", "--learnable-features"]) == 0
    assert ("model: gcn, 3 layers, hidden 128, order auto, no bias, learnable features"
            in capsys.readouterr().out)
    assert model_main(["-G", "2", "--dataset", "cora", "--top", "1", "--model", "gat",
                       "--heads", "8", "--norm", "batch", "--dtype", "bf16",
                       "--recompute"]) == 0
    assert ("model: gat, 2 layers, hidden 16, heads 8/1, order auto, bias, norm batch, bf16, "
            "recompute" in capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--layers", "0"], "--layers must be in [1, 256], got 0"),
    (["--hidden", "0"], "--hidden must be >= 1, got 0"),
    (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
])
def test_model_option_errors_are_the_same_in_both_tools(argv, message, capsys):
    from plexus.train import main as train_main

    assert model_main(["-G", "2", "--dataset", "cora", *argv]) == 2
    assert capsys.readouterr().err == f"plexus-model: error: {message}\n"
    assert train_main(["--grid", "1x1x1", *argv]) == 2
    assert capsys.readouterr().err == f"plexus-train: error: {message}\n"


# ---- plexus-partition ----------------------------------------------------------------------
def test_partition_root_help_does_not_promise_downloads(capsys):
    with pytest.raises(SystemExit):
        partition_cli.build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--root ROOT directory holding the dataset's files (nothing is ever downloaded)" in text
    assert "download" not in text.replace("nothing is ever downloaded", "")
    assert "--force replace the shard store already at --out" in text


def test_partition_refuses_to_replace_a_store_without_force(tmp_path, capsys):
    out = tmp_path / "store"
    argv = ["--dataset", "cora", "--grid", "1x1x2", "--layers", "2", "--out", str(out)]
    assert partition_cli.main(argv) == 0
    capsys.readouterr()
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert partition_cli.main([*argv[:-4], "--layers", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"plexus-partition: error: --out {out}: a shard store is already there; "
                   "add --force to replace it, or choose another directory\n")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched
    assert partition_cli.main([*argv[:-4], "--layers", "3", "--out", str(out), "--force"]) == 0
    from plexus_partition import read_manifest

    assert read_manifest(out)["num_stages"] == 3


# ---- --grid auto ----------------------------------------------------------------------------
def test_grid_auto_names_its_choice_the_runner_up_and_their_figures(capsys):
    """The line names the chosen grid and the runner-up with their predicted epoch times and
    training peaks; the peak is the one the run's summary predicts for the same grid: the same
    inputs (a 4-rank run reads its shards from the cache's store, a smaller process than one
    that cuts its own shard), not the model's defaults."""
    from plexus_partition.model.grid import GridShape
    from plexus_partition.model.layout import DEFAULT_PERMUTATION
    from plexus.core.units import format_bytes, format_seconds
    from plexus_datasets import gcn_nnz, load_dataset
    from plexus.perfmodel import ModelSpec, rank_configs
    from cli_helpers import launched
    from plexus.api.memcheck import predicted_peaks

    opts = launched(train_parser().parse_args(["--grid", "auto", "--world-size", "4"]))
    line = capsys.readouterr().out.strip()
    g = load_dataset("cora")
    sizes = (g.num_nodes, gcn_nnz(g), g.num_features, g.num_classes)
    # the run keeps layer 0's gathered features (--keep-input auto): priced so
    ranked = rank_configs(4, ModelSpec(*sizes, ModelConfig(), name=g.name, keep_input=True))
    best, second = ranked[0], ranked[1]
    assert opts.grid == GridShape.of(best.grid)

    def summary_peak(grid) -> str:  # what the workers' summary line says for that grid
        spec = ModelSpec(*sizes, ModelConfig(), perm=DEFAULT_PERMUTATION, from_store=True,
                         keep_input=True)
        return format_bytes(predicted_peaks(spec, grid).training)

    assert line == (
        f"plexus-train: --grid auto: chose {opts.grid} for 4 ranks (predicted epoch "
        f"{format_seconds(best.time_s)}, training peak {summary_peak(best.grid)} per rank); "
        f"runner-up {GridShape.of(second.grid)} (predicted epoch {format_seconds(second.time_s)}, "
        f"training peak {summary_peak(second.grid)} per rank); it wins by "
        f"{format_seconds(second.time_s - best.time_s)}, decided by "  # the term: test_grid_auto_cpu
        f"{line.split('decided by ')[1].split(';')[0]}; uncalibrated (GPU defaults): "
        "the times are not this machine's (plexus-bench calibrate --out FILE, then "
        "--calibration FILE)")
    assert summary_peak(best.grid) != format_bytes(best.memory.total)  # the old mismatch
    launched(train_parser().parse_args(["--grid", "auto", "--world-size", "4", "--quiet"]))
    assert capsys.readouterr().out == ""


# ---- the summary's wall time ----------------------------------------------------------------
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * _UNITS[unit]


def test_wall_time_parts_add_up_by_construction():
    from plexus.engine.trainer import EpochStats
    from plexus.train.walltime import WallTime, format_wall_time

    history = [EpochStats(1, 1.0, 0.1, 0.1, 0.1, 0.25, 0.5),
               EpochStats(2, 1.0, None, None, None, 0.75, 0.0)]
    w = WallTime.of(history, setup_s=2.0, total_s=13.0, final_eval_s=1.5, startup_s=3.0)
    assert (w.train_steps_s, w.eval_s, w.other_s) == (1.0, 2.0, 5.0)
    d = w.as_dict()
    assert d["startup_s"] + d["setup_s"] + d["train_steps_s"] + d["eval_s"] + d["other_s"] \
        == d["total_s"]
    lines = format_wall_time(d, 2, 2)
    assert lines[0] == ("  wall time: 13.00 s = start-up 3.00 s + set-up 2.00 s + training "
                        "steps 1.00 s + evaluation 2.00 s + other 5.00 s")
    assert lines[1] == ("    (start-up: from the command's start to the rank's start; 2 steps "
                        "of 500.0 ms; 2 evaluations; other: checkpoints, logs, the summary)")


def test_summary_reports_three_time_figures_that_add_up(tmp_path, capsys):
    import csv
    import json
    import re

    from plexus.train import main

    log, table = tmp_path / "run.json", tmp_path / "run.csv"
    assert main(["--grid", "1x1x1", "--epochs", "5", "--eval-every", "2", "--quiet",
                 "--log-json", str(log), "--log-csv", str(table), "--checkpoint",
                 str(tmp_path / "ck"), "--checkpoint-every", "1"]) == 0
    out = capsys.readouterr().out
    records = [json.loads(x) for x in log.read_text().splitlines()]
    epochs, summary = records[:-1], records[-1]
    w = summary["wall_time"]
    assert all(w[k] >= 0 for k in w), w
    assert w["startup_s"] + w["setup_s"] + w["train_steps_s"] + w["eval_s"] + w["other_s"] \
        == pytest.approx(w["total_s"], abs=1e-9)
    assert summary["startup_from"] == "the command's start"  # main(argv): from the call
    assert w["train_steps_s"] == pytest.approx(sum(r["epoch_time_s"] for r in epochs))
    # epochs 2, 4 and the last are evaluated; the others' evaluation time is 0
    assert [r["eval_time_s"] > 0 for r in epochs] == [False, True, False, True, True]
    assert w["eval_s"] == pytest.approx(sum(r["eval_time_s"] for r in epochs))
    assert summary["evaluations"] == 3 and summary["epochs_run"] == 5
    # the printed line: total = the labelled parts, to the printed rounding
    m = re.search(r"wall time: (.+?) = start-up (.+?) \+ set-up (.+?) \+ training steps (.+?) "
                  r"\+ evaluation (.+?) \+ other (.+?)\n", out)
    assert m, out
    total, *parts = (_seconds(x) for x in m.groups())
    assert sum(parts) == pytest.approx(total, rel=0.01, abs=0.005)
    assert "training step only" not in out
    # the CSV holds the same epochs as the JSON log, empty cells where not evaluated
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4, 5]
    assert [float(r["loss"]) for r in rows] == [r["loss"] for r in epochs]
    assert rows[0]["val_acc"] == "" and float(rows[1]["val_acc"]) == epochs[1]["val_acc"]


# ---- --resume auto --------------------------------------------------------------------------
def _losses(path) -> list[float]:
    import json

    return [r["loss"] for r in map(json.loads, path.read_text().splitlines())
            if not r.get("summary")]


@pytest.mark.slow  # plexus-train end to end, three runs
def test_resume_auto_starts_fresh_then_resumes(tmp_path, capsys):
    from plexus.train import main

    ck = tmp_path / "ck"  # does not exist yet: a job's first start
    base = ["--grid", "1x1x1", "--checkpoint", str(ck), "--resume", "auto"]
    assert main([*base, "--epochs", "3", "--log-json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert (f"plexus-train: --resume auto: no checkpoint at {ck / 'checkpoint.pt'} yet; "
            "starting from epoch 0") in out
    assert "resumed from" not in out and (ck / "checkpoint.pt").is_file()
    # requeued: the same command line goes on from the checkpoint
    assert main([*base, "--epochs", "5", "--log-json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert f"resumed from {ck / 'checkpoint.pt'} at epoch 3" in out and "no checkpoint" not in out
    assert main(["--grid", "1x1x1", "--epochs", "5", "--quiet", "--log-json",
                 str(tmp_path / "whole.json")]) == 0
    whole = _losses(tmp_path / "whole.json")
    got = _losses(tmp_path / "a.json") + _losses(tmp_path / "b.json")
    assert len(got) == 5 and got == pytest.approx(whole, abs=1e-5)


def test_resume_auto_in_an_existing_empty_directory_and_bad_values(tmp_path, capsys):
    from plexus.train import main

    (tmp_path / "empty").mkdir()
    assert main(["--grid", "1x1x1", "--epochs", "1", "--checkpoint", str(tmp_path / "empty"),
                 "--resume", "auto", "--quiet"]) == 0
    assert "summary:" in capsys.readouterr().out
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path), "--resume", "later"]) == 2
    assert capsys.readouterr().err == ("plexus-train: error: --resume takes no value or 'auto', "
                                       "got 'later'\n")
    assert main(["--grid", "1x1x1", "--resume", "auto"]) == 2
    assert "--resume needs --checkpoint DIR" in capsys.readouterr().err


def test_help_texts_name_the_new_options(capsys):
    from plexus.perfmodel.cli import _model_parser

    with pytest.raises(SystemExit):
        train_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--resume [auto]" in text and "'--resume auto' continues if that file exists" in text
    assert "--log-csv FILE CSV, one row per epoch" in text and "tail -f FILE follows" in text
    assert "--tensorboard DIR TensorBoard scalars in DIR" in text
    assert "--layers L GNN layers (default 2, or the store's with --shards)" in text
    with pytest.raises(SystemExit):
        _model_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--layers L GNN layers (default 2)" in text
    assert "--hidden H hidden width (default 16; GAT: per head)" in text
    assert "best (the model's choice per grid)" in text


# ---- TensorBoard ----------------------------------------------------------------------------
def test_tensorboard_scalars_are_written_when_the_package_is_there(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from plexus.train import main

    board = tmp_path / "tb"
    assert main(["--grid", "1x1x1", "--epochs", "3", "--quiet", "--tensorboard", str(board),
                 "--log-json", str(tmp_path / "run.json")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert list(board.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(board))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loss/train", "accuracy/train", "accuracy/val", "accuracy/test",
            "time/train_step_s", "time/eval_s", "timers/spmm", "timers/gemm"} <= tags
    losses = [e.value for e in events.Scalars("loss/train")]
    assert [e.step for e in events.Scalars("loss/train")] == [1, 2, 3]
    assert losses == pytest.approx(_losses(tmp_path / "run.json"), rel=1e-6)
    assert all(e.value > 0 for e in events.Scalars("timers/spmm"))  # per epoch, not cumulative


@pytest.mark.slow
def test_without_tensorboard_the_run_goes_on_with_a_one_line_note(tmp_path):
    import subprocess
    import sys

    board = tmp_path / "tb"
    # None in sys.modules makes every import of the package fail, as if it were not installed
    code = ("import sys; sys.modules['tensorboard'] = None; from plexus.train import main; "
            f"sys.exit(main(['--grid', '1x1x1', '--epochs', '2', '--quiet', '--tensorboard', "
            f"{str(board)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ("plexus-train: note: --tensorboard: the tensorboard package is not "
                           "installed (pip install tensorboard); training goes on without "
                           "TensorBoard scalars\n")
    assert "summary: gcn 2x16 on cora" in proc.stdout
    assert not board.exists()  # nothing made for it


def test_bad_log_targets_are_refused_before_the_run(tmp_path, capsys):
    from plexus.train import main

    assert main(["--grid", "1x1x1", "--log-csv", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"plexus-train: error: --log-csv {tmp_path}: is a "
                                       "directory; give a file name\n")
    import os

    os.mkfifo(tmp_path / "fifo")
    assert main(["--grid", "1x1x1", "--log-csv", str(tmp_path / "fifo")]) == 2
    assert capsys.readouterr().err == (f"plexus-train: error: --log-csv {tmp_path / 'fifo'}: not "
                                       "a regular file; give a file name\n")
    (tmp_path / "file").write_text("x")
    from plexus.train.epochlogs import tensorboard_available

    if not tensorboard_available():
        pytest.skip("tensorboard is not installed")
    assert main(["--grid", "1x1x1", "--tensorboard", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err == (f"plexus-train: error: --tensorboard {tmp_path / 'file'}: "
                                       "exists and is not a directory\n")
