"""Issue 48 items 1 and 7: a first epoch without torch._dynamo; --quiet's heartbeat and the note
when ranks outnumber cores. (``./run``'s fast path: test_run_fast_path.py; the seconds
themselves: benchmarks/first_epoch.py.)"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from plexus.train.heartbeat import Heartbeat, format_duration


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---- heartbeat ------------------------------------------------------------------------------
def test_heartbeat_speaks_once_per_interval_with_rate_and_eta():
    clock = _Clock()
    beat = Heartbeat(10.0, total=10, clock=clock)
    clock.now = 104.0
    assert beat.beat(1) is None  # 4 s < 10 s
    clock.now = 112.0  # 3 epochs in 12 s: 4 s each, 7 left = 28 s
    assert beat.beat(3) == "heartbeat: epoch  3/10 (30%), 4 s/epoch, elapsed 12s, ETA 28s"
    clock.now = 115.0
    assert beat.beat(4) is None  # 3 s since the last line
    clock.now = 122.5  # 5 epochs in 22.5 s: 4.5 s each, 5 left = 22.5 s -> 22 (even rounding)
    assert beat.beat(5) == "heartbeat: epoch  5/10 (50%), 4.5 s/epoch, elapsed 22s, ETA 22s"


def test_heartbeat_rate_counts_from_the_resumed_epoch_and_fast_runs_say_epochs_per_second():
    clock = _Clock()
    beat = Heartbeat(1.0, total=1000, start_epoch=400, clock=clock)
    clock.now = 102.0  # 100 epochs since the resume in 2 s: 50/s, 500 left = 10 s
    assert beat.beat(500) == "heartbeat: epoch  500/1000 (50%), 50 epochs/s, elapsed 2s, ETA 10s"


def test_heartbeat_zero_is_off_and_durations_read_as_hours_minutes_seconds():
    clock = _Clock()
    beat = Heartbeat(0.0, total=5, clock=clock)
    clock.now = 1e6
    assert beat.beat(1) is None
    assert [format_duration(s) for s in (4.2, 65, 3725)] == ["4s", "1m05s", "1h02m05s"]


def test_a_quiet_log_prints_heartbeats_and_a_verbose_one_prints_epochs_only():
    from plexus.api.training import EpochStats
    from plexus.train.runlog import RunLog

    quiet, loud = io.StringIO(), io.StringIO()
    logs = [RunLog(3, quiet=True, stream=quiet, progress=False, heartbeat_s=1e-9),
            RunLog(3, quiet=False, stream=loud, progress=False, heartbeat_s=1e-9)]
    for log in logs:
        for e in (1, 2, 3):
            log.epoch(EpochStats(e, 1.0, 0.5, 0.5, 0.5, 0.01))
    assert [line.split(",")[0] for line in quiet.getvalue().splitlines()] == [
        "heartbeat: epoch 1/3 (33%)", "heartbeat: epoch 2/3 (67%)", "heartbeat: epoch 3/3 (100%)"]
    assert [line.split()[:2] for line in loud.getvalue().splitlines()] == [
        ["epoch", "1/3"], ["epoch", "2/3"], ["epoch", "3/3"]]


def test_heartbeat_must_be_a_non_negative_number(capsys):
    from plexus.train.cli import main

    for bad in ("-1", "nan", "inf"):
        assert main(["--grid", "1x1x1", "--epochs", "1", "--quiet", "--heartbeat", bad]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all("--heartbeat must be >= 0 seconds" in line for line in err), err


# ---- ranks and cores ------------------------------------------------------------------------
def test_the_note_comes_only_when_ranks_outnumber_cores():
    from plexus.train.session import crowding_note

    assert crowding_note(2, 2) is None and crowding_note(1, 16) is None
    note = crowding_note(16, 2)
    assert note is not None and "16 ranks share this machine's 2 cores" in note
    assert "at most 2 ranks" in note and "\n" not in note


# ---- a first epoch without torch._dynamo ----------------------------------------------------
@pytest.mark.slow  # a fresh interpreter imports torch
def test_training_never_imports_torch_dynamo():
    """The optimizers, the step, the schedule and the tensor tracker: what made a first epoch
    import torch._dynamo (seconds) before; in a fresh interpreter."""
    code = """
import sys, torch
from plexus.api.training import TrainConfig
from plexus.engine.trainer import make_optimizer, make_schedule
from plexus.runtime.memstats import TensorTracker
for kind in ("adam", "adamw", "sgd"):
    p = torch.nn.Parameter(torch.ones(3))
    cfg = TrainConfig(epochs=2, optimizer=kind, lr_schedule="cosine")
    opt = make_optimizer([{"params": [p], "weight_decay": 0.1}], cfg)
    sched = make_schedule(opt, cfg)
    with TensorTracker():
        opt.zero_grad(set_to_none=True)
        (p * p).sum().backward()
        opt.step()
        sched.step()
    opt.load_state_dict(opt.state_dict())
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("kind, options", [("adam", {}), ("adamw", {}),
                                           ("sgd", {"momentum": 0.9})])
def test_the_optimizers_equal_torch_optims_bit_for_bit_with_hooks_and_schedules(kind, options):
    import torch

    from plexus.engine import optim

    ours = {"adam": optim.Adam, "adamw": optim.AdamW, "sgd": optim.SGD}[kind]
    theirs = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[kind]

    def train(cls):
        gen = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(5, 3, generator=gen)),
              torch.nn.Parameter(torch.randn(4, generator=gen))]
        opt = cls([{"params": ps[:1], "weight_decay": 0.1},
                   {"params": ps[1:], "weight_decay": 0.0}], lr=0.05, **options)
        seen = []
        opt.register_step_pre_hook(lambda o, a, k: seen.append("pre"))
        opt.register_step_post_hook(lambda o, a, k: seen.append("post"))
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for _ in range(5):
            opt.zero_grad(set_to_none=True)
            (ps[0].sin().sum() + (ps[1] ** 3).sum()).backward()
            opt.step()
            sched.step()
        opt.load_state_dict(opt.state_dict())
        return ps, opt, seen

    (a, opt_a, seen_a), (b, opt_b, seen_b) = train(ours), train(theirs)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert seen_a == seen_b == ["pre", "post"] * 5
    assert [g["lr"] for g in opt_a.param_groups] == [g["lr"] for g in opt_b.param_groups]
    for p, q in zip(a, b):
        assert opt_a.state[p].keys() == opt_b.state[q].keys()
        assert all(torch.equal(opt_a.state[p][k], opt_b.state[q][k]) for k in opt_a.state[p])


@pytest.mark.slow
def test_a_quiet_run_beats_and_a_rank_per_core_has_no_note(capsys):
    from plexus.train.cli import main

    assert main(["--grid", "1x1x1", "--epochs", "2", "--quiet", "--heartbeat", "1e-9"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in out[:2]] == ["heartbeat: epoch 1/2 (50%)",
                                                        "heartbeat: epoch 2/2 (100%)"]
    assert out[2].startswith("summary:") and not any("note:" in line for line in out)
