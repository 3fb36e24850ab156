"""The plain-Python base the three Plexus projects share (no torch, nothing else of Plexus):
`gate` (where a write lands, refused when another user could have chosen it), `owned` (files
and directories this user's Plexus made, signed, and the only deletions), `atomic` file writes
and directory replaces, `lockfile`, `tasks` (resumable phases of tasks the converters, the
partitioner and the engine's cache run on), `values` (counts read from JSON, one-line
messages), `writebehind`. It ships with the datasets project, the lowest of the three;
`plexus_partition` and `plexus` build on it (their old path `plexus.core.<name>` still works)."""
