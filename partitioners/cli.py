"""``plexus-partition``: cut a dataset into per-rank shard files, or report load balance.

    plexus-partition --dataset SPEC [--root DIR] --grid XxYxZ --layers L --perm double \\
                     [--orders agg[,combine...]] [--seed S] --out DIR [--force]
    plexus-partition --dataset SPEC --grid XxYxZ --layers L --stats-only [--json]

Bad input ends with one line ``plexus-partition: error: ...`` on stderr and exit status 2,
before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

from plexus.core.cli import ArgumentParser, UsageError, report_error
from plexus.core.grid import GridShape
from plexus.core.layout import DEFAULT_PERMUTATION, ORDERS, grid_misfit, layer_plans

from .permutations import PERMUTATIONS

PROG = "plexus-partition"


def parse_orders(text: str, num_layers: int) -> list[str]:
    """One order for all layers (``agg``) or a comma-separated order per layer."""
    orders = [o.strip() for o in text.split(",")]
    bad = [o for o in orders if o not in ORDERS]
    if bad:
        raise UsageError(f"unknown layer order {bad[0]!r}; use {' or '.join(ORDERS)}")
    if len(orders) == 1:
        return orders * num_layers
    if len(orders) != num_layers:
        raise UsageError(f"--orders lists {len(orders)} orders for {num_layers} layers")
    return orders


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (errors raise `UsageError` instead of exiting)."""
    p = ArgumentParser(prog=PROG, description="Partition a graph into 3D shards for plexus-train.")
    p.add_argument("--dataset", required=True, help="dataset spec, e.g. cora or rmat:scale=18")
    p.add_argument("--root", default=None,
                   help="directory holding the dataset's files (nothing is ever downloaded)")
    p.add_argument("--grid", required=True, help="process grid XxYxZ, e.g. 4x2x2")
    p.add_argument("--layers", type=int, required=True, help="number of GCN layers")
    p.add_argument("--orders", default="agg",
                   help="product order, one for all layers or one per layer (agg,combine)")
    p.add_argument("--perm", default=DEFAULT_PERMUTATION, choices=PERMUTATIONS,
                   help="load-balancing permutation (default: double)")
    p.add_argument("--seed", type=int, default=0, help="permutation seed (default 0)")
    p.add_argument("--dataset-seed", type=int, default=0,
                   help="seed of synthetic datasets/features (default 0)")
    p.add_argument("--out", default=None,
                   help="store directory to write (an existing store is kept unless --force)")
    p.add_argument("--force", action="store_true",
                   help="replace the shard store already at --out")
    p.add_argument("--stats-only", action="store_true",
                   help="print the imbalance of every permutation; write nothing")
    p.add_argument("--json", action="store_true", help="with --stats-only: print JSON")
    return p


def _load(args):
    from plexus.datasets import load_dataset  # noqa: PLC0415 (heavy; only once input is valid)

    return load_dataset(args.dataset, root=args.root, seed=args.dataset_seed)


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and do the work; raises `UsageError` (or a ValueError/OSError) on bad
    input."""
    args = build_parser().parse_args(argv)
    shape = GridShape.parse(args.grid)
    if args.layers < 1:
        raise UsageError(f"--layers must be >= 1, got {args.layers}")
    orders = parse_orders(args.orders, args.layers)
    if args.json and not args.stats_only:
        raise UsageError("--json applies to --stats-only")
    if not args.stats_only and args.out is None:
        raise UsageError("--out is required unless --stats-only is given")

    from .stats import balance_report, format_report  # noqa: PLC0415
    from .store import check_out_dir, is_store, write_store  # noqa: PLC0415

    if not args.stats_only:
        if is_store(args.out) and not args.force:
            raise UsageError(f"--out {args.out}: a shard store is already there; add --force to "
                             "replace it, or choose another directory")
        check_out_dir(args.out)  # refuse before spending time on the dataset
    graph = _load(args)
    plans = layer_plans(args.layers, orders)
    problem = grid_misfit(shape, plans, graph.num_nodes, [graph.num_features]
                          + [None] * (args.layers - 1) + [graph.num_classes])
    if problem:
        raise UsageError(problem)
    if args.stats_only:
        from plexus.datasets.graph import gcn_normalize  # noqa: PLC0415

        adj_hat = gcn_normalize(graph.adj, graph.directed)
        report = balance_report(adj_hat, shape, args.layers, orders, args.seed)
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        return 0
    start = time.perf_counter()
    manifest = write_store(graph, args.out, shape, args.layers, orders, args.perm, args.seed)
    total = sum(r["size"] for r in manifest["ranks"])
    print(f"{PROG}: wrote {len(manifest['ranks'])} shards of {graph.name} "
          f"(N={graph.num_nodes}, nnz={manifest['nnz']}) for grid {shape}, "
          f"{args.layers} layers, perm {args.perm}: {total / 2**20:.1f} MiB in {args.out} "
          f"({time.perf_counter() - start:.1f}s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit status 0 on success, 2 with one stderr line on bad input."""
    try:
        return run(argv)
    except (ValueError, OSError) as e:  # UsageError, DatasetError, ShardStoreError, GridError
        return report_error(PROG, str(e) or type(e).__name__)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
