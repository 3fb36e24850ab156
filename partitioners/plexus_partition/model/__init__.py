"""The model a store is cut for, as plain values (no torch): `grid` (the X×Y×Z grid),
`layout` (each layer's axis roles, blocks and padding), `model` (`ModelConfig`, its plan of
stages) and `modelopts` (its flags), every layer kind's declaration in `ops` (parameters,
collectives, flops, memory, options: its torch-free spec; its torch code is the engine's,
`plexus.engine.kinds`), `schedule`
(every collective of an epoch), `bounds` and `cli` (one table of limits, one-line errors).
The partitioner cuts by it and the engine (`plexus`) runs by it, so the two always agree; their
old path `plexus.core.<name>` still works."""
