"""The performance model's command lines.

- ``plexus-model``: rank every X×Y×Z grid of a world size by predicted epoch time, with
  communication volume and memory per rank (`plexus.perfmodel.model`), and the set-up's memory:
  partitioning the graph in one process, a rank reading its shard (`plexus.perfmodel.setup`).
- ``plexus-bench calibrate``: measure SpMM/GEMM rates and gloo collective α/β on this machine
  and write a JSON file that ``plexus-model --calibration FILE`` reads
  (`plexus.perfmodel.calibration`); ``--device cuda``: a GPU's fp32 and bf16 rates and NCCL α/β
  per link class (`plexus.perfmodel.gpucal`). ``plexus-model --gpus``/``--gpus-per-node``
  prices GPU clusters, each axis with the link it crosses (`plexus.perfmodel.placement`).
- ``plexus-bench check`` is defined in `plexus.bench.check` (it runs the engine, which this
  package may not import) and joins ``plexus-bench`` as a `BenchCommand`.

Bad input ends with one line ``PROG: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from plexus.core.atomic import UnsafeTargetError, output_target
from plexus.core.cli import ArgumentParser, UsageError, given_options, report_error
from plexus.core.grid import MAX_WORLD_SIZE, GridError, GridShape, parse_world_sizes
from plexus.core.model import DTYPE_BYTES
from plexus.core.modelopts import (ModelOptionsText, add_comm_options, add_model_options,
                                   add_precision_options, check_model_options, comm_dtype_bytes,
                                   describe_model, model_config)
from plexus.core.units import format_bytes, format_seconds
from plexus.datasets.convert import streamed_spec
from plexus.datasets.graph import MAX_NODES
from plexus.datasets.ogb_sizes import ogb_sizes
from plexus.runtime.env import available_cores, local_world_size

from .calibration import CALIBRATION_ENV, Calibration, write_calibration
from .explain import account, explain_lines
from .measure import StepTimer, calibrate
from .model import Prediction, rank_configs
from .spec import BEST_ORDER, ModelSpec
from .placement import Placement
from .profiles import profile_names, resolve_calibration
from .setup import partition_memory, setup_memory

# Up to this many stored edges the CLI builds Â to count its non-zeros exactly.
_EXACT_NNZ_LIMIT = 50_000_000
# A recipe's ModelConfig field -> the plexus-model option that sets it (the others by name).
_RECIPE_FLAGS = {"num_layers": "layers", "kind": "model"}


def _model_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="plexus-model",
        description="Rank every X×Y×Z grid of a world size by the predicted epoch time of 3D "
                    "GNN training (α-β communication model + calibrated compute rates), with "
                    "the memory per rank each model kind needs.")
    p.add_argument("--world-size", "-G", type=int, metavar="G",
                   help="number of ranks; every ordered factorization X·Y·Z = G is evaluated")
    p.add_argument("--grid", metavar="auto|XxYxZ",
                   help="auto (the default): rank every grid of the world size, as plexus-train "
                        "--grid auto picks one (without --world-size/--gpus: the ranks a job on "
                        "this machine runs, one per core or GPU); XxYxZ: that grid's row and "
                        "its rank among the others")
    p.add_argument("--gpus", metavar="G[,G...]",
                   help="GPU counts (one rank per GPU), a table per count: the ranks train on "
                        "GPUs (the GPU memory model) placed node by node (--gpus-per-node)")
    p.add_argument("--gpus-per-node", type=int, metavar="R",
                   help="GPUs per node: each grid axis's collectives are priced with the link "
                        "they cross (intra-node or inter-node, from the calibration or profile)")
    p.add_argument("--dataset", metavar="SPEC",
                   help="dataset spec for plexus.datasets.load_dataset (sizes are read from it; "
                        "OGB names without --root: their published sizes, no data needed)")
    p.add_argument("--root", metavar="DIR", help="dataset root directory (with --dataset)")
    p.add_argument("--recipe", metavar="NAME",
                   help="an OGB recipe's dataset and model options (as plexus-train --recipe); "
                        "options given explicitly win")
    p.add_argument("--nodes", type=int, metavar="N", help="number of nodes (without --dataset)")
    p.add_argument("--nnz", type=int, metavar="M",
                   help="non-zeros of the normalized adjacency, self loops included")
    p.add_argument("--features", type=int, metavar="F", help="input feature width")
    p.add_argument("--classes", type=int, metavar="C", help="number of classes")
    # the same model options and defaults as plexus-train, so both describe the same run
    add_model_options(p, ModelOptionsText(extra_orders=", best (the model's choice per grid)"))
    eng = p.add_argument_group("engine")
    add_precision_options(eng)
    add_comm_options(eng)
    eng.add_argument("--gather-input", action="store_true",
                     help="gather layer 0's fixed features every step instead of once (the "
                          "default keeps the gathered block where memory allows)")
    eng.add_argument("--agg-chunks", type=int, default=1, metavar="K",
                     help="the aggregation's row pieces, as plexus-train's (default 1)")
    eng.add_argument("--overlap", action="store_true",
                     help="each piece's sum overlaps the next piece's SpMM, as plexus-train's")
    p.add_argument("--explain", action="store_true",
                   help="after each table, the fastest grid's epoch collective by collective: "
                        "layer, phase, collective, axis and link, elements, bytes per rank, "
                        "predicted time and share")
    p.add_argument("--calibration", metavar="FILE",
                   help="JSON from `plexus-bench calibrate` (default: $" + CALIBRATION_ENV
                        + " if set, else a built-in profile (--profile), else built-in GPU "
                          "rates, said as uncalibrated)")
    p.add_argument("--profile", choices=profile_names(), metavar="NAME",
                   help="a built-in GPU node's published rates, used without a calibration: "
                        + ", ".join(profile_names()) + " (default with --gpus-per-node: the "
                        "profile of that node size, if one)")
    p.add_argument("--ranks-per-host", type=int, metavar="R",
                   help="ranks sharing one host: they share its cores, and their collectives "
                        "are priced with the calibration's world nearest R (`plexus-bench "
                        "calibrate --world-size`); default: one rank per device, the "
                        "calibration's first pair")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="memory per rank in GiB; grids above it are ranked last and flagged "
                        "(on GPUs, default: the GPU's memory from the calibration or profile)")
    p.add_argument("--top", type=int, default=10, metavar="K",
                   help="show the K fastest grids (default 10, 0 = all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


@dataclass(frozen=True)
class _Sizes:
    name: str
    nodes: int
    nnz: int
    features: int
    classes: int
    multilabel: bool
    origin: str  # where the sizes come from, as the output says it


def _dataset_sizes(spec: str, root: str | None, symmetrize: bool = False) -> _Sizes:
    """The sizes of a dataset: an OGB name without ``root`` from its published sizes
    (`plexus.datasets.ogb_sizes`), anything else loaded through plexus.datasets."""
    published = ogb_sizes(spec)
    if published is not None and root is None:
        nnz = published.gcn_nnz
        if symmetrize and published.directed:  # both directions of every edge
            nnz = 2 * published.edges + published.num_nodes
        return _Sizes(published.name, published.num_nodes, nnz, published.num_features,
                      published.num_classes, published.multilabel,
                      "published sizes, no data read; --root DIR counts the files")
    from plexus.datasets import gcn_nnz, load_dataset  # noqa: PLC0415 (heavy; only when asked)

    graph = load_dataset(spec, root)
    if symmetrize:
        graph = graph.to_undirected()
    nnz = gcn_nnz(graph, exact=graph.num_edges <= _EXACT_NNZ_LIMIT)
    return _Sizes(graph.name, graph.num_nodes, nnz, graph.num_features, graph.num_classes,
                  graph.multilabel, "loaded")


def _gpu_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or max(counts) > MAX_WORLD_SIZE:
        raise UsageError(f"--gpus must be GPU counts in [1, {MAX_WORLD_SIZE}] separated by "
                         f"commas, got {text!r}")
    return counts


def _header(spec: ModelSpec, cal: Calibration, origin: str, streamed: bool,
            per_host: int | None, placement: Placement | None) -> list[str]:
    m = spec.model
    spmm, gemm, _ = cal.rates(spec.dtype_bytes)
    if placement is not None and cal.links:
        links = ", ".join(f"{c} alpha {a:.3g} s, beta {1 / b:.3g} B/s" for c, a, b in cal.links)
    elif placement is not None:
        links = f"every link alpha {cal.alpha:.3g} s, beta {1 / cal.beta:.3g} B/s"
    else:
        alpha, beta = cal.local_link(per_host)  # the pair the collectives are priced with
        measured = [(p, cal.group_link(per_host, p)) for p in range(2, (per_host or 0) + 1)]
        calls = ", ".join(f"groups of {p} {g[0] * 1e3:.3g} ms + {1 / g[1]:.3g} B/s"
                          for p, g in measured if g)
        links = (f"per call: {calls}" if calls else
                 f"alpha {alpha:.3g} s, beta {1 / beta:.3g} B/s") + (
            f"; {per_host} ranks per host" if per_host else "")
    if cal.stage_overhead or cal.step_overhead:
        links += (f"; fixed work {cal.step_overhead * 1e3:.3g} ms per step + "
                  f"{cal.stage_overhead * 1e3:.3g} ms per stage")
    return [
        f"{spec.name or 'graph'}: N={spec.num_nodes:,} nnz={spec.nnz:,} F={spec.num_features} "
        f"C={spec.num_classes} layers={m.num_layers} hidden={m.hidden} "
        f"order={spec.order_text} bias={'yes' if m.bias else 'no'}"
        + (f" ({origin})" if origin != "loaded" else ""),
        "model: " + describe_model(m).replace(f"order {m.order}", f"order {spec.order_text}")
        + (f", {[k for k, v in DTYPE_BYTES.items() if v == spec.dtype_bytes][0]}"
           if spec.dtype_bytes != 4 else "") + (", recompute" if spec.recompute else "")
        + " (plexus-train's model options and defaults: --model, --layers, --hidden, ...)",
        f"calibration: {cal.label}",
        f"  rates: SpMM {spmm:.3g} flop/s, GEMM {gemm:.3g} flop/s; {links}"
        + (f"; {placement.gpus_per_node} GPUs per node" if placement else "")
        + (f"; GPU memory {format_bytes(cal.device_memory)}" if cal.device_memory else ""),
        f"set-up: partitioning the graph takes {format_bytes(partition_memory(spec, streamed))} "
        f"in one process{' (out of core)' if streamed else ''}, once per shard store"
        + ("" if streamed else f" ({format_bytes(partition_memory(spec, True))} out of core, "
                               "from R-MAT, OGB or a graph directory: plexus-partition)"),
    ]


def _axis_shares(p: Prediction) -> str:
    """Each axis's share of the epoch in communication, with its link class when placed."""
    parts = []
    for axis, seconds in p.comm_s_per_axis.items():
        if seconds > 0:
            link = f" {p.links[axis]}" if p.links else ""
            parts.append(f"{axis} {100 * seconds / p.time_s:.0f}%{link}")
    return " ".join(parts) or "-"


