"""`run_world` for tests and benchmarks: a function on every rank of a fresh local gloo world (the
one implementation is `plexus.runtime.world`)."""

from plexus.runtime.world import run_world

__all__ = ["run_world"]
