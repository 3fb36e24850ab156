"""``plexus-partition``: cut a dataset into per-rank shard files, or report load balance.

    plexus-partition --dataset SPEC [--root DIR] --grid XxYxZ [--model gcn] [--layers L] \\
                     [--perm double] [--orders auto|agg[,combine...]] [--hidden H] \\
                     [--seed S] --out DIR \\
                     [--force] [--jobs N]
    torchrun --nnodes M --nproc-per-node K -m plexus_partition.cli ...   (or srun)
    plexus-partition --dataset SPEC --grid XxYxZ [--model K --layers L] --stats-only [--json]

The store records the model kind and GNN layers it is cut for (``--model``, ``--layers`` as
plexus-train counts them; the kind's declaration in `plexus_partition.model.ops` says its stages per
layer and its Â), and every stage's order. Nothing here needs torch: a run under torchrun or
srun imports it to join its group.

The store is written by the out-of-core partitioner (`plexus_partition.pipeline.PartitionJob`):
memory does not grow with the number of edges; R-MAT and OGB datasets are converted in pieces,
``graph:DIR`` reads a graph directory. ``--jobs N`` runs N processes on this machine; under
torchrun or srun every rank takes a share. A killed run leaves any previous store intact and
resumes when run again. Bad input ends with one line ``plexus-partition: error: ...`` on stderr
and exit status 2, with nothing left on disk.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Sequence

from plexus_partition.model.cli import ArgumentParser, UsageError, report_error
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import (DEFAULT_PERMUTATION, STAGE_ORDERS, grid_misfit,
                                 layer_plans)
from plexus_partition.model.model import (AUTO_ORDER, MAX_LAYERS, ModelConfig, ModelError,
                                          parse_order)
from plexus_partition.model.modelopts import DEFAULT_HIDDEN, DEFAULT_KIND, DEFAULT_LAYERS
from plexus_partition.model.ops import KINDS
from plexus_datasets.canonical import BUCKET_ENTRIES, CHUNK_EDGES
from plexus_datasets.diskgraph import FEATURE_DTYPES
from plexus_datasets.graph import AGGREGATIONS
from plexus_datasets.spec import FEATURE_MODES, feature_mode

from .permutations import PERMUTATIONS
from .streamjob import PartitionInterrupted

PROG = "plexus-partition"


def parse_orders(text: str, model: ModelConfig) -> tuple[str, ...] | str:
    """``--orders``: ``auto`` (plexus-train's default, resolved once the graph's widths are
    known), one order for every layer (``agg``), one per GNN layer as plexus-train's ``--order``
    takes them (each expanded into its kind's stages), or one per stage (``agg,dense,...``, as
    the store records them); `plexus_partition.model.model.parse_order` is the one parser."""
    try:
        if text.strip() == AUTO_ORDER:
            return AUTO_ORDER
        parts = [o.strip() for o in text.split(",")]
        if len(parts) == model.num_stages and len(parts) != model.num_layers:
            return parse_order(text, model.num_stages, allowed=STAGE_ORDERS,  # type: ignore
                               unit="stage")
        layered = dataclasses.replace(model, order=text)  # checks the order, one per layer
        return tuple(layered.orders(0, 0))
    except ModelError as e:
        raise UsageError(f"--orders: {e}") from None


def model_of(args: argparse.Namespace) -> ModelConfig:
    """The model the store is cut for: ``--model``'s kind with ``--layers`` GNN layers and
    ``--hidden`` (what ``auto`` orders depend on); `UsageError` naming the flag."""
    if args.aggregation is not None:
        raise UsageError(_AGGREGATION_GONE.get(args.aggregation, _AGGREGATION_GONE["gcn"]))
    if not 1 <= args.layers <= MAX_LAYERS:
        raise UsageError(f"--layers must be in [1, {MAX_LAYERS}], got {args.layers}")
    if args.hidden < 1:
        raise UsageError(f"--hidden must be >= 1, got {args.hidden}")
    try:
        return ModelConfig(kind=args.model, num_layers=args.layers, hidden=args.hidden)
    except ModelError as e:
        raise UsageError(str(e)) from None


def _kinds_of(aggregation: str) -> str:
    return " or ".join(f"--model {k.name}" for k in KINDS.values() if k.aggregation == aggregation)


#: ``--aggregation``, gone: a store records the kind it is cut for, so the kind is asked for
_AGGREGATION_GONE = {a: (f"--aggregation is replaced by --model (the store records the kind it "
                         f"is cut for): for {a}'s Â give {_kinds_of(a)}; --layers now counts "
                         f"GNN layers, as plexus-train's does") for a in AGGREGATIONS}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (errors raise `UsageError` instead of exiting)."""
    p = ArgumentParser(prog=PROG, description="Partition a graph into 3D shards for plexus-train.")
    p.add_argument("--dataset", required=True, help="dataset spec, e.g. cora or rmat:scale=18")
    p.add_argument("--root", default=None,
                   help="directory holding the dataset's files (nothing is ever downloaded)")
    p.add_argument("--grid", required=True, help="process grid XxYxZ, e.g. 4x2x2")
    p.add_argument("--model", default=DEFAULT_KIND, choices=tuple(KINDS),
                   help=f"the model kind the store is cut for, recorded in it (default "
                        f"{DEFAULT_KIND}, plexus-train's); its declaration gives the normalized "
                        "adjacency and the stages of a layer (a GIN layer is two: agg, dense)")
    p.add_argument("--layers", type=int, default=DEFAULT_LAYERS,
                   help=f"GNN layers of --model, as plexus-train's --layers counts them "
                        f"(default {DEFAULT_LAYERS})")
    p.add_argument("--orders", default=AUTO_ORDER,
                   help="product order: auto (the default, as plexus-train's: combine on the "
                        "layers that narrow for --hidden, e.g. combine,combine for a 2-layer "
                        "GCN on Cora), one for all layers (agg, the paper's; combine), one per "
                        "layer as plexus-train's --order, or one per stage (agg,dense,...); "
                        "plexus-train --shards trains with the store's orders")
    p.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, metavar="H",
                   help=f"hidden width of the model that will train on the store, for --orders "
                        f"auto (default {DEFAULT_HIDDEN}, plexus-train's)")
    p.add_argument("--perm", default=DEFAULT_PERMUTATION, choices=PERMUTATIONS,
                   help="load-balancing permutation (default: double)")
    p.add_argument("--seed", type=int, default=0, help="permutation seed (default 0)")
    p.add_argument("--dataset-seed", type=int, default=0,
                   help="seed of synthetic datasets/features (default 0)")
    p.add_argument("--features", choices=FEATURE_MODES, default="auto",
                   help="node features, as plexus-train's --features: auto (each format's "
                        "convention: row-normalized for Planetoid, the file's values for the "
                        "rest), raw, or row (unit L1 norm per node)")
    p.add_argument("--out", default=None,
                   help="store directory to write (an existing store is kept unless --force)")
    p.add_argument("--force", action="store_true",
                   help="replace the shard store already at --out (only a store this user's "
                        "Plexus wrote, with nothing added: docs/shared-machines.md)")
    p.add_argument("--aggregation", default=None, choices=AGGREGATIONS,
                   help=argparse.SUPPRESS)  # replaced by --model: refused with the fix
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
    from plexus_partition.launch.env import LaunchError, THREADS_ENV, env_threads  # noqa: PLC0415

    if requested is not None and requested < 1:
        raise UsageError(f"--threads must be >= 1, got {requested}")
    try:
        threads = requested if requested is not None else env_threads()
    except LaunchError as e:
        raise UsageError(f"{e}, or give --threads N") from None
    if threads is None:
        return
    os.environ[THREADS_ENV] = str(threads)
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    threadpool_limits(threads)
    torch = sys.modules.get("torch")  # the partitioner runs without torch; a rank that joins a
    if torch is not None:  # group imports it later and reads the variable set above
        torch.set_num_threads(threads)