def _grid_world(args: argparse.Namespace) -> GridShape | None:
    """Resolve ``--grid``: fills ``args.world_size`` where the grid (or, for auto, this
    machine's ranks) gives it; returns the one grid to show, or None for every grid."""
    grid = None if args.grid in (None, "auto") else GridShape.parse(args.grid)
    if grid is not None:
        if args.gpus is not None or args.world_size not in (None, grid.world_size):
            raise UsageError(f"--grid {grid} is a world of {grid.world_size}: leave out "
                             "--world-size/--gpus, or give --grid auto")
        args.world_size = grid.world_size
    elif args.grid == "auto" and args.world_size is None and args.gpus is None:
        args.world_size = local_world_size()
    if (args.world_size is None) == (args.gpus is None):
        raise UsageError("give --world-size G, --gpus G[,G...] or --grid auto|XxYxZ (one of "
                         "them)")
    return grid


def _shown(preds: list[Prediction], only: GridShape | None) -> Prediction:
    """The prediction ``--explain`` details: the one grid asked for, else the fastest."""
    if only is not None:
        return next(p for p in preds if GridShape.of(p.grid) == only)
    return preds[0]


def _table(spec: ModelSpec, preds: list[Prediction], world: int, shown: int,
           limit_name: str, only: GridShape | None = None) -> list[str]:
    if only is not None:  # the one grid asked for, numbered by its rank among all
        ranked = [(k, p) for k, p in enumerate(preds, 1) if GridShape.of(p.grid) == only]
        head = f"world size {world}: grid {only}, rank {ranked[0][0]} of {len(preds)}"
    else:
        ranked = list(enumerate(preds[:shown], 1))
        head = f"world size {world}: {len(preds)} grids, showing {shown}"
    lines = [
        head + "; set-up/rank: a rank "
        + ("reading its shard" if spec.from_store else "loading the graph to cut its shard"),
        f"{'rank':>4}  {'XxYxZ':<11} {'epoch':>10} {'comm':>10} {'compute':>10} {'comm%':>6} "
        f"{'comm share per axis':<30} {'comm/rank':>11} {'memory/rank':>12} "
        f"{'set-up/rank':>12}  orders",
    ]
    for k, p in ranked:
        grid = str(GridShape.of(p.grid))
        flag = "" if p.fits else f"  (over {limit_name})"
        orders = ",".join("a" if o == "agg" else "c" for o in p.orders)
        lines.append(
            f"{k:>4}  {grid:<11} {format_seconds(p.time_s):>10} {format_seconds(p.comm_s):>10} "
            f"{format_seconds(p.compute_s):>10} {100 * p.comm_fraction:>5.1f}% "
            f"{_axis_shares(p):<30} "
            f"{format_bytes(p.volume.total_bytes):>11} {format_bytes(p.memory.total):>12} "
            f"{format_bytes(setup_memory(spec, p.grid).rank):>12}  {orders}{flag}")
    if preds and not preds[0].fits:
        lines.append(f"none of the {len(preds)} grids fits in the {limit_name}: use more ranks, "
                     "--dtype bf16 or --recompute")
    return lines


