"""A checkpoint's loop state is checked field by field like the command line's options
(`plexus.train.loopstate`, issue 46 item 4), and data that cannot train is refused
(`plexus_datasets.trainable`, item 5). The expected values are written here by hand: a state a
real run wrote passes, each planted corruption is refused in one line."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from engine_checks import LOOP_CONFIGS
from helpers import assert_one_line
from plexus_datasets import Graph, load_dataset
from plexus_datasets.trainable import UntrainableError
from plexus.engine.config import ModelConfig, TrainConfig
from plexus.engine.serial import SerialModel
from plexus.engine.trainer import Trainer
from plexus.testing.exactness import directed_toy_graph
from plexus.train import checkpoint as ckpt
from plexus.train import main
from plexus.train.loopstate import LoopStateError, check_loop_state

EPOCHS_RUN = 5


def _payload(name: str, epochs: int = EPOCHS_RUN) -> tuple[dict, TrainConfig]:
    g, cfg, tc = directed_toy_graph(), ModelConfig(2, 6, 0.5), LOOP_CONFIGS[name]
    trainer = Trainer(SerialModel(g, cfg, seed=5), tc)
    trainer.fit(epochs)
    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes)
    return ckpt.make_checkpoint(trainer.full_state(), cfg, tc, info), tc


def _check(payload: dict, tc: TrainConfig) -> None:
    check_loop_state(payload, tc, 1 if tc.weight_decay_scope == "all" else 2, "checkpoint")


@pytest.mark.parametrize("name", sorted(LOOP_CONFIGS))
def test_a_state_a_run_wrote_passes(name):
    payload, tc = _payload(name)
    _check(payload, tc)
    _check(_payload(name, 0)[0], tc)  # before the first epoch


def _set(path: str, value):
    def plant(payload: dict) -> None:
        *keys, last = path.split(".")
        target = payload
        for k in keys:
            target = target[k]
        target[last] = value
    return plant


# (config, corruption, what the message says); each is a value no run of these options writes
CORRUPTIONS = [
    ("adam-plateau-patience", _set("state.loop.lrs", [-5.0]), "learning rate -5.0 is not in [0"),
    ("adam-plateau-patience", _set("state.loop.stopped", 3), "early stopping ended it at epoch 3"),
    ("adam-plateau-patience", _set("state.loop.lrs", [float("nan")]), "learning rate nan"),
    ("adam-plateau-patience", _set("state.loop.lrs", [0.05, 0.05]), "not one per parameter group"),
    ("adam-plateau-patience", _set("state.loop.lrs", [1e6]), "learning rate 1000000.0"),
    ("adam-plateau-patience", _set("state.loop.lrs", "0.05"), "not one per parameter group"),
    ("adam-plateau-patience", _set("state.loop.best.epoch", 99), "best epoch 99 is not one of"),
    ("adam-plateau-patience", _set("state.loop.best.val_acc", 7.0), "val_acc 7.0"),
    ("adam-plateau-patience", _set("state.loop.schedule.num_bad_epochs", -2), "num_bad_epochs"),
    ("adam-plateau-patience", _set("state.loop.schedule.factor", 5.0), "schedule's factor"),
    ("adam-plateau-patience", _set("state.epoch", -1), "is not a count of epochs"),
    ("adam-plateau-patience", _set("train.lr", float("inf")), "training record's lr"),
    ("adam-plateau-patience", _set("train.bogus", 1), "unknown fields"),
    ("adamw-cosine-clip", _set("state.loop.schedule.last_epoch", 2), "at step 2 after 5 epochs"),
    ("adamw-cosine-clip", _set("state.loop.schedule.T_max", 10**6), "schedule's T_max"),
    ("adamw-cosine-clip", _set("state.loop.schedule.base_lrs", [-1.0]), "base_lrs"),
    ("adamw-cosine-clip", _set("state.loop.optimizer", "sgd"), "optimizer 'sgd'"),
    ("adamw-cosine-clip", _set("state.loop.schedule._last_lr", [float("inf")]), "_last_lr"),
    ("sgd-step-clip", _set("state.loop.schedule.gamma", 0.0), "schedule's gamma"),
    ("sgd-step-clip", _set("state.loop.schedule", {"x": 1}), "not torch's"),
]


@pytest.mark.parametrize("name, plant, needle", CORRUPTIONS,
                         ids=[f"{c[0]}:{c[2][:30]}" for c in CORRUPTIONS])
def test_a_planted_corruption_is_refused_in_one_line(name, plant, needle):
    payload, tc = _payload(name)
    plant(payload)
    with pytest.raises(LoopStateError) as e:
        _check(payload, tc)
    assert_one_line(e, needle)


def test_optimizer_steps_past_the_epochs_are_refused():
    payload, tc = _payload("adam-plateau-patience")
    first = next(iter(payload["state"]["adam"]))
    payload["state"]["adam"][first]["step"] = 1e9
    with pytest.raises(LoopStateError, match="took 1000000000.0 steps in 5 epochs"):
        _check(payload, tc)


def test_a_run_that_stopped_early_resumes_as_stopped():
    """`stopped` where early stopping did end the run (patience after the best epoch) passes."""
    tc = TrainConfig(epochs=60, lr=0.05, patience=2)
    g, cfg = directed_toy_graph(), ModelConfig(2, 6, 0.5)
    trainer = Trainer(SerialModel(g, cfg, seed=5), tc)
    trainer.fit()
    assert trainer.stopped is not None, "the toy run must stop early for this test"
    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes)
    _check(ckpt.make_checkpoint(trainer.full_state(), cfg, tc, info), tc)


def _constant_payload(lr: float = 0.05) -> tuple[dict, TrainConfig]:
    tc = TrainConfig(epochs=8, lr=lr)  # no schedule: the rate is the --lr throughout
    g, cfg = directed_toy_graph(), ModelConfig(2, 6, 0.5)
    trainer = Trainer(SerialModel(g, cfg, seed=5), tc)
    trainer.fit(3)
    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes)
    return ckpt.make_checkpoint(trainer.full_state(), cfg, tc, info), tc


# The rates a run of these options holds, by hand: a constant 0.05; step (0.2, gamma 0.5 every
# 3 epochs) after 5 epochs: 0.2 * 0.5 = 0.1; cosine (0.02 to 0 over 8) after 5:
# 0.01 * (1 + cos(5 pi / 8)) = 0.0061731657; plateau: 0.05 * 0.5^k.
RATE_CASES = [
    ("constant", [0.05], True), ("constant", [0.05 * (1 + 1e-9)], True),
    ("constant", [1e-300], False), ("constant", [0.0499], False), ("constant", [0.0], False),
    ("sgd-step-clip", [0.1], True), ("sgd-step-clip", [0.2], False),
    ("sgd-step-clip", [0.05], False), ("sgd-step-clip", [1e-300], False),
    ("adamw-cosine-clip", [0.0061731657], True), ("adamw-cosine-clip", [0.02], False),
    ("adamw-cosine-clip", [0.006], False),
    ("adam-plateau-patience", [0.05 * 0.5 ** 3], False),  # k = 3 past the state's own rate
    ("adam-plateau-patience", [0.03], False), ("adam-plateau-patience", [1e-300], False),
]


@pytest.mark.parametrize("name, lrs, ok", RATE_CASES,
                         ids=[f"{c[0]}:{c[1][0]:g}" for c in RATE_CASES])
def test_only_rates_the_saved_schedule_gives_are_accepted(name, lrs, ok):
    payload, tc = _constant_payload() if name == "constant" else _payload(name)
    payload["state"]["loop"]["lrs"] = [lrs[0]] * len(payload["state"]["loop"]["lrs"])
    schedule = payload["state"]["loop"]["schedule"]
    if schedule is not None:
        schedule["_last_lr"] = list(payload["state"]["loop"]["lrs"])
        if name == "adam-plateau-patience" and ok is False and lrs[0] == 0.05 * 0.5 ** 3:
            schedule["last_epoch"] = 2  # two evaluations: at most two reductions
    if ok:
        _check(payload, tc)
        return
    with pytest.raises(LoopStateError) as e:
        _check(payload, tc)
    assert_one_line(e, "learning rate")


def test_the_plateau_rates_are_its_base_rate_times_its_factor():
    payload, tc = _payload("adam-plateau-patience")
    loop = payload["state"]["loop"]
    for k in range(3):  # 0.05, 0.025, 0.0125: each a rate two evaluations allow
        loop["schedule"]["last_epoch"] = max(k, 2)
        loop["lrs"] = [0.05 * 0.5 ** k]
        loop["schedule"]["_last_lr"] = list(loop["lrs"])
        _check(payload, tc)


def test_the_schedule_s_last_rates_must_be_the_optimizer_s():
    payload, tc = _payload("sgd-step-clip")
    payload["state"]["loop"]["schedule"]["_last_lr"] = [0.2]
    with pytest.raises(LoopStateError) as e:
        _check(payload, tc)
    assert_one_line(e, "last rates")


@pytest.mark.parametrize("name", ["sgd-step-clip", "adamw-cosine-clip", "adam-plateau-patience"])
def test_a_missing_schedule_state_under_a_schedule_is_refused(name):
    payload, tc = _payload(name)
    payload["state"]["loop"]["schedule"] = None
    with pytest.raises(LoopStateError) as e:
        _check(payload, tc)
    assert_one_line(e, f"no state of the {tc.lr_schedule} schedule")


def test_a_string_rate_is_named_as_a_string():
    payload, tc = _constant_payload()
    payload["state"]["loop"]["lrs"] = ["0.05"]
    with pytest.raises(LoopStateError) as e:
        _check(payload, tc)
    assert_one_line(e, "learning rate '0.05' is a str, not a number")


def test_a_constant_run_s_state_passes():
    _check(*_constant_payload())


@pytest.mark.slow  # three child processes
def test_the_fuzz_of_options_environments_and_checkpoints_breaks_nothing(tmp_path):
    """The small version of benchmarks/fuzz_checks.py (500 cases per kind there): 25 per kind,
    no traceback, signal, hang or wrong value accepted."""
    import subprocess
    import sys

    from helpers import REPO

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fuzz_checks.py"),
                           "--cases", "25", "--seed", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in (tmp_path / "fuzz_checks.txt").read_text()


@pytest.fixture(scope="module")
def cora_checkpoint(tmp_path_factory):
    """A real checkpoint of plexus-train's default model on Cora, two epochs (serial)."""
    g = load_dataset("cora")
    cfg, tc = ModelConfig(), TrainConfig(epochs=10, patience=5)
    trainer = Trainer(SerialModel(g, cfg, seed=0), tc)
    trainer.fit(2)
    from plexus_partition.store import graph_hash

    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes, graph_hash(g))
    return ckpt.make_checkpoint(trainer.full_state(), cfg, tc, info)


