"""``plexus-bench`` and the report writers: `check` (the engine against its serial model on
this machine's devices), `cli` (the command, with the performance model's ``calibrate``) and
`output` (atomic CSV/JSON/text/PNG writers, machine facts and statistics for benchmarks and
studies). Built on the test support of `plexus.testing`, which imports nothing of it."""
