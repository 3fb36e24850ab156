"""``plexus-bench`` (its console entry point): the performance model's ``calibrate``
(`plexus.perfmodel.benchcli.bench_main`) with ``check`` (`plexus.bench.check`), which runs the
engine and so cannot live in the performance model."""

from __future__ import annotations

from typing import Any, Sequence

from .check import add_arguments, check_main
from .stepcost import step_seconds


def _check_command() -> Any:
    """``plexus-bench check`` as a `plexus.perfmodel.benchcli.BenchCommand`."""
    from plexus.perfmodel.benchcli import BenchCommand

    return BenchCommand(
        "check", help="check the engine against its serial model on this machine's devices",
        description="Run a few grids of 1, 2, 4, ... up to --world-size ranks (GCN and GAT, an "
                    "undirected and a directed small graph) against the serial model: one line "
                    "per check with PASS/FAIL, the largest differences of logits, loss and "
                    "gradients, the backend and device, memory per rank and step time. NCCL "
                    "with one rank per GPU where CUDA is used, gloo on the CPU. Exit 0 if all "
                    "pass, 1 if any fails, 2 on bad input.",
        add_arguments=add_arguments, main=check_main)


def bench_parser() -> Any:
    """The whole ``plexus-bench`` parser (``calibrate`` and ``check``), as ``--help`` prints
    it (docs/options.py generates the options reference from it)."""
    from plexus.perfmodel.benchcli import bench_parser as perfmodel_parser

    return perfmodel_parser([_check_command()])


def bench_main(argv: Sequence[str] | None = None) -> int:
    """``plexus-bench`` (its console entry point): the performance model's commands
    (`plexus.perfmodel.benchcli.bench_main`) and ``check``."""
    from plexus.perfmodel.benchcli import bench_main as perfmodel_bench_main

    return perfmodel_bench_main(argv, [_check_command()], mask_pass=dropout_pass,
                                step_timer=step_seconds)


def dropout_pass(x: Any) -> Any:
    """The training step's dropout of ``x`` (p 0.5, every row; the fused kernel on a GPU), what
    ``plexus-bench calibrate --device cuda`` times as the dropout-mask pass."""
    import torch  # noqa: PLC0415

    from plexus.engine.masks import dropout  # noqa: PLC0415

    with torch.no_grad():
        rows = torch.arange(x.shape[0], device=x.device)
        return dropout(x, 0, 0, 0, rows, 0, 0.5)
