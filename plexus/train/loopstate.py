"""A checkpoint's training-loop state checked like the command line's options, field by field:
the epoch, every learning rate, the schedule's state, the optimizer's step counts, the best epoch
and where early stopping ended the run — typed, finite, within the one table of bounds
(`plexus_partition.model.bounds`) and consistent with the run that resumes it. A resumed run trusts
these values (``lrs = [-5]`` would resume as gradient ascent, ``stopped = 3`` would train nothing),
so any that no run of these options could have written is refused in one line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any

import torch

from plexus.api.training import TrainConfig, TrainConfigError, make_schedule
from plexus_partition.model.bounds import MAX_COUNT, MAX_LR

#: The schedule's fields that change as it runs (the rest are its configuration, which must be
#: the run's); torch.optim.lr_scheduler's names.
_MOVING = {"last_epoch", "_step_count", "_last_lr", "base_lrs", "best", "num_bad_epochs",
           "cooldown_counter", "_is_initial", "_get_lr_called_within_step"}
# the relative slack of a rate that a schedule computed in floating point
_SLACK = 1e-6


class LoopStateError(ValueError):
    """A checkpoint's loop state that no run of these options could have written (one line)."""


def _whole(value: Any, lo: int, hi: int) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and float(value).is_integer() and lo <= value <= hi)


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def saved_train(payload: dict, where: str) -> TrainConfig:
    """The training options the checkpoint was written with (older checkpoints: defaults for
    what they lack), checked as `TrainConfig` checks the command line's."""
    saved = payload.get("train", {})
    if not isinstance(saved, dict):
        raise LoopStateError(f"{where}: its training record is not a record")
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(str(k)[:30] for k in saved if k not in known)
    if unknown:
        raise LoopStateError(f"{where}: its training record has unknown fields {unknown}")
    for name, default in asdict(TrainConfig()).items():
        value = saved.get(name, default)
        if value is None and default is None or isinstance(value, str) and isinstance(default,
                                                                                     str):
            continue
        if isinstance(default, (int, float)) or default is None:
            if not _finite(value) or (isinstance(default, int) and not isinstance(default, bool)
                                      and not float(value).is_integer()):
                raise LoopStateError(f"{where}: its training record's {name} is "
                                     f"{str(value)[:30]!s}, not a finite number")
        elif type(value) is not type(default):
            raise LoopStateError(f"{where}: its training record's {name} is a "
                                 f"{type(value).__name__}")
    try:
        return TrainConfig(**{**asdict(TrainConfig()), **saved})
    except (TrainConfigError, TypeError) as e:
        raise LoopStateError(f"{where}: its training record is no valid run ({e})") from None


def check_loop_state(payload: dict, run: TrainConfig, groups: int, where: str) -> None:
    """Raise `LoopStateError` unless the checkpoint's loop state (``payload["state"]``) is one
    a run of ``run``'s optimizer and schedule, with ``groups`` parameter groups, could have
    written at its epoch."""
    state = payload["state"]
    epoch = state.get("epoch")
    if not _whole(epoch, 0, MAX_COUNT):
        raise LoopStateError(f"{where}: epoch {str(epoch)[:30]} is not a count of epochs")
    saved = saved_train(payload, where)
    loop = state.get("loop")
    if loop is None:  # written before the loop kept state: Adam at a constant rate
        return
    if not isinstance(loop, dict) or set(loop) - {"optimizer", "schedule", "lrs", "best",
                                                  "stopped"}:
        raise LoopStateError(f"{where}: the loop state is not the optimizer, schedule, rates, "
                             "best epoch and early stop")
    if loop.get("optimizer") != run.optimizer:
        held = str(loop.get("optimizer"))[:20]
        raise LoopStateError(f"{where} holds the state of optimizer {held!r}, the run uses "
                             f"{run.optimizer}")
    _check_rates(loop.get("lrs"), saved, groups, where, "learning rate")
    _check_steps(state.get("adam", {}), epoch, where)
    best = loop.get("best") or {}
    best_epoch = _check_best(best, epoch, where)
    stopped = loop.get("stopped")
    if stopped is not None:
        patience = saved.patience
        if (not _whole(stopped, 1, MAX_COUNT) or stopped != epoch or patience is None
                or best_epoch is None or stopped - best_epoch < patience):
            raise LoopStateError(
                f"{where}: early stopping ended it at epoch {str(stopped)[:30]}, but it is at "
                f"epoch {epoch} with best epoch {best_epoch} and patience {patience}: no run "
                "stops there; it is damaged (start a new --checkpoint directory)")
    _check_schedule(loop.get("schedule"), run, saved, epoch, groups, where)
    _check_given_rates(loop["lrs"], loop.get("schedule"), saved, epoch, where)


