"""What a rank is handed beside the run (`plexus.train.plan.RunRequest`/`ResolvedRun`, what the
user asked): the facts of this job's launch, how the cache came by the store the run reads, and
the failure a test asks the ranks to meet. None of them is an option of the run: ranks do not
prove them to each other, and a resolved run does not depend on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plexus.core.units import format_seconds

from .faults import Fault


@dataclass(frozen=True)
class JobFacts:
    """``launched_at``: when the command started (`time.time`): the run's wall time counts
    start-up from there (None: from the rank's own process start, a rank of torchrun/srun);
    ``setup_script_s``: ./run's set-up before the command (not counted in the start-up);
    ``cache``: the cache's summary of the store the run reads (`plexus.train.cache`; None: the
    shards are not the cache's); ``fault``: ``--inject-fault`` (tests of failure handling)."""

    launched_at: float | None = None
    setup_script_s: float = 0.0
    cache: dict[str, Any] | None = None
    fault: Fault | None = None

    def startup_origin(self) -> str:
        """Where the summary's start-up counts from, in words (./run's set-up named and left
        out)."""
        if self.launched_at is None:
            return "this rank's process start"
        if self.setup_script_s >= 0.05:
            return (f"the command's start, after ./run's set-up "
                    f"({format_seconds(self.setup_script_s)}, not counted)")
        return "the command's start"
