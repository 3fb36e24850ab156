"""Scaling studies: ``plexus-sweep`` plans a set of ``plexus-train`` runs (grids of each world
size, listed, every factorization, or the performance model's pick; weak scaling grows the dataset
with the world size), runs them one after another on this machine (plexus-train's own local
workers, or torchrun) or writes SLURM batch scripts for them, each run writing its JSON log into
one results folder beside a manifest of what was asked; a second invocation skips the runs whose
log is complete. ``plexus-report`` reads those logs, from whichever machine wrote them, into one
CSV row per run and the figures of a scaling study. Modules: `plan` (which runs), `launchers`
(their command lines and batch scripts), `sweep` (running or writing them, the manifest),
`collect` (logs to rows, with the model's predictions), `plots` and `cli`. This is an application
package: it drives ``plexus-train`` as a subprocess and may import the engine's configuration,
the performance model, the datasets and the core; nothing in the library imports it.
"""
