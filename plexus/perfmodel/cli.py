"""``plexus-model``'s command line: its options and their checks, the graph's sizes (given,
published or loaded) and the calibration they are priced with, then every X×Y×Z grid of a world
size ranked by predicted epoch time, with communication volume and memory per rank
(`plexus.perfmodel.model`) and the set-up's memory: partitioning the graph in one process, a
rank reading its shard (`plexus.perfmodel.setup`). ``--gpus``/``--gpus-per-node`` price GPU
clusters, each axis with the link it crosses (`plexus.perfmodel.placement`). What it prints is
`plexus.perfmodel.modeltext`; ``plexus-bench`` (``calibrate``, whose JSON ``--calibration FILE``
reads) is `plexus.perfmodel.benchcli`.

Bad input ends with one line ``PROG: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Sequence

from plexus_partition.model.cli import ArgumentParser, UsageError, given_options, report_error
from plexus_partition.model.grid import MAX_WORLD_SIZE, GridShape
from plexus_partition.model.model import DTYPE_BYTES
from plexus_partition.model.pairs import DECODER_LAYERS, DECODERS
from plexus_partition.model.topology import COLLECTIVES
from plexus_partition.model.modelopts import (ModelOptionsText, add_model_options,
                                              check_model_options, model_config)
from plexus.engine.flags import add_comm_options, add_precision_options, comm_dtype_bytes
from plexus.engine.pieces import FREE_SHARE
from plexus.core.units import format_bytes
from plexus_datasets.convert import streamed_spec
from plexus_datasets.graph import MAX_NODES
from plexus_datasets.linksplit import DEFAULT_EDGE_SPLIT, parse_fractions
from plexus_datasets.ogb_sizes import ogb_sizes
from plexus_partition.launch.env import local_world_size

from .calibration import CALIBRATION_ENV
from .linkcost import LinkOptions, estimate_link
from .model import rank_configs
from .modeltext import Ranking, json_doc, text_lines
from .placement import Placement
from .profiles import profile_names, resolve_calibration
from .spec import BEST_ORDER, ModelSpec

# Up to this many stored edges the CLI builds Â to count its non-zeros exactly.
_EXACT_NNZ_LIMIT = 50_000_000


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
    p.add_argument("--placement", choices=("launcher", "best"), default="launcher",
                   help="with --gpus-per-node, which block of the grid a node holds: launcher "
                        "(the default: ranks node by node with z fastest, as plexus-train runs "
                        "today) or best (the model prices every block and keeps the fastest; "
                        "the engine does not follow it yet)")
    p.add_argument("--dataset", metavar="SPEC",
                   help="dataset spec for plexus_datasets.load_dataset (sizes are read from it; "
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
    eng.add_argument("--collectives", choices=COLLECTIVES, default="auto",
                     help="with --gpus-per-node, each collective over an axis split across "
                          "nodes as a flat ring or in two levels (within the node, then across "
                          "on 1/k of the data): auto (the default) prices both with the link "
                          "classes and takes the faster, as plexus-train's")
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
    link = p.add_argument_group("link prediction (plexus-train --task link)")
    link.add_argument("--task", choices=("node", "link"), default="node",
                      help="price node classification (the default) or a link-prediction step: "
                           "the model as the encoder (of --hidden output columns), then the "
                           "pairs scored by --decoder")
    link.add_argument("--decoder", choices=DECODERS, default="mlp",
                      help="--task link: the pair decoder (default mlp, plexus-train's)")
    link.add_argument("--pairs", type=int, metavar="P",
                      help="--task link: positive training pairs a step, and as many negatives "
                           "(default: 0.85 of the graph's (nnz - N)/2 edges, the default split)")
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
    (`plexus_datasets.ogb_sizes`), anything else loaded through plexus_datasets."""
    published = ogb_sizes(spec)
    if published is not None and root is None:
        nnz = published.gcn_nnz
        if symmetrize and published.directed:  # both directions of every edge
            nnz = 2 * published.edges + published.num_nodes
        return _Sizes(published.name, published.num_nodes, nnz, published.num_features,
                      published.num_classes, published.multilabel,
                      "published sizes, no data read; --root DIR counts the files")
    from plexus_datasets import gcn_nnz, load_dataset  # noqa: PLC0415 (heavy; only when asked)

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
    return recipe.set_options(recipe.model, args, explicit), bool(recipe.symmetrize)



