"""The loop state's checks at their boundaries (issue 58 item 3): each bound of
`plexus.train.loopstate` once at its value (accepted) and once just past it (refused), on a state
a real run wrote at epoch 5 (`test_loop_state._payload`: plateau at --lr 0.05 with --patience 4;
cosine and step schedules). The bounds are the checks' documented ones, written here by hand:
rates in [0, --lr] (with a relative slack of 1e-6) and, since issue 56 N5, only those the saved
schedule gives (the plateau's --lr x 0.5^k, k at most its steps), optimizer steps in [0, epoch], the best epoch
in [1, epoch], metrics in [0, 1], early stopping exactly at the epoch and at least --patience
after the best, a per-epoch schedule at exactly the epoch (a plateau at most there), its counters
in [0, epoch + 1], the epoch a whole number in [0, 10^9].
"""

from __future__ import annotations

import copy
from functools import lru_cache

import pytest

from test_loop_state import _check, _payload, _set
from plexus.train.loopstate import LoopStateError

EPOCH = 5  # the epoch the payloads are at
LR = 0.05  # adam-plateau-patience's --lr (its --patience: 4)
PLATEAU, COSINE, STEP = "adam-plateau-patience", "adamw-cosine-clip", "sgd-step-clip"


@lru_cache(maxsize=None)
def _written(name: str):
    return _payload(name)


def _fresh(name: str):
    """A copy of the state the run of ``name`` wrote at epoch 5 (trained once per config)."""
    payload, tc = _written(name)
    return copy.deepcopy(payload), tc


def _steps(value):
    """Every parameter's optimizer step count set to ``value``."""
    def plant(payload: dict) -> None:
        for kept in payload["state"]["adam"].values():
            kept["step"] = value
    return plant


def _both(*plants):
    def plant(payload: dict) -> None:
        for p in plants:
            p(payload)
    return plant


def _rate(value):
    """The optimizer's rate and the schedule's last one both set to ``value`` (a state a run
    writes has them equal; issue 56 N5: only the rates the saved schedule gives pass)."""
    return _both(_set("state.loop.lrs", [value]), _set("state.loop.schedule._last_lr", [value]))