@pytest.mark.parametrize("path, value, needle", [
    ("state.loop.lrs", [-5.0], "learning rate -5.0 is not in [0, 0.01]"),
    ("state.loop.stopped", 2, "early stopping ended it at epoch 2"),
])
def test_the_issues_checkpoints_are_refused_on_the_command_line(cora_checkpoint, tmp_path,
                                                               capsys, path, value, needle):
    """(On main: lrs = [-5] resumed as gradient ascent, stopped = 2 trained nothing; exit 0.)"""
    payload = copy.deepcopy(cora_checkpoint)
    _set(path, value)(payload)
    ckpt.save_checkpoint(tmp_path, payload)
    assert main(["--grid", "1x1x1", "--epochs", "10", "--patience", "5", "--checkpoint",
                 str(tmp_path), "--resume"]) == 2
    assert_one_line(capsys.readouterr().err, needle, prog="plexus-train")


# ---- data that cannot train ------------------------------------------------------------------
def _npz(path, labels, **extra):
    rng = np.random.default_rng(0)
    n = len(labels)
    a = sp.random(n, n, density=0.1, format="csr", random_state=0)
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr, adj_shape=a.shape,
             attr_matrix=rng.random((n, 5)).astype("float32"), labels=labels, **extra)
    return f"npz:{path}"