def _check_numbers(args: argparse.Namespace, worlds: list[int]) -> None:
    """The run's numbers (world size, memory limit, --top, ranks per host or GPUs per node):
    `ValueError` or `UsageError` naming the flag unless each is in its range."""
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


def _graph_sizes(args: argparse.Namespace, symmetrize: bool) -> _Sizes:
    """The graph's sizes: from ``--dataset``, or all four given explicitly."""
    explicit = [args.nodes, args.nnz, args.features, args.classes]
    if args.dataset is not None:
        if any(v is not None for v in explicit):
            raise ValueError("give either --dataset or --nodes/--nnz/--features/--classes")
        return _dataset_sizes(args.dataset, args.root, symmetrize)
    if any(v is None for v in explicit):
        raise ValueError("give --dataset SPEC, or all of --nodes --nnz --features "
                         "--classes")
    _check_sizes(*explicit)  # type: ignore[arg-type]
    return _Sizes("graph", *explicit, False, "given")  # type: ignore[misc]


def _rank(args: argparse.Namespace, sizes: _Sizes, recipe_fields: dict[str, Any],
          worlds: list[int], only: GridShape | None) -> Ranking:
    """The calibration, the placement and the model spec the options describe, and every
    world's grids ranked by them."""
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
    placement = Placement(per_node, arrange=args.placement == "best") if per_node else None
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
                     agg_chunks=args.agg_chunks, overlap=args.overlap,
                     collectives=args.collectives)
    limit, limit_name = None, "memory limit"
    if args.memory_limit is not None:
        limit = args.memory_limit * 2**30
    elif gpus and cal.device_memory:
        limit, limit_name = cal.device_memory, "GPU memory"
    if limit is not None and limit_name == "GPU memory":
        limit_name = f"GPU's {format_bytes(limit)}"
    price, task = _link_price(args, spec, limit)
    if task:
        spec = replace(spec, num_classes=model.hidden)  # the encoder's output: the embedding
    runs = []
    for world in worlds:
        at = replace(spec, from_store=world > 1)  # plexus-train's ranks read a store
        runs.append((world, at, rank_configs(world, at, cal, limit, args.ranks_per_host,
                                             placement, price)))
    streamed = args.dataset is not None and streamed_spec(args.dataset)  # cut out of core
    return Ranking(spec, cal, sizes.origin, streamed, args.ranks_per_host, placement, per_node,
                   limit, limit_name, runs, args.top, args.explain, only, args.gpus is None,
                   task)


def _link_price(args: argparse.Namespace, spec: ModelSpec, limit: float | None
                ) -> tuple[Any, str]:
    """For ``--task link``: the pricing of one link step (`estimate_link`) and the header's
    line saying what it prices; for the node task (None, "")."""
    if args.task != "link":
        for flag in ("decoder", "pairs"):
            if getattr(args, flag) != _model_parser().get_default(flag):
                raise UsageError(f"--{flag} is an option of --task link; add --task link")
        return None, ""
    edges = max(1, (spec.nnz - spec.num_nodes) // 2)
    train = parse_fractions(DEFAULT_EDGE_SPLIT)[0]  # plexus-train's default split's pairs
    pairs = args.pairs if args.pairs is not None else max(1, int(train * edges))
    budget = None if limit is None else FREE_SHARE * limit  # the engine's piece budget
    link = LinkOptions(pairs, args.decoder, spec.model.hidden, DECODER_LAYERS, budget)
    mlp = f" ({DECODER_LAYERS} layers of {spec.model.hidden})" if args.decoder == "mlp" else ""
    said = "" if args.pairs is not None else " (0.85 of the graph's edges; --pairs to set)"
    return (partial(estimate_link, link=link),
            f"task: link prediction, one training step of {pairs:,} positive pairs{said} and "
            f"as many negatives, {args.decoder} decoder{mlp} on the encoder's "
            f"{spec.model.hidden} output columns; no node loss")


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
        _check_numbers(args, worlds)
        check_model_options(args)
        sizes = _graph_sizes(args, symmetrize)
        ranking = _rank(args, sizes, recipe_fields, worlds, only)
    except (ValueError, OSError, KeyError) as e:  # UsageError, DatasetError are ValueErrors
        if callable(getattr(e, "command_line", None)):  # an API argument named as a flag
            return report_error(parser.prog, e)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return report_error(parser.prog, msg)
    if args.json:
        json.dump(json_doc(ranking), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print("\n".join(text_lines(ranking)))
    return 0
