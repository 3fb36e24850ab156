"""The heartbeat of a ``--quiet`` run: a line every so often (epoch, rate, ETA), so a long run
that prints nothing else still shows it is alive and when it will end.

It speaks only at an epoch's end, where the loop already holds the epoch's loss on the host:
it adds no synchronisation to the step. An epoch longer than the interval gets one line at its
end, never more.
"""

from __future__ import annotations

import time
from typing import Callable

#: Seconds between heartbeat lines by default (``--heartbeat``).
DEFAULT_HEARTBEAT_S = 30.0


def format_duration(seconds: float) -> str:
    """3725 -> '1h02m05s'; 65 -> '1m05s'; 4.2 -> '4s'."""
    s = int(round(max(seconds, 0.0)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s" if m else f"{s}s"


class Heartbeat:
    """Says, at most every ``interval_s`` seconds, how far a run of ``total`` epochs is: the
    epoch, epochs per second since the run's (or resume's) start at ``start_epoch``, and the
    time left at that rate. ``interval_s`` <= 0: never."""

    def __init__(self, interval_s: float, total: int, start_epoch: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self.total, self.start_epoch = interval_s, total, start_epoch
        self.clock = clock
        self.started = self.last = clock()

    def beat(self, epoch: int) -> str | None:
        """The line to print after ``epoch`` ended, or None when the interval has not passed."""
        if self.interval_s <= 0:
            return None
        now = self.clock()
        if now - self.last < self.interval_s:
            return None
        self.last = now
        done, elapsed = epoch - self.start_epoch, now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        left = self.total - epoch
        eta = format_duration(left / rate) if rate > 0 else "unknown"
        per = (f"{rate:.3g} epochs/s" if rate >= 1 else
               f"{1 / rate:.3g} s/epoch" if rate > 0 else "no epoch yet")
        width = len(str(self.total))
        return (f"heartbeat: epoch {epoch:>{width}}/{self.total} "
                f"({100 * epoch / max(self.total, 1):.0f}%), {per}, "
                f"elapsed {format_duration(elapsed)}, ETA {eta}")