def _load(args):
    from plexus_datasets import load_dataset  # noqa: PLC0415 (heavy; only once input is valid)

    return load_dataset(args.dataset, root=args.root, seed=args.dataset_seed,
                        features=args.features)


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and do the work; raises `UsageError` (or a ValueError/OSError) on bad
    input."""
    args = build_parser().parse_args(argv)
    shape = GridShape.parse(args.grid)
    model = model_of(args)
    orders = parse_orders(args.orders, model)
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
        return _stats(args, shape, model, orders)

    from plexus_datasets.convert import streamed_spec  # noqa: PLC0415

    from .pipeline import PartitionJob  # noqa: PLC0415
    from .store import check_out_dir, is_store, store_split  # noqa: PLC0415

    if is_store(args.out) and not args.force:
        raise UsageError(f"--out {args.out}: a shard store is already there; add --force to "
                         "replace it, or choose another directory")
    check_out_dir(args.out)  # refuse before spending time on the dataset
    # converted in pieces as it is; features scaled otherwise are scaled in memory
    as_is = feature_mode(args.dataset, args.features) == "raw"
    dataset = args.dataset if streamed_spec(args.dataset) and as_is else _load(args)
    start = time.perf_counter()
    timings: list = []
    manifest = PartitionJob(
        dataset, args.out, shape, model.num_stages, orders, args.perm, args.seed,
        model=model.kind, root=args.root, dataset_seed=args.dataset_seed,
        jobs=args.jobs, graph_dir=args.graph_dir, chunk_edges=args.chunk_edges,
        bucket_entries=args.bucket_entries, feature_dtype=args.feature_dtype,
        hidden=args.hidden, keep_existing=not args.force).run(timings)
    seconds = time.perf_counter() - start
    if not _leader():
        return 0
    if args.verbose:
        for t in timings:
            print(f"{PROG}: phase {t.phase}: {t.seconds:.1f}s, {t.tasks_run}/{t.tasks} tasks"
                  + (f", {t.amount / 1e6:.1f}M {t.unit}s ({_count(t.rate)}/s)"
                     if t.amount and t.unit in ("edge", "node") else "")
                  + f", peak RSS {t.peak_rss / 2**20:.0f} MiB")
    total = sum(r["size"] for r in manifest["ranks"])
    procs = _processes(args.jobs)
    print(f"{PROG}: wrote {len(manifest['ranks'])} shards of {manifest['dataset']} "
          f"(N={manifest['num_nodes']}, nnz={manifest['nnz']}) for grid {shape}, "
          f"{_layers_text(model)}, perm {args.perm}: {total / 2**20:.1f} MiB in {args.out} "
          f"({seconds:.1f}s, {_count(manifest['nnz'] / max(seconds, 1e-9) / procs)} "
          f"non-zeros/s per process, {procs} process{'es' if procs > 1 else ''}); "
          f"{store_split(manifest)}")
    return 0


def _count(value: float) -> str:
    """A count in the unit that shows it: 2.35M, 48.2k, 310 (a small graph's rate is no
    0.00M)."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.1f}k" if value >= 1e3 else f"{value:.0f}"


def _layers_text(model: ModelConfig) -> str:
    """``2 gcn layers`` (with the stages they make where a layer is several)."""
    stages = f" ({model.num_stages} stages)" if model.num_stages != model.num_layers else ""
    return f"{model.num_layers} {model.kind} layer{'s' if model.num_layers > 1 else ''}{stages}"


def _stats(args, shape: GridShape, model: ModelConfig, orders: Sequence[str] | str) -> int:
    """``--stats-only``: the imbalance of every permutation (the graph is loaded in memory)."""
    from .stats import balance_report, format_report  # noqa: PLC0415

    graph = _load(args)
    if orders == AUTO_ORDER:
        orders = model.orders(graph.num_features, graph.num_classes)
    stages = model.num_stages
    plans = layer_plans(stages, orders)
    problem = grid_misfit(shape, plans, graph.num_nodes, [graph.num_features]
                          + [None] * (stages - 1) + [graph.num_classes])
    if problem:
        raise UsageError(problem)
    adj_hat = graph.normalized(model.aggregation)
    report = balance_report(adj_hat, shape, stages, orders, args.seed)
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
    from plexus_partition.launch.hostmem import keep_freed_heap_memory  # noqa: PLC0415

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