#: The widest input or output a model is priced for
MAX_WIDTH = 1 << 24


def _check_sizes(n: int, nnz: int, f: int, c: int) -> None:
    """The explicit graph sizes of plexus-model: `UsageError` naming the flag unless each lies
    in its range (Â has every node's self loop, so at least N non-zeros, at most N²)."""
    for flag, value, lo, hi in (("--nodes", n, 1, MAX_NODES), ("--nnz", nnz, n, n * n),
                                ("--features", f, 1, MAX_WIDTH),
                                ("--classes", c, 1, MAX_WIDTH)):
        if not lo <= value <= hi:
            raise UsageError(f"{flag} must be in [{lo}, {hi}], got {value}"
                             + (" (Â holds each node's self loop: at least --nodes)"
                                if flag == "--nnz" and value < lo else ""))


def _apply_recipe(args: argparse.Namespace, explicit: set[str],
                  recipe_lookup: Callable[[str], Any] | None) -> tuple[dict[str, Any], bool]:
    """Fill the options ``explicit`` does not name from ``args.recipe``: its dataset and model
    fields. Returns (ModelConfig fields no option sets, whether the recipe symmetrizes)."""
    if args.recipe is None:
        return {}, False
    if recipe_lookup is None:
        raise UsageError("--recipe needs the recipes of plexus.api (run the plexus-model "
                         "command)")
    recipe = recipe_lookup(args.recipe)
    if args.dataset is None and args.nodes is None:
        args.dataset = recipe.dataset
    rest = {}
    for name, value in recipe.model.items():
        dest = _RECIPE_FLAGS.get(name, name)
        if dest in explicit:
            continue
        if hasattr(args, dest):
            setattr(args, dest, value)
        else:
            rest[name] = value
    return rest, bool(recipe.symmetrize)


