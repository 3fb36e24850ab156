"""The rules every part of Plexus shares, in plain Python (no torch, nothing else of Plexus).

`grid` (the X×Y×Z grid as one value), `layout` (each layer's axis roles, blocks and padding),
`schedule` (every collective of an epoch, the one description the engine, the performance model
and the tests share), and small utilities: `atomic` file writes and directory replaces, `tasks`
(resumable phases of tasks, which the datasets' converters and the partitioner run on),
`values` (counts read from JSON, one-line messages), `units` for reports, `timing` of repeated
calls, `cli` for one-line command-line errors. The partitioner (which writes shards) and the
engine (which reads them) both build on `layout`, so the two always agree.
"""
