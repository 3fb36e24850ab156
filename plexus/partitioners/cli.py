"""``plexus-partition``: cut a dataset into per-rank shard files, or report load balance.

    plexus-partition --dataset SPEC [--root DIR] --grid XxYxZ --layers L --perm double \\
                     [--orders auto|agg[,combine...]] [--hidden H] [--aggregation gcn] \\
                     [--seed S] --out DIR \\
                     [--force] [--jobs N]
    torchrun --nnodes M --nproc-per-node K -m plexus.partitioners.cli ...   (or srun)
    plexus-partition --dataset SPEC --grid XxYxZ --layers L --stats-only [--json]

The store is written by the out-of-core partitioner (`plexus.partitioners.partition_to_store`):
memory does not grow with the number of edges; R-MAT and OGB datasets are converted in pieces,
``graph:DIR`` reads a graph directory. ``--jobs N`` runs N processes on this machine; under
torchrun or srun every rank takes a share. A killed run leaves any previous store intact and
resumes when run again. Bad input ends with one line ``plexus-partition: error: ...`` on stderr
and exit status 2, with nothing left on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

from plexus.core.cli import ArgumentParser, UsageError, report_error
from plexus.core.grid import GridShape
from plexus.core.layout import (DEFAULT_PERMUTATION, STAGE_ORDERS, grid_misfit,
                                 layer_plans)
from plexus.core.model import AUTO_ORDER, MAX_LAYERS, ModelError, parse_order
from plexus.core.modelopts import DEFAULT_HIDDEN
from plexus.datasets.canonical import BUCKET_ENTRIES, CHUNK_EDGES
from plexus.datasets.diskgraph import FEATURE_DTYPES
from plexus.datasets.graph import AGGREGATIONS

from .permutations import PERMUTATIONS
from .streamjob import PartitionInterrupted

PROG = "plexus-partition"


def parse_orders(text: str, num_stages: int) -> tuple[str, ...] | str:
    """``--orders``: ``auto`` (plexus-train's default, resolved once the graph's widths are
    known), one order for all stages (``agg``) or a comma-separated order per stage
    (`plexus.core.model.parse_order`, the one parser, with the stages' orders)."""
    try:
        return parse_order(text, num_stages, allowed=STAGE_ORDERS, unit="stage")
    except ModelError as e:
        raise UsageError(f"--orders: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (errors raise `UsageError` instead of exiting)."""
    p = ArgumentParser(prog=PROG, description="Partition a graph into 3D shards for plexus-train.")
    p.add_argument("--dataset", required=True, help="dataset spec, e.g. cora or rmat:scale=18")
    p.add_argument("--root", default=None,
                   help="directory holding the dataset's files (nothing is ever downloaded)")
    p.add_argument("--grid", required=True, help="process grid XxYxZ, e.g. 4x2x2")
    p.add_argument("--layers", type=int, required=True,
                   help="number of stages: a GCN, SAGE or GAT layer is one, a GIN layer two "
                        "(--layers 4 for 2 GIN layers)")
    p.add_argument("--orders", default=AUTO_ORDER,
                   help="product order: auto (the default, as plexus-train's: combine on the "
                        "layers that narrow for --hidden, e.g. combine,combine for a 2-layer "
                        "GCN on Cora; for --aggregation sum, GIN's agg,dense stages), one for all stages (agg, the "
                        "paper's; combine) or one per stage (agg,combine,dense); plexus-train "
                        "--shards trains with the store's orders")
    p.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, metavar="H",
                   help=f"hidden width of the model that will train on the store, for --orders "
                        f"auto (default {DEFAULT_HIDDEN}, plexus-train's)")
    p.add_argument("--perm", default=DEFAULT_PERMUTATION, choices=PERMUTATIONS,
                   help="load-balancing permutation (default: double)")
    p.add_argument("--seed", type=int, default=0, help="permutation seed (default 0)")
    p.add_argument("--dataset-seed", type=int, default=0,
                   help="seed of synthetic datasets/features (default 0)")
    p.add_argument("--out", default=None,
                   help="store directory to write (an existing store is kept unless --force)")
    p.add_argument("--force", action="store_true",
                   help="replace the shard store already at --out (only a store this user's "
                        "Plexus wrote, with nothing added: README \"Shared machines\")")
    p.add_argument("--aggregation", default="gcn", choices=AGGREGATIONS,
                   help="the normalized adjacency to cut: gcn (GCN), mean (GraphSAGE), sum (GIN)")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes on this machine (default 1; under torchrun/srun each rank "
                        "is one)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch and BLAS threads of this process, and of each rank under "
                        "torchrun/srun (default: $OMP_NUM_THREADS when set, else the "
                        "libraries' own; --jobs workers use one each)")
    p.add_argument("--graph-dir", default=None,
                   help="keep the converted dataset (a graph directory) here, or read it from "
                        "here when it is already there")
    p.add_argument("--feature-dtype", default=None, choices=FEATURE_DTYPES,
                   help="how a converted dataset stores features (default: as its files do)")
    p.add_argument("--chunk-edges", type=int, default=CHUNK_EDGES,
                   help=f"edges read at once (default {CHUNK_EDGES}; memory, not the result)")
    p.add_argument("--bucket-entries", type=int, default=BUCKET_ENTRIES,
                   help=f"non-zeros sorted at once (default {BUCKET_ENTRIES})")
    p.add_argument("--verbose", action="store_true", help="print every phase's time and rate")
    p.add_argument("--stats-only", action="store_true",
                   help="print the imbalance of every permutation; write nothing")
    p.add_argument("--json", action="store_true", help="with --stats-only: print JSON")
    return p


def apply_threads(requested: int | None) -> None:
    """Use ``requested`` threads (--threads), else OMP_NUM_THREADS's, in this process; a rank
    under torchrun/srun reads the variable when it joins its group, so --threads sets it."""
    from plexus.runtime.env import LaunchError, THREADS_ENV, env_threads  # noqa: PLC0415

    if requested is not None and requested < 1:
        raise UsageError(f"--threads must be >= 1, got {requested}")
    try:
        threads = requested if requested is not None else env_threads()
    except LaunchError as e:
        raise UsageError(f"{e}, or give --threads N") from None
    if threads is None:
        return
    os.environ[THREADS_ENV] = str(threads)
    import torch  # noqa: PLC0415
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    torch.set_num_threads(threads)
    threadpool_limits(threads)


def _load(args):
    from plexus.datasets import load_dataset  # noqa: PLC0415 (heavy; only once input is valid)

    return load_dataset(args.dataset, root=args.root, seed=args.dataset_seed)


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and do the work; raises `UsageError` (or a ValueError/OSError) on bad
    input."""
    args = build_parser().parse_args(argv)
    shape = GridShape.parse(args.grid)
    if not 1 <= args.layers <= MAX_LAYERS:
        raise UsageError(f"--layers must be in [1, {MAX_LAYERS}], got {args.layers}")
    if args.hidden < 1:
        raise UsageError(f"--hidden must be >= 1, got {args.hidden}")
    orders = parse_orders(args.orders, args.layers)
    if orders == AUTO_ORDER and args.aggregation == "sum" and args.layers % 2:
        raise UsageError(f"--layers counts stages and a GIN layer is two (agg, dense): "
                         f"--layers {args.layers} makes no whole GIN layers; give an even count")
    if args.json and not args.stats_only:
        raise UsageError("--json applies to --stats-only")
    if not args.stats_only and args.out is None:
        raise UsageError("--out is required unless --stats-only is given")
    apply_threads(args.threads)
    for flag in ("jobs", "chunk_edges", "bucket_entries"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1, got "
                             f"{getattr(args, flag)}")

    if args.stats_only:
        return _stats(args, shape, orders)

    from plexus.datasets.convert import streamed_spec  # noqa: PLC0415

    from .pipeline import partition_to_store  # noqa: PLC0415
    from .store import check_out_dir, is_store  # noqa: PLC0415

    if is_store(args.out) and not args.force:
        raise UsageError(f"--out {args.out}: a shard store is already there; add --force to "
                         "replace it, or choose another directory")
    check_out_dir(args.out)  # refuse before spending time on the dataset
    dataset = args.dataset if streamed_spec(args.dataset) else _load(args)
    start = time.perf_counter()
    timings: list = []
    manifest = partition_to_store(
        dataset, args.out, shape, args.layers, orders, args.perm, args.seed,
        aggregation=args.aggregation, root=args.root, dataset_seed=args.dataset_seed,
        jobs=args.jobs, graph_dir=args.graph_dir, chunk_edges=args.chunk_edges,
        bucket_entries=args.bucket_entries, feature_dtype=args.feature_dtype, timings=timings,
        hidden=args.hidden, keep_existing=not args.force)
    seconds = time.perf_counter() - start
    if not _leader():
        return 0
    if args.verbose:
        for t in timings:
            print(f"{PROG}: phase {t.phase}: {t.seconds:.1f}s, {t.tasks_run}/{t.tasks} tasks"
                  + (f", {t.amount / 1e6:.1f}M {t.unit}s ({t.rate / 1e6:.2f}M/s)"
                     if t.amount and t.unit in ("edge", "node") else "")
                  + f", peak RSS {t.peak_rss / 2**20:.0f} MiB")
    total = sum(r["size"] for r in manifest["ranks"])
    procs = _processes(args.jobs)
    print(f"{PROG}: wrote {len(manifest['ranks'])} shards of {manifest['dataset']} "
          f"(N={manifest['num_nodes']}, nnz={manifest['nnz']}) for grid {shape}, "
          f"{args.layers} layers, perm {args.perm}: {total / 2**20:.1f} MiB in {args.out} "
          f"({seconds:.1f}s, {manifest['nnz'] / max(seconds, 1e-9) / procs / 1e6:.2f}M "
          f"non-zeros/s per process, {procs} process{'es' if procs > 1 else ''})")
    return 0


def _stats(args, shape: GridShape, orders: Sequence[str] | str) -> int:
    """``--stats-only``: the imbalance of every permutation (the graph is loaded in memory)."""
    from .pipeline import auto_stage_orders  # noqa: PLC0415
    from .stats import balance_report, format_report  # noqa: PLC0415

    graph = _load(args)
    if orders == AUTO_ORDER:
        orders = auto_stage_orders(args.layers, args.hidden, graph.num_features,
                                   graph.num_classes, args.aggregation)
    plans = layer_plans(args.layers, orders)
    problem = grid_misfit(shape, plans, graph.num_nodes, [graph.num_features]
                          + [None] * (args.layers - 1) + [graph.num_classes])
    if problem:
        raise UsageError(problem)
    adj_hat = graph.normalized(args.aggregation)
    report = balance_report(adj_hat, shape, args.layers, orders, args.seed)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _leader() -> bool:
    """Whether this process reports (rank 0 under torchrun/srun)."""
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def _processes(jobs: int) -> int:
    from .jobs import launched, launcher_env  # noqa: PLC0415

    env = launcher_env() if launched() else None
    return env.world_size if env is not None else jobs


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit status 0 on success, 2 with one stderr line on bad input."""
    from plexus.runtime.hostmem import keep_freed_heap_memory  # noqa: PLC0415

    keep_freed_heap_memory()  # before the first chunk; --jobs workers inherit it
    try:
        return run(argv)
    except (ValueError, OSError) as e:  # UsageError, DatasetError, ShardStoreError, GridError,
        # PartitionError
        return report_error(PROG, e if str(e) else type(e).__name__)
    except PartitionInterrupted as e:  # not the input's fault: status 1, the work is kept
        return report_error(PROG, e, status=1)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
