"""The engine's command-line entry points (``[project.scripts]``), each started by
`plexus_partition.console.run_tool` (a Ctrl-C while torch loads ends it with one line and status
130; see there). ``plexus-partition``'s own entry point is the partitioner project's."""

from __future__ import annotations

from typing import Any

from plexus_partition.console import plexus_partition, run_tool

__all__ = ["plexus_train", "plexus_partition", "plexus_model", "plexus_bench", "plexus_sweep",
           "plexus_report", "plexus_predict"]


def plexus_train() -> int:
    return run_tool("plexus-train", "plexus.train.cli:main")


def _recipe(name: str) -> Any:
    """An OGB recipe by name, for ``plexus-model --recipe`` (the performance model may not
    import the API that holds them; only a run that names one imports it)."""
    from plexus.api.recipes import get_recipe  # noqa: PLC0415 (torch)

    return get_recipe(name)


def plexus_model() -> int:
    return run_tool("plexus-model", "plexus.perfmodel.cli:model_main", recipe_lookup=_recipe)


def plexus_bench() -> int:
    return run_tool("plexus-bench", "plexus.bench.cli:bench_main")


def plexus_sweep() -> int:
    return run_tool("plexus-sweep", "plexus.studies.cli:sweep_main")


def plexus_report() -> int:
    return run_tool("plexus-report", "plexus.studies.cli:report_main")


def plexus_predict() -> int:
    return run_tool("plexus-predict", "plexus.train.predict:main")
