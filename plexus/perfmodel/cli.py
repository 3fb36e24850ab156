"""The performance model's command lines.

- ``plexus-model``: rank every X×Y×Z grid of a world size by predicted epoch time, with
  communication volume and memory per rank (`plexus.perfmodel.model`), and the set-up's memory:
  partitioning the graph in one process, a rank reading its shard (`plexus.perfmodel.setup`).
- ``plexus-bench calibrate``: measure SpMM/GEMM rates and gloo collective α/β on this machine
  and write a JSON file that ``plexus-model --calibration FILE`` reads
  (`plexus.perfmodel.calibration`).
- ``plexus-bench check`` is defined in `plexus.testing.firstrun` (it runs the engine, which this
  package may not import) and joins ``plexus-bench`` as a `BenchCommand`.

Bad input ends with one line ``PROG: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from plexus.core.atomic import UnsafeTargetError, output_target
from plexus.core.cli import ArgumentParser, UsageError, report_error
from plexus.core.grid import MAX_WORLD_SIZE, GridShape
from plexus.core.model import DTYPE_BYTES
from plexus.core.modelopts import (ModelOptionsText, add_model_options, add_precision_options,
                                   check_model_options, describe_model, model_config)
from plexus.core.units import format_bytes, format_seconds
from plexus.datasets.convert import streamed_spec
from plexus.datasets.graph import MAX_NODES
from plexus.runtime.env import available_cores

from .calibration import Calibration, calibrate, load_calibration, write_calibration
from .model import BEST_ORDER, ModelSpec, Prediction, rank_configs
from .setup import partition_memory, setup_memory

# Up to this many stored edges the CLI builds Â to count its non-zeros exactly.
_EXACT_NNZ_LIMIT = 50_000_000


def _model_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="plexus-model",
        description="Rank every X×Y×Z grid of a world size by the predicted epoch time of 3D "
                    "GNN training (α-β communication model + calibrated compute rates), with "
                    "the memory per rank each model kind needs.")
    p.add_argument("--world-size", "-G", type=int, required=True, metavar="G",
                   help="number of ranks; every ordered factorization X·Y·Z = G is evaluated")
    p.add_argument("--dataset", metavar="SPEC",
                   help="dataset spec for plexus.datasets.load_dataset (sizes are read from it)")
    p.add_argument("--root", metavar="DIR", help="dataset root directory (with --dataset)")
    p.add_argument("--nodes", type=int, metavar="N", help="number of nodes (without --dataset)")
    p.add_argument("--nnz", type=int, metavar="M",
                   help="non-zeros of the normalized adjacency, self loops included")
    p.add_argument("--features", type=int, metavar="F", help="input feature width")
    p.add_argument("--classes", type=int, metavar="C", help="number of classes")
    # the same model options and defaults as plexus-train, so both describe the same run
    add_model_options(p, ModelOptionsText(extra_orders=", best (the model's choice per grid)"))
    add_precision_options(p.add_argument_group("engine"))
    p.add_argument("--calibration", metavar="FILE",
                   help="JSON from `plexus-bench calibrate` (default: built-in GPU-node rates)")
    p.add_argument("--ranks-per-host", type=int, metavar="R",
                   help="ranks sharing one host: they share its cores, and their collectives "
                        "are priced with the calibration's world nearest R (`plexus-bench "
                        "calibrate --world-size`); default: one rank per device, the "
                        "calibration's first pair")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="memory per rank in GiB; grids above it are ranked last and flagged")
    p.add_argument("--top", type=int, default=10, metavar="K",
                   help="show the K fastest grids (default 10, 0 = all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _dataset_sizes(spec: str, root: str | None) -> tuple[str, int, int, int, int, bool]:
    """(name, N, nnz of Â, F, C, whether its C are binary tasks) of a dataset loaded through
    plexus.datasets."""
    from plexus.datasets import gcn_nnz, load_dataset  # noqa: PLC0415 (heavy; only when asked)

    graph = load_dataset(spec, root)
    nnz = gcn_nnz(graph, exact=graph.num_edges <= _EXACT_NNZ_LIMIT)
    return (graph.name, graph.num_nodes, nnz, graph.num_features, graph.num_classes,
            graph.multilabel)


def _table(spec: ModelSpec, cal: Calibration, preds: list[Prediction], world: int,
           shown: int, streamed: bool = False, per_host: int | None = None) -> str:
    m = spec.model
    alpha, beta = cal.local_link(per_host)  # the pair the collectives are priced with
    lines = [
        f"{spec.name or 'graph'}: N={spec.num_nodes:,} nnz={spec.nnz:,} F={spec.num_features} "
        f"C={spec.num_classes} layers={m.num_layers} hidden={m.hidden} "
        f"order={spec.order_text} "
        f"bias={'yes' if m.bias else 'no'}",
        "model: " + describe_model(m).replace(f"order {m.order}", f"order {spec.order_text}")
        + (f", {[k for k, v in DTYPE_BYTES.items() if v == spec.dtype_bytes][0]}"
           if spec.dtype_bytes != 4 else "") + (", recompute" if spec.recompute else "")
        + " (plexus-train's model options and defaults: --model, --layers, --hidden, ...)",
        f"calibration: {cal.source} (SpMM {cal.spmm_flops:.3g} flop/s, GEMM "
        f"{cal.gemm_flops:.3g} flop/s, alpha {alpha:.3g} s, beta {1 / beta:.3g} B/s"
        + (f"; {per_host} ranks per host" if per_host else "") + ")",
        f"world size {world}: {len(preds)} grids, showing {shown}",
        "",
        f"set-up: partitioning the graph takes {format_bytes(partition_memory(spec, streamed))} "
        f"in one process{' (out of core)' if streamed else ''}, once per shard store; "
        "set-up/rank: a rank "
        + ("reading its shard" if spec.from_store else "loading the graph to cut its shard"),
        "",
        f"{'rank':>4}  {'XxYxZ':<11} {'epoch':>10} {'comm':>10} {'compute':>10} {'comm%':>6} "
        f"{'comm/rank':>11} {'memory/rank':>12} {'set-up/rank':>12}  orders",
    ]
    for k, p in enumerate(preds[:shown], 1):
        grid = str(GridShape.of(p.grid))
        flag = "" if p.fits else "  (over memory limit)"
        orders = ",".join("a" if o == "agg" else "c" for o in p.orders)
        lines.append(
            f"{k:>4}  {grid:<11} {format_seconds(p.time_s):>10} {format_seconds(p.comm_s):>10} "
            f"{format_seconds(p.compute_s):>10} {100 * p.comm_fraction:>5.1f}% "
            f"{format_bytes(p.volume.total_bytes):>11} {format_bytes(p.memory.total):>12} "
            f"{format_bytes(setup_memory(spec, p.grid).rank):>12}  {orders}{flag}")
    return "\n".join(lines)


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


def model_main(argv: Sequence[str] | None = None) -> int:
    """``plexus-model``: print the ranked grids for a world size. Exit 2 on bad input."""
    parser = _model_parser()
    try:
        args = parser.parse_args(argv)
        if not 1 <= args.world_size <= MAX_WORLD_SIZE:  # the ranking answers at once up to it
            raise ValueError(f"--world-size must be in [1, {MAX_WORLD_SIZE}], got "
                             f"{args.world_size}")
        if args.memory_limit is not None and not 0 < args.memory_limit < math.inf:
            raise ValueError(f"--memory-limit must be a number of GiB > 0, got "
                             f"{args.memory_limit}")
        if args.top < 0:
            raise ValueError(f"--top must be >= 0, got {args.top}")
        if args.ranks_per_host is not None and not 1 <= args.ranks_per_host <= args.world_size:
            raise ValueError(f"--ranks-per-host must be in [1, --world-size], got "
                             f"{args.ranks_per_host}")
        check_model_options(args)
        explicit = [args.nodes, args.nnz, args.features, args.classes]
        if args.dataset is not None:
            if any(v is not None for v in explicit):
                raise ValueError("give either --dataset or --nodes/--nnz/--features/--classes")
            name, n, nnz, f, c, multilabel = _dataset_sizes(args.dataset, args.root)
        else:
            if any(v is None for v in explicit):
                raise ValueError("give --dataset SPEC, or all of --nodes --nnz --features "
                                 "--classes")
            name, (n, nnz, f, c), multilabel = "graph", explicit, False
            _check_sizes(n, nnz, f, c)
        best = args.order == BEST_ORDER
        model = model_config(args, **({"order": "agg"} if best else {}))
        spec = ModelSpec(n, nnz, f, c, model, best_orders=best, name=name,
                         dtype_bytes=DTYPE_BYTES[args.dtype], recompute=args.recompute,
                         from_store=args.world_size > 1,  # plexus-train's ranks read a store
                         multilabel=multilabel)
        cal = load_calibration(args.calibration)
        limit = None if args.memory_limit is None else args.memory_limit * 2**30
        preds = rank_configs(args.world_size, spec, cal, limit, args.ranks_per_host)
    except (ValueError, OSError, KeyError) as e:  # UsageError, DatasetError are ValueErrors
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return report_error(parser.prog, msg)
    shown = len(preds) if args.top == 0 else min(args.top, len(preds))
    streamed = args.dataset is not None and streamed_spec(args.dataset)  # cut out of core
    if args.json:
        doc = {"spec": {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in asdict(spec).items()},
               "calibration": cal.to_dict(), "world_size": args.world_size,
               "ranks_per_host": args.ranks_per_host,
               "num_grids": len(preds), "partition_bytes": partition_memory(spec, streamed),
               "configs": [{**p.to_dict(), "setup_bytes": setup_memory(spec, p.grid).rank}
                           for p in preds[:shown]]}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(_table(spec, cal, preds, args.world_size, shown, streamed, args.ranks_per_host))
    return 0


@dataclass(frozen=True)
class BenchCommand:
    """A ``plexus-bench`` command defined by a package above the performance model (``check``
    lives in `plexus.testing`, which may import the engine; this module may not)."""

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
                                     "local world; write them as JSON for plexus-model.")
    cal.add_argument("--out", required=True, metavar="FILE", help="calibration JSON to write")
    cal.add_argument("--world-size", default="2", metavar="P[,P...]",
                     help="local gloo ranks for the collective timings, one world per size "
                          "(default 2; e.g. 2,4 to price runs of 2 and of 4 ranks per host; "
                          "1 skips them)")
    cal.add_argument("--threads", type=int, default=1, metavar="T",
                     help="torch threads for the compute timings (default 1, as one rank uses)")
    cal.add_argument("--quick", action="store_true",
                     help="small problems, few repetitions: seconds instead of tens of seconds")
    for command in commands:
        command.add_arguments(sub.add_parser(command.name, help=command.help,
                                             description=command.description))
    return p


#: The most local worlds one calibration times
MAX_CALIBRATION_WORLDS = 8


def _world_sizes(text: str, cores: int) -> list[int]:
    """``--world-size``'s comma-separated sizes; `UsageError` unless each is a whole number in
    [1, 2 × ``cores``] (ranks sharing cores are priced from such a world; far more times the
    scheduler, not gloo) and there are at most `MAX_CALIBRATION_WORLDS` of them."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or max(sizes) > 2 * cores or \
            len(sizes) > MAX_CALIBRATION_WORLDS:
        raise UsageError(f"--world-size must be whole numbers in [1, {2 * cores}] (twice the "
                         f"cores this process may use), at most {MAX_CALIBRATION_WORLDS}, "
                         f"separated by commas, got {text[:80]!r}")
    return sizes


def bench_main(argv: Sequence[str] | None = None,
               commands: Sequence[BenchCommand] = ()) -> int:
    """``plexus-bench`` with ``calibrate`` and the given further ``commands`` (the console entry
    point passes ``check``). Exit 2 on bad input, 1 if a measurement fails."""
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
        if not 1 <= args.threads <= cores:  # more threads than cores only measures contention
            raise UsageError(f"--threads must be in [1, {cores}] (the cores this process may "
                             f"use), got {args.threads}")
        output_target(args.out)  # a directory or a FIFO: refused before minutes of timing
    except (UsageError, UnsafeTargetError) as e:
        return report_error(parser.prog, e)
    if args.command == "calibrate":
        start = time.perf_counter()
        try:
            doc = calibrate(worlds, args.threads, args.quick,
                            log=lambda m: print(m, file=sys.stderr, flush=True))
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
        print(f"\nwrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0
