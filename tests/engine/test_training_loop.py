"""The training loop a PyG/OGB user expects (optimizers, learning-rate schedules, gradient
clipping, early stopping: `plexus.engine.trainer`) and shard stores of every aggregation.

The loop's options are checked on a 2-rank grid against the serial model (one world for every
check, `engine_checks.run_loop_checks`), through a resume on the same grid (bit for bit) and from
the serial model's state (another grid), through a checkpoint file, and on the command line;
`plexus-partition` stores of GraphSAGE's and GIN's aggregations train as `--dataset` runs do.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import worlds
from cli_helpers import losses, read_log, train_here
from helpers import assert_one_line
from engine_checks import LOOP_CHECKS, LOOP_CONFIGS, LOOP_RESUME_AT, run_loop_checks
from plexus.api import RECIPES
from plexus_partition.model.ops import KINDS
from plexus.engine.config import ModelConfig, TrainConfig, TrainConfigError
from plexus.engine.serial import SerialModel
from plexus.engine.trainer import Trainer
from plexus_partition.cli import main as partition_main
from plexus.testing.exactness import directed_toy_graph
from plexus.train import checkpoint as ckpt
from plexus.train import main

LOOP_GRID = (1, 1, 2)
worlds.declare("training-loop", __file__, {2: (run_loop_checks, ([LOOP_GRID],))})


def _loop_results() -> dict[str, list[str]]:
    """Every loop check on `LOOP_GRID`, in one world (the session's shared world of 2 ranks,
    `tests/worlds.py`, started once for all of them)."""
    return worlds.merged(2, "training-loop")


@pytest.mark.slow
@pytest.mark.parametrize("check", LOOP_CHECKS)
def test_loop_options_are_grid_independent_and_resume_exactly(check):
    """curve: the grid's run equals the serial model's (losses, rates, early stop, best epoch),
    and each option acted; resume: interrupted and resumed on the grid, bit for bit; resume-
    from-serial: the serial (1x1x1) run's state continued on the grid."""
    results = _loop_results()
    key = f"{'x'.join(map(str, LOOP_GRID))}/{check}"
    assert key in results, f"check {key} did not run"
    assert results[key] == [], "\n".join(results[key][:10])


# ---- checkpoints ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(LOOP_CONFIGS))
def test_a_checkpoint_file_resumes_the_loop_bit_for_bit(name, tmp_path):
    """The loop's state (optimizer moments, schedule, rates, best epoch, early stop) through
    `save_checkpoint`/`load_checkpoint` (weights_only) and the resume checks: the continued run
    equals the uninterrupted one bit for bit."""
    g, cfg, tc = directed_toy_graph(), ModelConfig(2, 6, 0.5), LOOP_CONFIGS[name]
    whole = Trainer(SerialModel(g, cfg, seed=5), tc)
    want = whole.fit()
    first = Trainer(SerialModel(g, cfg, seed=5), tc)
    head = first.fit(LOOP_RESUME_AT)
    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes)
    ckpt.save_checkpoint(tmp_path, ckpt.make_checkpoint(first.full_state(), cfg, tc, info))
    payload = ckpt.load_checkpoint(tmp_path)
    ckpt.check_state(payload, cfg)
    ckpt.check_loop(payload, tc)
    second = Trainer(SerialModel(g, cfg, seed=5), tc)
    second.load_full_state(payload["state"])
    got = head + second.fit()
    assert [h.loss for h in got] == [h.loss for h in want]
    assert [h.val_acc for h in got] == [h.val_acc for h in want]
    assert (second.lr, second.stopped, second.best.epoch) == \
        (whole.lr, whole.stopped, whole.best.epoch)


def test_resuming_with_another_optimizer_or_schedule_is_refused(tmp_path, capsys):
    g = directed_toy_graph()
    payload = ckpt.make_checkpoint({"epoch": 3, "params": {}, "adam": {}}, ModelConfig(),
                                   TrainConfig(optimizer="adamw", lr_schedule="step"),
                                   ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features,
                                                    g.num_classes))
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.check_loop(payload, TrainConfig(optimizer="sgd", lr_schedule="step"))
    assert_one_line(e, "--optimizer 'adamw' (now 'sgd')")
    ckpt.check_loop(payload, TrainConfig(optimizer="adamw", lr_schedule="step", patience=3))
    # a checkpoint of Adam at a constant rate (written before these options) resumes as such
    old = {**payload, "train": {"epochs": 200, "lr": 0.01, "seed": 0}}
    ckpt.check_loop(old, TrainConfig())
    with pytest.raises(ckpt.CheckpointError, match="--lr-schedule 'none'"):
        ckpt.check_loop(old, TrainConfig(lr_schedule="cosine"))
    # on the command line: one line, status 2
    ckpt.save_checkpoint(tmp_path, ckpt.make_checkpoint(
        {"epoch": 3, "params": {}, "adam": {}}, ModelConfig(), TrainConfig(),
        ckpt.DatasetInfo("cora", 2708, 1433, 7)))
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path), "--resume",
                 "--optimizer", "sgd"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--optimizer 'adam' (now 'sgd')")


