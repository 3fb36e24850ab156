"""``plexus-train``, the training application built on the engine (reached through
`plexus.api`).

`parser` (the flags and their defaults), `cli` (the options' checks into the run's request,
`build_plan`), `plan` (`RunRequest`; `ResolvedRun`, handed to every rank; and its pricing: the
grid of --grid auto, the grid-fit and memory checks), `resolve` (the request resolved once, by
the launching process or by every rank), `checks` (paths and datasets checked before any worker
starts), `cachecli` (--cache-list, --cache-clean), `entry`
(what each rank runs, and the local launch), `prepare` (a rank's local set-up and the agreement
on failure), `session` (the collective set-up and what follows every epoch), `report` (the end of
the run), `checkpoint`, `runlog` (epoch lines, JSON log, summary),
`faults` (injected failures for tests), `errors` (typed errors and the one-line messages).
``python -m plexus.train`` is the same command.
"""

from .cli import main

__all__ = ["main"]