def model_main(argv: Sequence[str] | None = None,
               recipe_lookup: Callable[[str], Any] | None = None) -> int:
    """``plexus-model``: print the ranked grids for a world size (or, with ``--gpus``, for each
    GPU count). ``recipe_lookup``: a recipe by name (``plexus.api.recipes.get_recipe``; this
    package may not import the API). Exit 2 on bad input."""
    parser = _model_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
        recipe_fields, symmetrize = _apply_recipe(args, given_options(parser, argv),
                                                  recipe_lookup)
        only = _grid_world(args)
        worlds = _gpu_counts(args.gpus) if args.gpus is not None else [args.world_size]
        if args.world_size is not None and not 1 <= args.world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"--world-size must be in [1, {MAX_WORLD_SIZE}], got "
                             f"{args.world_size}")
        if args.memory_limit is not None and not 0 < args.memory_limit < math.inf:
            raise ValueError(f"--memory-limit must be a number of GiB > 0, got "
                             f"{args.memory_limit}")
        if args.top < 0:
            raise ValueError(f"--top must be >= 0, got {args.top}")
        if args.ranks_per_host is not None and not 1 <= args.ranks_per_host <= min(worlds):
            raise ValueError(f"--ranks-per-host must be in [1, --world-size], got "
                             f"{args.ranks_per_host}")
        if args.gpus_per_node is not None:
            if args.gpus_per_node < 1:
                raise ValueError(f"--gpus-per-node must be >= 1, got {args.gpus_per_node}")
            if args.ranks_per_host is not None:
                raise UsageError("give --gpus-per-node (GPU ranks) or --ranks-per-host (ranks "
                                 "sharing a CPU host), not both")
        check_model_options(args)
        explicit = [args.nodes, args.nnz, args.features, args.classes]
        if args.dataset is not None:
            if any(v is not None for v in explicit):
                raise ValueError("give either --dataset or --nodes/--nnz/--features/--classes")
            sizes = _dataset_sizes(args.dataset, args.root, symmetrize)
        else:
            if any(v is None for v in explicit):
                raise ValueError("give --dataset SPEC, or all of --nodes --nnz --features "
                                 "--classes")
            _check_sizes(*explicit)  # type: ignore[arg-type]
            sizes = _Sizes("graph", *explicit, False, "given")  # type: ignore[misc]
        if args.calibration and args.profile:
            raise UsageError("give --calibration FILE or --profile NAME, not both (a measured "
                             "calibration replaces a profile)")
        cal = resolve_calibration(args.calibration, args.profile, args.gpus_per_node,
                                  os.environ)
        # GPU ranks: asked for, or a GPU's calibration or profile (the built-in rates keep the
        # memory model of a CPU rank, as before GPU calibrations existed)
        gpus = args.gpus is not None or args.gpus_per_node is not None or (
            cal.device == "cuda" and cal.source != "defaults")
        per_node = args.gpus_per_node or (cal.gpus_per_node if gpus and cal.links else None)
        placement = Placement(per_node) if per_node else None
        best = args.order == BEST_ORDER
        model = model_config(args, **recipe_fields, **({"order": "agg"} if best else {}))
        if args.agg_chunks < 1:
            raise UsageError(f"--agg-chunks must be >= 1, got {args.agg_chunks}")
        spec = ModelSpec(sizes.nodes, sizes.nnz, sizes.features, sizes.classes, model,
                         best_orders=best, name=sizes.name, dtype_bytes=DTYPE_BYTES[args.dtype],
                         recompute=args.recompute, multilabel=sizes.multilabel,
                         device="cuda" if gpus else "cpu",
                         comm_dtype_bytes=comm_dtype_bytes(args),
                         sparse_comm=args.sparse_comm, keep_input=not args.gather_input,
                         agg_chunks=args.agg_chunks, overlap=args.overlap)
        limit, limit_name = None, "memory limit"
        if args.memory_limit is not None:
            limit = args.memory_limit * 2**30
        elif gpus and cal.device_memory:
            limit, limit_name = cal.device_memory, "GPU memory"
        if limit is not None and limit_name == "GPU memory":
            limit_name = f"GPU's {format_bytes(limit)}"
        runs = []
        for world in worlds:
            at = replace(spec, from_store=world > 1)  # plexus-train's ranks read a store
            runs.append((world, at, rank_configs(world, at, cal, limit, args.ranks_per_host,
                                                 placement)))
    except (ValueError, OSError, KeyError) as e:  # UsageError, DatasetError are ValueErrors
        if callable(getattr(e, "command_line", None)):  # an API argument named as a flag
            return report_error(parser.prog, e)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return report_error(parser.prog, msg)
    streamed = args.dataset is not None and streamed_spec(args.dataset)  # cut out of core
    if args.json:
        doc = {"spec": {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in asdict(spec).items()},
               "sizes_from": sizes.origin, "calibration": cal.to_dict(),
               "calibration_label": cal.label, "ranks_per_host": args.ranks_per_host,
               "gpus_per_node": per_node, "partition_bytes": partition_memory(spec, streamed),
               "partition_out_of_core": streamed, "memory_limit": limit, "worlds": []}
        for world, at, preds in runs:
            shown = len(preds) if args.top == 0 else min(args.top, len(preds))
            doc["worlds"].append({
                "world_size": world, "num_grids": len(preds),
                "configs": [{**p.to_dict(), "setup_bytes": setup_memory(at, p.grid).rank}
                            for p in preds[:shown]]})
            if args.explain and preds:
                doc["worlds"][-1]["explain"] = [
                    line.to_dict() for line in account(at, _shown(preds, only), cal,
                                                       args.ranks_per_host)]
        if args.gpus is None:  # the one world's fields at the top, as before --gpus
            doc.update(doc["worlds"][0])
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    lines = _header(spec, cal, sizes.origin, streamed, args.ranks_per_host, placement)
    for world, at, preds in runs:
        shown = len(preds) if args.top == 0 else min(args.top, len(preds))
        lines += [""] + _table(at, preds, world, shown, limit_name, only)
        if args.explain and preds:
            lines += [""] + explain_lines(at, _shown(preds, only), cal, args.ranks_per_host)
    print("\n".join(lines))
    return 0