def _rates_given(schedule: dict | None, saved: TrainConfig, epoch: int) -> list[float]:
    """Every rate a run of ``saved``'s options can hold after ``epoch`` epochs with the
    schedule state ``schedule`` (checked first): the constant --lr without a schedule; the
    step and cosine schedules' one rate at their step (torch's closed forms, from their own
    base rate); the plateau schedule's base rate times its factor k times (k at most its
    steps), floored at its minimum."""
    if schedule is None:
        return [saved.lr]
    base = float(schedule.get("base_lrs", [saved.lr])[0])  # plateau keeps none: its --lr
    step = int(schedule["last_epoch"])
    if saved.lr_schedule == "step":
        return [base * saved.lr_gamma ** (step // saved.lr_step)]
    if saved.lr_schedule == "cosine":
        floor, span = float(schedule["eta_min"]), max(int(schedule["T_max"]), 1)
        return [floor + (base - floor) * (1 + math.cos(math.pi * step / span)) / 2]
    floor = float(schedule["min_lrs"][0]) if schedule.get("min_lrs") else saved.lr_min
    out, rate = [], base
    for _ in range(min(max(step, 0), epoch) + 1):
        out.append(max(rate, floor))
        if rate <= floor:
            break
        rate *= saved.lr_gamma
    return out


def _check_given_rates(lrs: list, schedule: dict | None, saved: TrainConfig, epoch: int,
                       where: str) -> None:
    """Every group's rate is one the saved schedule state gives (`_rates_given`), the same
    for every group, and the schedule's own last rates are the optimizer's."""
    given = _rates_given(schedule, saved, epoch)
    tol = _SLACK * max(saved.lr, 1e-12)
    for lr in lrs:
        if not any(math.isclose(lr, g, rel_tol=_SLACK, abs_tol=tol) for g in given):
            what = (f"the {saved.lr_schedule} schedule gives {given[0]:.6g} at its step "
                    f"{schedule['last_epoch']}" if schedule is not None and len(given) == 1
                    else f"its schedule gives only {', '.join(f'{g:.6g}' for g in given[:4])}"
                    + (", ..." if len(given) > 4 else "") if schedule is not None
                    else f"a run without a schedule keeps its --lr {saved.lr:g}")
            raise LoopStateError(f"{where}: learning rate {lr:.6g}: {what}; no run of these "
                                 "options holds it, the checkpoint is damaged")
    if len(set(lrs)) > 1:
        raise LoopStateError(f"{where}: the parameter groups' learning rates differ ({lrs[:4]}); "
                             "every schedule sets one rate for all; the checkpoint is damaged")
    last = (schedule or {}).get("_last_lr")
    if last is not None and not all(math.isclose(a, b, rel_tol=_SLACK, abs_tol=tol)
                                    for a, b in zip(last, lrs)):
        raise LoopStateError(f"{where}: the schedule's last rates {last[:4]} are not the "
                             f"optimizer's {lrs[:4]}; the checkpoint is damaged")


def _check_rates(lrs: Any, saved: TrainConfig, groups: int, where: str, what: str) -> None:
    """One rate per parameter group, each in [0, the saved --lr] (no schedule raises it)."""
    if not isinstance(lrs, list) or len(lrs) != groups:
        raise LoopStateError(f"{where}: the {what}s are {str(lrs)[:40]}, not one per parameter "
                             f"group ({groups}: --weight-decay-on as when it was written)")
    top = min(saved.lr, MAX_LR) * (1 + _SLACK)
    for lr in lrs:
        if not _finite(lr) and not isinstance(lr, float):
            raise LoopStateError(f"{where}: {what} {str(lr)[:30]!r} is a {type(lr).__name__}, "
                                 "not a number; the checkpoint is damaged")
        if not _finite(lr) or not 0 <= lr <= top:
            raise LoopStateError(f"{where}: {what} {str(lr)[:30]} is not in [0, {saved.lr:g}] "
                                 "(its --lr): no schedule sets it; the checkpoint is damaged")


def _check_steps(moments: Any, epoch: int, where: str) -> None:
    """An optimizer step count is a whole number of steps, at most one per epoch."""
    if not isinstance(moments, dict):
        raise LoopStateError(f"{where}: the optimizer state is not a record per parameter")
    for name, kept in (moments or {}).items():
        step = kept.get("step") if isinstance(kept, dict) else None
        if step is not None and not _whole(step, 0, epoch):
            raise LoopStateError(f"{where}: {str(name)[:40]}'s optimizer took {str(step)[:30]} "
                                 f"steps in {epoch} epochs; the checkpoint is damaged")


def _check_best(best: Any, epoch: int, where: str) -> int | None:
    """The best epoch: None, or an epoch already run with its metrics finite in [0, 1]."""
    if not isinstance(best, dict):
        raise LoopStateError(f"{where}: the best epoch is not a record")
    best_epoch = best.get("epoch")
    if best_epoch is not None and not _whole(best_epoch, 1, epoch):
        raise LoopStateError(f"{where}: best epoch {str(best_epoch)[:30]} is not one of its "
                             f"{epoch} epochs")
    for key in ("val_acc", "test_acc", "train_acc"):
        value = best.get(key)
        if value is not None and not (_finite(value) and 0 <= value <= 1):
            raise LoopStateError(f"{where}: the best epoch's {key} {str(value)[:30]} is not a "
                                 "metric in [0, 1]")
    if best_epoch is not None and best.get("val_acc") is None:
        raise LoopStateError(f"{where}: best epoch {best_epoch} has no validation metric")
    return None if best_epoch is None else int(best_epoch)


def _fresh_schedule(run: TrainConfig, groups: int) -> dict | None:
    """The state a schedule of ``run`` starts from (the configuration fields to compare)."""
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(groups)]
    opt = torch.optim.SGD([{"params": [p]} for p in params], lr=run.lr)
    schedule = make_schedule(opt, run)
    return None if schedule is None else schedule.state_dict()


def _check_schedule(schedule: Any, run: TrainConfig, saved: TrainConfig, epoch: int,
                    groups: int, where: str) -> None:
    """The schedule's state: none without a schedule; else its configuration the run's, its
    position at most the epochs run (per-epoch schedules: exactly), its rates like ``lrs``."""
    fresh = _fresh_schedule(run, groups)
    if fresh is None:
        if schedule is not None:
            raise LoopStateError(f"{where} holds a schedule's state, but the run has none")
        return
    if schedule is None:
        if saved.lr_schedule == run.lr_schedule:  # its run kept the state of this schedule
            raise LoopStateError(f"{where}: holds no state of the {run.lr_schedule} schedule it "
                                 "was written with (every such run keeps it); the checkpoint is "
                                 "damaged")
        return  # written without a schedule: this run's starts afresh
    if not isinstance(schedule, dict) or set(schedule) != set(fresh):
        raise LoopStateError(f"{where}: the {run.lr_schedule} schedule's state has fields "
                             f"{sorted(str(k)[:20] for k in schedule)[:8]}, not torch's")
    for key, start in fresh.items():
        value = schedule[key]
        if key in ("base_lrs", "_last_lr"):
            _check_rates(value, saved, groups, where, f"schedule's {key}")
        elif key == "last_epoch":
            per_epoch = run.lr_schedule in ("cosine", "step")
            if not _whole(value, 0, epoch) or per_epoch and value != epoch:
                raise LoopStateError(f"{where}: the schedule is at step {str(value)[:30]} after "
                                     f"{epoch} epochs; the checkpoint is damaged")
        elif key in ("_step_count", "num_bad_epochs", "cooldown_counter"):
            if not _whole(value, 0, epoch + 1):
                raise LoopStateError(f"{where}: the schedule's {key} {str(value)[:30]} is not a "
                                     f"count within its {epoch} epochs")
        elif key == "best":
            if not (_finite(value) or value == start):
                raise LoopStateError(f"{where}: the schedule's best metric {str(value)[:30]} is "
                                     "not a number")
        elif key not in _MOVING and (type(value) is not type(start) or value != start):
            if not (isinstance(start, list) and isinstance(value, list) and len(value) == len(
                    start) and all(_finite(v) and math.isclose(v, s, rel_tol=_SLACK)
                                   for v, s in zip(value, start))):
                raise LoopStateError(f"{where}: the schedule's {key} is {str(value)[:30]}, the "
                                     f"run's {str(start)[:30]}; the checkpoint is damaged")
