"""Helpers for tests, benchmarks and calibration on one machine: `localworld.run_world` runs a
function on every rank of a fresh local gloo world and collects what each rank returns;
`exactness` holds the distributed model against the serial one (the tolerance, small graphs);
`firstrun` is ``plexus-bench check``, those comparisons on a user's own machine."""
