"""The engine's plain-Python helpers (no torch): `units` for reports, `timing` of repeated
calls, `maskhash` (the dropout masks' hash of global ids).

The rest of what was here moved, with the projects it is shared by (old paths still work for
one release, see `plexus.oldpaths`): the model as values (grid, layouts, the kinds, the
schedule) to `plexus_partition.model`, the file-safety base (owned files, atomic writes, locks,
tasks) to `plexus_datasets.base`.
"""
