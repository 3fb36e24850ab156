"""Where a run's wall time went, as figures that add up (rank 0's clock).

    total = start-up + set-up + training steps + evaluation + other

- start-up: from the command's start (``plexus-train`` itself: the interpreter, imports, the
  shard cache, starting the workers) to the rank's start; under torchrun/srun, from the rank's
  own process start;
- set-up: from the rank's start to the first epoch (process group, dataset or shard, model,
  restored checkpoint);
- training steps: Σ of every epoch's forward/backward/update (``EpochStats.epoch_time_s``);
- evaluation: Σ of every evaluation of train/val/test accuracy, the final one included;
- other: the rest of the total: checkpoints, logs, and the end's reductions for the summary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from plexus.core.units import format_seconds
from plexus.api.training import EpochStats


@dataclass(frozen=True)
class WallTime:
    """A run's wall time in seconds, split into parts whose sum is `total_s`."""

    total_s: float
    setup_s: float
    train_steps_s: float
    eval_s: float
    startup_s: float = 0.0

    @property
    def other_s(self) -> float:
        """Checkpoints, logs and the summary's reductions: what the other parts leave."""
        return (self.total_s - self.startup_s - self.setup_s - self.train_steps_s
                - self.eval_s)

    def as_dict(self) -> dict[str, float]:
        """Plain types for the JSON log, ``other_s`` included."""
        return {**asdict(self), "other_s": self.other_s}

    @classmethod
    def of(cls, history: Sequence[EpochStats], setup_s: float, total_s: float,
           final_eval_s: float = 0.0, startup_s: float = 0.0) -> "WallTime":
        """From the epochs run, the start-up and set-up times, the total (start-up included)
        and a final evaluation's time."""
        return cls(total_s=total_s, setup_s=setup_s,
                   train_steps_s=sum(s.epoch_time_s for s in history),
                   eval_s=sum(s.eval_time_s for s in history) + final_eval_s,
                   startup_s=startup_s)


def format_wall_time(w: dict[str, float], epochs_run: int, evaluations: int,
                     startup_from: str = "the command's start") -> list[str]:
    """The summary's lines: the total as the sum of its labelled parts, then what they count."""
    per_step = w["train_steps_s"] / epochs_run if epochs_run else 0.0
    steps = f"{epochs_run} step{'s' if epochs_run != 1 else ''}"
    startup = w.get("startup_s", 0.0)
    return [f"  wall time: {format_seconds(w['total_s'])} = start-up {format_seconds(startup)}"
            f" + set-up {format_seconds(w['setup_s'])}"
            f" + training steps {format_seconds(w['train_steps_s'])} + evaluation "
            f"{format_seconds(w['eval_s'])} + other {format_seconds(w['other_s'])}",
            f"    (start-up: from {startup_from} to the rank's start; {steps} of "
            f"{format_seconds(per_step)}; {evaluations} evaluation"
            f"{'s' if evaluations != 1 else ''}; other: checkpoints, logs, the summary)"]
