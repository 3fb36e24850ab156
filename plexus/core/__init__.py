"""The engine's plain-Python helpers (no torch): `units` for reports, `timing` of repeated
calls, `maskhash` (the dropout masks' hash of global ids).

The rest of what was here moved, with the projects it is shared by (old paths still work
through 0.2.x, removed in 0.3.0, see `plexus.oldpaths`): the model as values (grid, layouts, the kinds, the
schedule) to `plexus_partition.model`, the file-safety base (owned files, atomic writes, locks,
tasks) to `plexus_datasets.base`.
"""
