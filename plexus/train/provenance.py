"""Where a run ran and on what, for the JSON log's summary: host and GPU names, library versions,
how the ranks were laid out over hosts, and the graph's sizes. A scaling report reads these from
logs gathered on any machine (``plexus-report``), so a log must describe its run by itself."""

from __future__ import annotations

import os
import platform
import socket
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from plexus_partition.model.grid import AXES
from plexus_partition.plan import block_key

from .session import Run


def rank_facts(run: Run) -> dict[str, Any]:
    """What this rank knows about itself: host, device, and its share of Â's non-zeros."""
    gpu = None
    if run.grid.device.type == "cuda":
        gpu = torch.cuda.get_device_name(run.grid.device)
    # Layer 0's Â block is replicated over one axis: only the ranks at coordinate 0 of that
    # axis count their non-zeros, so the sum over ranks is nnz(Â) once. A model that aggregates
    # nothing (an MLP) holds no Â block: it reads 0 non-zeros.
    plan = run.shard.plans[0]
    replicated = next(a for a in AXES if a not in (plan.a_rows, plan.a_cols))
    counted = run.shard.coords[replicated] == 0 and block_key(plan) in run.shard.blocks
    nnz = run.shard.adj_block(0).nnz if counted else 0
    return {"host": socket.gethostname(), "gpu": gpu, "nnz": int(nnz)}


def gather_provenance(run: Run) -> dict[str, Any] | None:
    """Collective: the ``environment`` and ``graph`` records of the summary, on rank 0 (None on
    the other ranks)."""
    facts: list[dict[str, Any] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(facts, rank_facts(run))
    if run.grid.rank != 0:
        return None
    ranks = [f for f in facts if f is not None]
    per_host = Counter(f["host"] for f in ranks)
    gpus = sorted({f["gpu"] for f in ranks if f["gpu"]})
    environment = {
        "host": ranks[0]["host"],
        "hosts": len(per_host),
        "ranks_per_host": dict(sorted(per_host.items())),
        "rank_hosts": [f["host"] for f in ranks],
        "device": run.grid.device.type,
        "gpu": gpus[0] if len(gpus) == 1 else (gpus or None),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads_per_rank": torch.get_num_threads(),
        "cpus_on_host": os.cpu_count(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    graph = {"nodes": run.shard.num_nodes, "nnz": sum(f["nnz"] for f in ranks),
             "features": run.shard.num_features, "classes": run.shard.num_classes}
    return {"environment": environment, "graph": graph}