@pytest.mark.parametrize("kind, extra_args, needle", [
    ("nolabels", [], "no labelled training node"),
    ("oneclass", [], "one class only"),
    ("noval", ["--patience", "3"], "--patience needs the validation metric"),
    ("noval", ["--lr-schedule", "plateau"], "--lr-schedule plateau needs the validation metric"),
])
def test_data_that_cannot_train_is_one_line_and_status_2(tmp_path, capsys, kind, extra_args,
                                                         needle):
    """(On main: all labels -1 trained with loss 0.0, accuracy 0.0, exit 0.)"""
    n = 60
    labels = {"nolabels": -np.ones(n, np.int64), "oneclass": np.zeros(n, np.int64)}.get(
        kind, np.arange(n) % 3)
    extra = {} if kind != "noval" else {"idx_train": np.arange(20), "idx_val": np.zeros(0, int),
                                       "idx_test": np.arange(20, n)}
    spec = _npz(tmp_path / f"{kind}.npz", labels, **extra)
    assert main(["--grid", "1x1x1", "--epochs", "2", "--dataset", spec, *extra_args]) == 2
    assert_one_line(capsys.readouterr().err, f"{kind}.npz: ", needle, prog="plexus-train")  # named by its file


def test_the_library_refuses_an_untrainable_graph_with_a_typed_error():
    n = 30
    a = sp.random(n, n, density=0.2, format="csr", random_state=1)
    x = np.ones((n, 3), np.float32)
    g = Graph.from_scipy(a, x, -np.ones(n, np.int64), name="blank")
    with pytest.raises(UntrainableError) as e:
        Trainer(SerialModel(g, ModelConfig(), seed=0), TrainConfig())
    assert_one_line(e, "blank: no labelled training node")
    ok = Graph.from_scipy(a, x, np.arange(n) % 2, train=np.arange(10), val=np.arange(10, 20),
                          test=np.arange(20, n), name="fine")
    Trainer(SerialModel(ok, ModelConfig(), seed=0), TrainConfig(patience=3))
    no_val = Graph.from_scipy(a, x, np.arange(n) % 2, train=np.arange(10), test=np.arange(10, n))
    with pytest.raises(UntrainableError, match="early stopping"):
        Trainer(SerialModel(no_val, ModelConfig(), seed=0), TrainConfig(patience=3))