# (config, name, planted, accepted)
CASES = [
    (PLATEAU, "rate at --lr", _rate(LR), True),
    (PLATEAU, "rate within the slack", _rate(LR * (1 + 5e-7)), True),
    (PLATEAU, "rate past the slack", _rate(LR * (1 + 2e-6)), False),
    # the plateau's rates are --lr x 0.5^k, k at most its steps: 0 is none of them (min_lr 0)
    (PLATEAU, "rate 0", _rate(0.0), False),
    (PLATEAU, "rate --lr x 0.5^2", _rate(LR * 0.25), True),
    (PLATEAU, "rate --lr x 0.4 (no power of 0.5)", _rate(LR * 0.4), False),
    (PLATEAU, "rate not the schedule's last", _set("state.loop.lrs", [LR]), False),
    (PLATEAU, "rate just below 0", _set("state.loop.lrs", [-1e-12]), False),
    (PLATEAU, "rate False (a flag, not 0)", _set("state.loop.lrs", [False]), False),
    (PLATEAU, "steps at the epoch", _steps(float(EPOCH)), True),
    (PLATEAU, "steps 0", _steps(0), True),
    (PLATEAU, "steps one past the epoch", _steps(float(EPOCH + 1)), False),
    (PLATEAU, "steps -1", _steps(-1), False),
    (PLATEAU, "steps not whole", _steps(4.5), False),
    (PLATEAU, "best epoch 1", _set("state.loop.best.epoch", 1), True),
    (PLATEAU, "best epoch at the epoch", _set("state.loop.best.epoch", EPOCH), True),
    (PLATEAU, "best epoch 0", _set("state.loop.best.epoch", 0), False),
    (PLATEAU, "best epoch one past", _set("state.loop.best.epoch", EPOCH + 1), False),
    (PLATEAU, "best epoch not whole", _set("state.loop.best.epoch", 2.5), False),
    (PLATEAU, "best epoch True (a flag, not 1)", _set("state.loop.best.epoch", True), False),
    (PLATEAU, "val_acc 0", _set("state.loop.best.val_acc", 0.0), True),
    (PLATEAU, "val_acc 1", _set("state.loop.best.val_acc", 1.0), True),
    (PLATEAU, "val_acc just above 1", _set("state.loop.best.val_acc", 1 + 1e-9), False),
    (PLATEAU, "val_acc just below 0", _set("state.loop.best.val_acc", -1e-9), False),
    (PLATEAU, "test_acc just above 1", _set("state.loop.best.test_acc", 1 + 1e-9), False),
    (PLATEAU, "train_acc just below 0", _set("state.loop.best.train_acc", -1e-9), False),
    (PLATEAU, "stopped exactly patience after the best",
     _both(_set("state.loop.best.epoch", EPOCH - 4), _set("state.loop.stopped", EPOCH)), True),
    (PLATEAU, "stopped one epoch short of the patience",
     _both(_set("state.loop.best.epoch", EPOCH - 3), _set("state.loop.stopped", EPOCH)), False),
    (PLATEAU, "stopped one past the epoch",
     _both(_set("state.loop.best.epoch", 1), _set("state.loop.stopped", EPOCH + 1)), False),
    (PLATEAU, "stopped before the epoch",
     _both(_set("state.loop.best.epoch", 1), _set("state.loop.stopped", EPOCH - 1)), False),
    (PLATEAU, "plateau at the epoch", _set("state.loop.schedule.last_epoch", EPOCH), True),
    (PLATEAU, "plateau at 0 at --lr", _both(_set("state.loop.schedule.last_epoch", 0),
                                            _rate(LR)), True),
    (PLATEAU, "plateau at 0 with a reduced rate", _set("state.loop.schedule.last_epoch", 0),
     False),
    (PLATEAU, "plateau one past the epoch", _set("state.loop.schedule.last_epoch", EPOCH + 1),
     False),
    (PLATEAU, "bad epochs at epoch + 1", _set("state.loop.schedule.num_bad_epochs", EPOCH + 1),
     True),
    (PLATEAU, "bad epochs at epoch + 2", _set("state.loop.schedule.num_bad_epochs", EPOCH + 2),
     False),
    (PLATEAU, "cooldown 0", _set("state.loop.schedule.cooldown_counter", 0), True),
    (PLATEAU, "cooldown -1", _set("state.loop.schedule.cooldown_counter", -1), False),
    (PLATEAU, "cooldown at epoch + 2", _set("state.loop.schedule.cooldown_counter", EPOCH + 2),
     False),
    (PLATEAU, "schedule's rate past --lr", _set("state.loop.schedule._last_lr", [LR * 1.01]),
     False),
    (PLATEAU, "epoch 10^9", _set("state.epoch", 10**9), True),
    (PLATEAU, "epoch 10^9 + 1", _set("state.epoch", 10**9 + 1), False),
    (PLATEAU, "epoch not whole", _set("state.epoch", 5.5), False),
    (PLATEAU, "epoch True", _set("state.epoch", True), False),
    (COSINE, "cosine at the epoch", _set("state.loop.schedule.last_epoch", EPOCH), True),
    (COSINE, "cosine one behind", _set("state.loop.schedule.last_epoch", EPOCH - 1), False),
    (COSINE, "cosine one ahead", _set("state.loop.schedule.last_epoch", EPOCH + 1), False),
    (COSINE, "step count at epoch + 1", _set("state.loop.schedule._step_count", EPOCH + 1), True),
    (COSINE, "step count at epoch + 2", _set("state.loop.schedule._step_count", EPOCH + 2),
     False),
    (COSINE, "cosine's base rate at --lr", _set("state.loop.schedule.base_lrs", [0.02]), True),
    (COSINE, "cosine's base rate past --lr", _set("state.loop.schedule.base_lrs", [0.0201]),
     False),
    # past it by 1e-4 of itself: beyond any float rounding of a schedule (the slack is 1e-6)
    (COSINE, "cosine's base rate just past --lr",
     _set("state.loop.schedule.base_lrs", [0.02 * (1 + 1e-4)]), False),
    (STEP, "step schedule one behind", _set("state.loop.schedule.last_epoch", EPOCH - 1), False),
    (STEP, "step schedule at the epoch", _set("state.loop.schedule.last_epoch", EPOCH), True),
]


@pytest.mark.parametrize("name, what, plant, accepted", CASES, ids=[c[1] for c in CASES])
def test_a_loop_state_bound_holds_at_its_value_and_breaks_just_past_it(name, what, plant,
                                                                      accepted):
    payload, tc = _fresh(name)
    plant(payload)
    if accepted:
        _check(payload, tc)
    else:
        with pytest.raises(LoopStateError):
            _check(payload, tc)


def test_the_cases_change_the_state_a_run_wrote():
    """Each case plants a value the run did not write (so an accepted case tests the bound,
    not the unchanged state), except where the written value is the bound itself."""
    def seen(payload: dict) -> str:
        state = payload["state"]
        return repr((state["loop"], state["epoch"],
                     [kept.get("step") for kept in state["adam"].values()]))

    for name, what, plant, _ in CASES:
        payload, _tc = _fresh(name)
        before = seen(payload)
        plant(payload)
        assert (seen(payload) != before) != (what in SAME_AS_WRITTEN), what


# the run's own state already sits on these bounds (epoch-5 schedules at step 5, steps 5)
SAME_AS_WRITTEN = {"plateau at the epoch", "cosine at the epoch", "step schedule at the epoch",
                   "steps at the epoch", "step count at epoch + 1", "cosine's base rate at --lr",
                   "cooldown 0"}
