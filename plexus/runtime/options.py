"""The command-line options of where a job's ranks run, one text for every tool that starts
ranks (``plexus-train``, ``plexus-bench check``): which device and how many torch threads per
rank. Their rules are `plexus_partition.launch.env.use_cuda` and `threads_per_worker`."""

from __future__ import annotations

import argparse

from plexus_partition.launch.env import DEVICES


def add_device_options(group: argparse._ActionsContainer) -> None:
    """``--device`` and ``--threads``."""
    group.add_argument("--device", choices=DEVICES,
                       help="cuda: one GPU per local rank, NCCL (where more local ranks than "
                            "GPUs share them: gloo through host memory); cpu: gloo on the CPU "
                            "(default: cuda where it is available, else cpu)")
    group.add_argument("--threads", type=int, metavar="N",
                       help="torch (and BLAS) threads per rank, at most 1024 (default: "
                            "$OMP_NUM_THREADS when set, else the node's cores shared evenly "
                            "among its ranks)")
