"""Test support on one machine: `localworld.run_world` runs a function on every rank of a fresh
local gloo world and collects what each rank returns; `gridrun` measured runs on such worlds;
`exactness` holds the distributed model against the serial one (the tolerance, small graphs);
`opcount` counts a step's operators; `pyg_reference`, PyG's models. The tools built on them
(``plexus-bench``, the report writers) are `plexus.bench`; the fuzz harnesses are test support
outside the package (``tests/fuzzing/``)."""