@dataclass(frozen=True)
class BenchCommand:
    """A ``plexus-bench`` command defined by a package above the performance model (``check``
    lives in `plexus.bench`, which may import the engine; this module may not)."""

    name: str
    help: str
    description: str
    add_arguments: Callable[[ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]  # the exit status; reports its own errors


def _bench_parser(commands: Sequence[BenchCommand] = ()) -> ArgumentParser:
    p = ArgumentParser(prog="plexus-bench", description="Benchmarks, calibration and checks for "
                                                        "Plexus.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    cal = sub.add_parser("calibrate", help="measure this machine for plexus-model",
                         description="Measure SpMM and GEMM rates (torch, CPU) and the latency "
                                     "(alpha) and per-byte time (beta) of gloo collectives on a "
                                     "local world; with --device cuda, a GPU's rates in fp32 "
                                     "and bf16 (CUDA events) and NCCL alpha-beta per link class "
                                     "(inside a node; between nodes under srun/torchrun); write "
                                     "them as JSON for plexus-model and plexus-train --grid "
                                     "auto.")
    cal.add_argument("--out", required=True, metavar="FILE", help="calibration JSON to write")
    cal.add_argument("--world-size", default="2", metavar="P[,P...]",
                     help="local gloo ranks for the collective timings, one world per size "
                          "(default 2; e.g. 2,4 to price runs of 2 and of 4 ranks per host; "
                          "1 skips them)")
    cal.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="cpu (default): torch on cores, gloo; cuda: this GPU and NCCL links "
                          "(--world-size and --threads do not apply)")
    cal.add_argument("--threads", type=int, default=None, metavar="T",
                     help="torch threads for the compute timings (default $OMP_NUM_THREADS, "
                          "else 1, as one rank of plexus-sweep uses)")
    cal.add_argument("--quick", action="store_true",
                     help="small problems, few repetitions: seconds instead of tens of seconds")
    for command in commands:
        command.add_arguments(sub.add_parser(command.name, help=command.help,
                                             description=command.description))
    return p