# ---- options -------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--patience", "-1"], "--patience must be >= 1, got -1"),
    (["--patience", "0"], "--patience must be >= 1"),
    (["--lr-schedule", "linear"], "argument --lr-schedule: invalid choice: 'linear'"),
    (["--optimizer", "lamb"], "argument --optimizer: invalid choice: 'lamb'"),
    (["--momentum", "1"], "--momentum must be in [0, 1)"),
    (["--momentum", "nan"], "--momentum must be in [0, 1)"),
    (["--clip-grad-norm", "0"], "--clip-grad-norm must be > 0 and finite"),
    (["--clip-grad-norm", "inf"], "--clip-grad-norm must be > 0 and finite"),
    (["--lr-step", "0"], "--lr-step must be >= 1"),
    (["--lr-gamma", "1.5"], "--lr-gamma must be in (0, 1)"),
    (["--lr-patience", "-2"], "--lr-patience must be >= 0"),
    (["--lr-min", "0.5"], "--lr-min must be >= 0 and below the learning rate"),
    (["--patience", "5", "--eval-every", "0"], "--patience needs the validation metric: give "
                                               "--eval-every >= 1"),
    (["--lr-schedule", "plateau", "--eval-every", "0"], "--lr-schedule needs the validation"),
])
def test_bad_loop_options_are_one_line_and_status_2(args, message, capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert main(["--grid", "1x1x1", *args]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, prog="plexus-train")
    assert message in err


def test_recipes_take_the_loop_options():
    """The Python API's recipes build the same `TrainConfig` (its checks included)."""
    recipe = RECIPES["ogbn-arxiv-gcn"]
    tc = recipe.train_config(optimizer="adamw", lr_schedule="cosine", clip_grad_norm=1.0,
                             patience=50)
    assert (tc.optimizer, tc.lr_schedule, tc.epochs, tc.patience) == ("adamw", "cosine", 500, 50)
    with pytest.raises(TrainConfigError) as e:
        recipe.train_config(lr_schedule="linear")
    assert e.value.field == "lr_schedule" and isinstance(e.value, ValueError)


# ---- shard stores of every aggregation -----------------------------------------------------
RMAT = "rmat:scale=8,features=16,classes=4"
# the loop's options ride along: early stopping, a schedule and clipping through the CLI
LOOP_FLAGS = ("--epochs", "30", "--optimizer", "adamw", "--lr", "0.05", "--lr-schedule",
              "plateau", "--lr-patience", "1", "--patience", "3", "--clip-grad-norm", "1")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))  # every kind the registry declares
def test_stores_of_every_kind_train_as_dataset_runs(kind, tmp_path):
    """A `plexus-partition --model KIND --layers 2` store trains, without --model (the store
    records its kind), the 2 layers of that kind with the losses, accuracies, best epoch and
    early stop of the `--dataset` run of the same graph, grid and kind."""
    store = tmp_path / "store"
    assert partition_main(["--dataset", RMAT, "--grid", "1x1x2", "--model", kind,
                           "--layers", "2", "--orders", "agg", "--out", str(store)]) == 0
    manifest = json.loads((store / "manifest.json").read_text())
    assert (manifest["model"], manifest["gnn_layers"]) == (kind, 2)
    assert manifest["aggregation"] == KINDS[kind].aggregation
    logs = {}
    for name, source in {"store": ("--shards", str(store)),
                         "dataset": ("--dataset", RMAT, "--grid", "1x1x2", "--no-cache",
                                     "--order", "agg", "--model", kind)}.items():
        logs[name] = tmp_path / f"{name}.json"
        # plexus-train's main here (its ranks are processes): compared by their logs alone, the
        # two runs need no interpreter of their own (issue 58 item 5)
        proc = train_here(*source, *LOOP_FLAGS, "--quiet", "--log-json", str(logs[name]))
        assert proc.returncode == 0, proc.stderr
    (store_records, store_summary), (data_records, data_summary) = \
        read_log(logs["store"]), read_log(logs["dataset"])
    assert (store_summary["model"]["kind"], store_summary["model"]["layers"]) == (kind, 2)
    np.testing.assert_allclose(losses(store_records), losses(data_records), rtol=0, atol=1e-5)
    for key in ("best_epoch", "best_val_acc", "stopped_early", "epochs"):
        assert store_summary[key] == data_summary[key], key
    assert store_summary["model"]["orders"] == data_summary["model"]["orders"]


def test_a_store_of_another_aggregation_is_refused_in_one_line(tmp_path, capsys):
    store = tmp_path / "store"
    assert partition_main(["--dataset", RMAT, "--grid", "1x1x1", "--layers", "2",
                           "--model", "sage", "--out", str(store)]) == 0
    capsys.readouterr()
    assert main(["--shards", str(store), "--model", "gin"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--model gin but", "was cut for the sage model",
                    "plexus-partition --model gin")
    # a store that records no kind (the cache's, or written before kinds were recorded)
    path = store / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["model"], manifest["gnn_layers"]
    path.write_text(json.dumps(manifest))
    assert main(["--shards", str(store), "--model", "gin"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err)
    assert "holds Â normalized for the mean aggregation, --model gin needs sum" in err
    assert "plexus-partition --model gin" in err
    # a manifest without the field (a store written before it was recorded) holds GCN's Â
    del manifest["aggregation"]
    path.write_text(json.dumps(manifest))
    assert main(["--shards", str(store), "--model", "sage"]) == 2
    assert "holds Â normalized for the gcn aggregation, --model sage needs mean" in \
        capsys.readouterr().err
    # an aggregation no partitioner writes: a damaged manifest
    path.write_text(json.dumps({**manifest, "aggregation": "max"}))
    assert main(["--shards", str(store), "--model", "sage"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "aggregation 'max' is not one of gcn, mean, sum")
