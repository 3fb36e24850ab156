"""Where a Plexus job runs on the engine's side: starting local workers with torch's elastic
launcher (`local`, `world`, `child`, `bootstrap`), host memory statistics (`memstats`), progress.
Launcher detection, the process group, the lifeline and host memory settings are the
partitioner's too and live in `plexus_partition.launch` (old paths `plexus.runtime.env`, ...
still work through 0.2.x, removed in 0.3.0)."""
