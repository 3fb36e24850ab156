"""``plexus-bench``'s command line: ``calibrate`` (SpMM/GEMM rates and gloo collective α/β on
this machine, or with ``--device cuda`` a GPU's fp32 and bf16 rates and NCCL α/β per link class,
written as JSON for ``plexus-model --calibration FILE``: `plexus.perfmodel.calibration`,
`plexus.perfmodel.gpucal`), and the commands of packages above the performance model as a
`BenchCommand` (``check`` is defined in `plexus.bench.check`: it runs the engine, which this
package may not import).

Bad input ends with one line ``PROG: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from plexus_datasets.base.atomic import UnsafeTargetError, output_target
from plexus_partition.model.cli import ArgumentParser, UsageError, report_error
from plexus_partition.model.grid import GridError, parse_world_sizes
from plexus_partition.model.bounds import CALIBRATION_RANKS_PER_CORE
from plexus_partition.launch.env import available_cores

from .calibration import write_calibration
from .measure import StepTimer, calibrate


@dataclass(frozen=True)
class BenchCommand:
    """A ``plexus-bench`` command defined by a package above the performance model (``check``
    lives in `plexus.bench`, which may import the engine; this module may not)."""

    name: str
    help: str
    description: str
    add_arguments: Callable[[ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]  # the exit status; reports its own errors


def bench_parser(commands: Sequence[BenchCommand] = ()) -> ArgumentParser:
    """``plexus-bench``'s parser: ``calibrate`` and the given further ``commands``."""
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
    """``--world-size``'s comma-separated sizes (`plexus_partition.model.grid.parse_world_sizes`);
    `UsageError` unless each is in [1, 2 × ``cores``] (ranks sharing cores are priced from
    such a world; far more times the scheduler, not gloo) and there are at most
    `MAX_CALIBRATION_WORLDS` of them."""
    try:
        return list(parse_world_sizes(text, CALIBRATION_RANKS_PER_CORE * cores,
                                      MAX_CALIBRATION_WORLDS))
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
    parser = bench_parser(commands)
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
            from plexus_partition.launch.env import LaunchError, env_threads  # noqa: PLC0415

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
