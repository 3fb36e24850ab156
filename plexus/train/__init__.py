"""``plexus-train``, the training application built on the engine.

`cli` (options and their checks), `checks` (input checks before any worker starts), `entry`
(what each rank runs, and the local launch), `prepare` (a rank's local set-up and the agreement
on failure), `session` (the collective set-up and what follows every epoch), `report` (the end of
the run), `checkpoint`, `runlog` (epoch lines, JSON log, summary),
`faults` (injected failures for tests), `errors` (typed errors and the one-line messages).
``python -m plexus.train`` is the same command.
"""

from .cli import main

__all__ = ["main"]