#: The most local worlds one calibration times
MAX_CALIBRATION_WORLDS = 8


def _world_sizes(text: str, cores: int) -> list[int]:
    """``--world-size``'s comma-separated sizes (`plexus.core.grid.parse_world_sizes`);
    `UsageError` unless each is in [1, 2 × ``cores``] (ranks sharing cores are priced from
    such a world; far more times the scheduler, not gloo) and there are at most
    `MAX_CALIBRATION_WORLDS` of them."""
    try:
        return list(parse_world_sizes(text, 2 * cores, MAX_CALIBRATION_WORLDS))
    except GridError as e:
        raise UsageError(f"--world-size {e} (at most twice the {cores} cores this process may "
                         "use)") from None


def bench_main(argv: Sequence[str] | None = None,
               commands: Sequence[BenchCommand] = (),
               mask_pass: Callable[[Any], object] | None = None,
               step_timer: StepTimer | None = None) -> int:
    """``plexus-bench`` with ``calibrate`` and the given further ``commands`` (the console entry
    point passes ``check``, ``mask_pass``, the engine's dropout of a tensor, which
    ``calibrate --device cuda`` times, and ``step_timer``, the engine's training step on a tiny
    graph, which ``calibrate`` on a CPU times for the step's fixed work). Exit 2 on bad input,
    1 if a measurement fails."""
    parser = _bench_parser(commands)
    extra = {c.name: c for c in commands}
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: {', '.join(['calibrate', *extra])}")
        if args.command in extra:
            return extra[args.command].main(args)
        cores = available_cores()
        worlds = _world_sizes(args.world_size, cores)
        if args.threads is None:
            from plexus.runtime.env import LaunchError, env_threads  # noqa: PLC0415

            try:
                args.threads = env_threads() or 1
            except LaunchError as e:
                raise UsageError(f"{e}, or give --threads T") from None
        if not 1 <= args.threads <= cores:  # more threads than cores only measures contention
            raise UsageError(f"--threads must be in [1, {cores}] (the cores this process may "
                             f"use), got {args.threads}")
        output_target(args.out)  # a directory or a FIFO: refused before minutes of timing
    except (UsageError, UnsafeTargetError) as e:
        return report_error(parser.prog, e)
    if args.command == "calibrate":
        start = time.perf_counter()
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        try:
            if args.device == "cuda":
                from .gpucal import calibrate_cuda  # noqa: PLC0415 (torch.cuda)

                doc = calibrate_cuda(args.quick, say, mask_pass)
                if doc is None:  # a rank other than 0 of a launcher's job: rank 0 writes
                    return 0
            else:
                doc = calibrate(worlds, args.threads, args.quick, log=say,
                                step_timer=step_timer)
            path = write_calibration(doc, args.out)
        except OSError as e:
            return report_error(parser.prog, f"cannot write {args.out}: {e.strerror or e}")
        except UnsafeTargetError as e:  # the target changed while it measured
            return report_error(parser.prog, e)
        except RuntimeError as e:
            return report_error(parser.prog, str(e).splitlines()[0], status=1)
        print(f"SpMM {doc['spmm_flops']:.3g} flop/s, GEMM {doc['gemm_flops']:.3g} flop/s", end="")
        if "alpha" in doc:
            print(f", alpha {doc['alpha'] * 1e6:.1f} us, beta {1 / doc['beta'] / 1e9:.2f} GB/s",
                  end="")
        if "stage_overhead" in doc:
            print(f", fixed work {doc['step_overhead'] * 1e3:.2f} ms per step + "
                  f"{doc['stage_overhead'] * 1e3:.2f} ms per stage", end="")
        for world, by_size in doc.get("groups", {}).items():
            print(f"; {world} ranks: " + ", ".join(
                f"groups of {p} {g['latency'] * 1e3:.2f} ms per call" for p, g in by_size.items()),
                end="")
        for cls, link in doc.get("links", {}).items():
            print(f"; {cls} alpha {link['alpha'] * 1e6:.1f} us, beta "
                  f"{1 / link['beta'] / 1e9:.2f} GB/s", end="")
        print(f"\nwrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0
