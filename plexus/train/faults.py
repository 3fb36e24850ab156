"""Deliberate failures, for testing how a job fails (``plexus-train --inject-fault``, hidden).

A failure handler that is never exercised does not work: the tests make one rank raise, die by
SIGKILL or hang at a chosen epoch and check that the whole job ends, promptly, naming the rank;
or make one rank's optimizer step leave NaN in a weight (``nan``), which no checkpoint may keep.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Any, Mapping

import torch

KINDS = ("raise", "kill", "hang", "nan")


class InjectedFault(RuntimeError):
    """The failure `Fault` raises on purpose."""


@dataclass(frozen=True)
class Fault:
    """Fail on ``rank`` after epoch ``epoch``: raise, SIGKILL itself, or hang (sleep)."""

    rank: int
    epoch: int
    kind: str

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """"KIND:RANK:EPOCH", e.g. "raise:1:3". Raises ValueError on other input."""
        m = re.fullmatch(r"(\w+):(\d+):(\d+)", text.strip())
        if not m or m.group(1) not in KINDS:
            raise ValueError(f"--inject-fault {text!r}: expected KIND:RANK:EPOCH with KIND one "
                             f"of {', '.join(KINDS)}")
        return cls(int(m.group(2)), int(m.group(3)), m.group(1))

    def maybe_corrupt(self, rank: int, epoch: int, shards: Mapping[str, Any]) -> None:
        """``nan``: fill this rank's shard of the first parameter (by name) with NaN, as a
        diverged optimizer step of ``epoch`` would, before the epoch's checks."""
        if self.kind == "nan" and rank == self.rank and epoch == self.epoch and shards:
            shard = shards[sorted(shards)[0]]
            with torch.no_grad():
                shard.fill_(float("nan"))

    def maybe_fire(self, rank: int, epoch: int) -> None:
        """Fail here if this is the chosen rank and epoch."""
        if rank != self.rank or epoch != self.epoch or self.kind == "nan":
            return
        if self.kind == "raise":
            raise InjectedFault(f"fault injected on rank {rank} after epoch {epoch}")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # "hang": a stuck peer; the others' collectives must time out
            time.sleep(60)
