"""``plexus-bench check``: the engine against its serial model on this machine's devices.

What to run first on a new machine: a few grids of every world size up to the one asked for
(1x1x1; 2x1x1, 1x2x1, 1x1x2; 2x2x1, 2x1x2, 1x2x2; ...), two model kinds (GCN and GAT, whose
attention has its own collectives) on an undirected and a directed small graph. Each check
builds the distributed model on the grid and the serial model on the CPU from one seed, runs one
training step with dropout on both and compares the logits, the loss and every gradient
(`plexus.testing.exactness`, the rule the test suite holds the engine to); then it times a few
training steps and reads each rank's memory during that check: its peak less what the rank
held when the check began (earlier checks' memory, kept by the allocator, is not this check's),
beside that peak. On GPUs the ranks use NCCL, one GPU each; on
CPUs gloo: the same code, only the device and the backend differ.

One local world per world size (`plexus.runtime.world.run_world`), every check of that size
inside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from plexus_partition.model.cli import ArgumentParser, UsageError, report_error
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import grid_misfit
from plexus_partition.model.model import ModelConfig
from plexus.core.units import format_bytes, format_seconds

PROG = "plexus-bench"
HIDDEN = 6  # not a multiple of the small axis sizes: padding is exercised
#: The model kinds checked: GCN (SpMM and dense stages) and GAT (per-edge attention across the
#: grid); dropout on, GAT's attention dropout too.
MODELS = {
    "gcn": ModelConfig(num_layers=2, hidden=HIDDEN, dropout=0.5),
    "gat": ModelConfig(num_layers=2, hidden=3, dropout=0.5, kind="gat", heads=2, out_heads=2,
                       attn_dropout=0.3),
}
GRAPHS = ("undirected", "directed")
GRIDS_PER_SIZE = 3
# Added to one weight of rank 0's distributed model by the hidden option --inject-mismatch: an
# engine bug's stand-in, so that the tests see a check fail.
MISMATCH = 0.05


@dataclass
class CheckResult:
    """One check (grid, model, graph) over every rank of its world: the largest differences
    from the serial model, the failure messages, the slowest rank's median step time and the
    largest peak memory of a rank."""

    grid: str
    model: str
    graph: str
    logits: float
    loss: float
    grads: float
    failures: list[str]
    step_s: float
    memory_bytes: int  # the largest peak of a rank during the check
    check_bytes: int = 0  # the most a rank's memory grew during the check, over its start
    own_peak: bool = True  # False: the peak could not be restarted (the process's peak so far)

    @property
    def passed(self) -> bool:
        return not self.failures


def _graphs() -> dict:
    from plexus.testing.exactness import directed_toy_graph, toy_graph

    return {"undirected": toy_graph(), "directed": directed_toy_graph()}


def check_grids(world_size: int) -> list[tuple[int, int, int]]:
    """The grids checked for ``--world-size`` G: for each world size 1, 2, 4, ... below G and G
    itself, up to `GRIDS_PER_SIZE` grids, those with the smallest largest axis first (every
    axis split in turn), kept only where the check's graphs and models fit them. Raises
    `ValueError` when no grid of G ranks fits."""
    sizes = sorted({1 << k for k in range(world_size.bit_length()) if 1 << k < world_size}
                   | {world_size})
    graphs = _graphs()
    out = []
    for size in sizes:
        fitting = [s for s in GridShape.factorizations(size)
                   if all(_fits(s, g, cfg) for g in graphs.values() for cfg in MODELS.values())]
        fitting.sort(key=lambda s: (max(s.dims), tuple(-d for d in s.dims)))
        if not fitting and size == world_size:
            raise ValueError(f"no grid of {world_size} ranks fits the check's small graphs "
                             "(an axis would cut more ranks than nodes, features or classes); "
                             "use a smaller --world-size")
        out += [s.dims for s in fitting[:GRIDS_PER_SIZE]]
    return out


def _fits(shape: GridShape, g, cfg: ModelConfig) -> bool:
    plans = cfg.plans(g.num_features, g.num_classes)
    return (grid_misfit(shape, plans, g.num_nodes, cfg.widths(g.num_features, g.num_classes))
        is None)


def rank_checks(grids: Sequence[tuple[int, int, int]], cuda: bool, steps: int,
                inject_mismatch: bool = False) -> list[dict]:
    """One rank's part of every check on ``grids`` (all of this world's size; runs inside the
    world): per check the differences and failures of `compare_step`, the median of ``steps``
    timed training steps, this rank's peak memory (CUDA's allocator peak on a GPU, the peak
    RSS on the CPU, each restarted before the check) and how far it rose over what the rank
    held when the check began."""
    import torch
    import torch.distributed as dist

    from plexus.engine.config import TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer
    from plexus_datasets.base.tasks import current_rss_bytes
    from plexus.runtime.memstats import cuda_peak_bytes, peak_rss_bytes, reset_peak_rss

    from plexus.testing.exactness import build_pair, compare_step

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    rank = dist.get_rank()
    graphs = _graphs()
    out = []
    for dims in grids:
        grid = Grid.create(dims, device)
        for gname in GRAPHS:
            g = graphs[gname]
            for mname, cfg in MODELS.items():
                own = True
                if cuda:
                    torch.cuda.reset_peak_memory_stats(device)
                    start_bytes = torch.cuda.memory_allocated(device)
                else:
                    own = reset_peak_rss()
                    start_bytes = current_rss_bytes()
                dist_model, serial, shard = build_pair(grid, g, cfg, "double")
                if inject_mismatch and rank == 0:
                    with torch.no_grad():
                        largest = max(dist_model.named_shards().values(), key=lambda p: p.numel())
                        largest[(0,) * largest.dim()] += MISMATCH
                found = compare_step(dist_model, serial, shard, g.num_classes)
                trainer = Trainer(dist_model, TrainConfig(epochs=steps, eval_every=0))
                times = []
                for _ in range(steps):
                    dist.barrier()
                    start = time.perf_counter()
                    trainer.train_step()  # ends with the loss on the host: the device has finished
                    times.append(time.perf_counter() - start)
                memory = cuda_peak_bytes(device) if cuda else peak_rss_bytes()
                out.append({"grid": str(grid.shape), "model": mname, "graph": gname,
                            "logits": found.logits, "loss": found.loss, "grads": found.grads,
                            "failures": [f"rank {rank}: {m}" for m in found.failures],
                            "step_s": statistics.median(times), "memory": memory,
                            "check_memory": max(memory - start_bytes, 0), "own_peak": own})
    return out


def merge(ranks: Sequence[Sequence[dict]]) -> list[CheckResult]:
    """Every rank's records of the same checks (in the same order) as one `CheckResult` each."""
    out = []
    for records in zip(*ranks):
        first = records[0]
        out.append(CheckResult(
            first["grid"], first["model"], first["graph"],
            max(r["logits"] for r in records), max(r["loss"] for r in records),
            max(r["grads"] for r in records), [m for r in records for m in r["failures"]],
            max(r["step_s"] for r in records), max(r["memory"] for r in records),
            max(r["check_memory"] for r in records), all(r["own_peak"] for r in records)))
    return out


def run_checks(world_size: int, cuda: bool, steps: int = 3, inject_mismatch: bool = False,
               on_result: Callable[[CheckResult], None] | None = None,
               timeout: float = 600, threads: int | None = None) -> list[CheckResult]:
    """Every check of `check_grids` (``world_size``), one local world per world size (on GPUs
    NCCL with one GPU per rank, or gloo where ranks share GPUs; else gloo with the cores shared
    out, or ``threads`` per rank, else OMP_NUM_THREADS), smallest first;
    ``on_result`` sees each world's results as they come. A rank that raises, or a world that
    does not start, raises `RuntimeError` with the failing rank's traceback."""
    from plexus_partition.launch.env import gpu_backend, threads_per_worker
    from plexus.runtime.world import run_world

    by_size: dict[int, list[tuple[int, int, int]]] = {}
    for dims in check_grids(world_size):
        by_size.setdefault(dims[0] * dims[1] * dims[2], []).append(dims)
    results = []
    for size, grids in by_size.items():
        ranks = run_world(size, rank_checks, grids, cuda, steps, inject_mismatch,
                          timeout=timeout,
                          threads=1 if cuda else threads_per_worker(size, requested=threads),
                          backend=gpu_backend(size) if cuda else "gloo", cuda=cuda,
                          preload=[__name__])  # CPU worlds: forked, torch imported once
        for result in merge(ranks):
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def result_line(r: CheckResult, backend: str, device: str) -> str:
    """``PASS``/``FAIL``, the check, the largest differences, the backend and device, the
    memory per rank and the step time; a failure's first message at the end."""
    peak = ("GPU peak" if device == "cuda" else "peak RSS") + ("" if r.own_peak else " so far")
    line = (f"{'PASS' if r.passed else 'FAIL'}  {r.grid:<7} {r.model:<4} {r.graph:<10}  "
            f"max abs diff: logits {r.logits:.1e}, loss {r.loss:.1e}, grads {r.grads:.1e}  "
            f"{backend} {device}  this check +{format_bytes(r.check_bytes)}/rank "
            f"({peak} {format_bytes(r.memory_bytes)})  step {format_seconds(r.step_s)}")
    if not r.passed:
        more = f" (+{len(r.failures) - 1} more)" if len(r.failures) > 1 else ""
        line += f"  [{r.failures[0]}{more}]"
    return line


# ---- the command line ------------------------------------------------------------------------
def add_arguments(p: ArgumentParser) -> None:
    """``plexus-bench check``'s options."""
    from plexus.runtime.options import add_device_options  # torch: not at the tool's start

    p.add_argument("--world-size", type=int, metavar="G",
                   help="largest world checked: grids of 1, 2, 4, ... and G ranks (default: the "
                        "GPUs of this machine, one rank each; 4 on the CPU)")
    add_device_options(p)
    p.add_argument("--steps", type=int, default=3, metavar="N",
                   help="training steps timed per check (default 3; the median is shown)")
    p.add_argument("--layer", metavar="MODULE:CLASS",
                   help="check your own plexus.nn.Layer instead (importable from the current "
                        "folder or PYTHONPATH): a two-layer network of it on the same grids "
                        "against 1x1x1 (CPU, gloo), PASS/FAIL per grid and graph")
    # Tests: shift one weight of rank 0's model, so every check must report FAIL.
    p.add_argument("--inject-mismatch", action="store_true", help=argparse.SUPPRESS)


def check_main(args: argparse.Namespace) -> int:
    """Run ``plexus-bench check`` with parsed ``args``: one line per check, then a summary.
    Exit 0 if every check passed, 1 if any failed (or a rank died), 2 on bad input."""
    from plexus_partition.launch.env import LaunchError, env_threads, gpu_backend, use_cuda

    try:
        cuda = use_cuda(args.device)
        import torch

        world = args.world_size
        if world is None:
            world = torch.cuda.device_count() if cuda else 4
        if world < 1:
            raise UsageError(f"--world-size must be >= 1, got {world}")
        if args.steps < 1:
            raise UsageError(f"--steps must be >= 1, got {args.steps}")
        if args.threads is not None and args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        if args.threads is None:
            try:
                env_threads()  # a bad OMP_NUM_THREADS, before any world starts
            except LaunchError as e:
                raise UsageError(f"{e}, or give --threads N") from None
        try:
            check_grids(world)
        except ValueError as e:  # no grid of that size fits the graphs
            raise UsageError(f"--world-size {world}: {e}") from None
    except LaunchError as e:  # --device cuda where there is none
        return report_error(PROG, f"--device {args.device}: {e}")
    except UsageError as e:
        return report_error(PROG, e)
    if args.layer:
        return layer_check_main(args.layer, check_grids(world))
    device = "cuda" if cuda else "cpu"

    def backend(size: int) -> str:  # several ranks on one GPU talk gloo through host memory
        return ("nccl" if gpu_backend(size) == "nccl" else "gloo-shared-gpu") if cuda else "gloo"

    start = time.perf_counter()
    try:
        results = run_checks(world, cuda, args.steps, args.inject_mismatch,
                             on_result=lambda r: print(result_line(
                                 r, backend(GridShape.of(r.grid).world_size), device), flush=True),
                             threads=args.threads)
    except RuntimeError as e:
        lines = [s for s in str(e).strip().splitlines() if s.strip()]
        why = f"{lines[0]} {lines[-1].strip()}" if len(lines) > 1 else (lines or ["failed"])[0]
        return report_error(PROG, f"check: {why}", status=1)
    failed = sum(not r.passed for r in results)
    sizes = sorted({GridShape.of(r.grid).world_size for r in results})
    backends = "/".join(sorted({backend(n) for n in sizes}))
    print(f"{PROG} check: {len(results) - failed} of {len(results)} checks passed "
          f"({backends} on {device}; world sizes {', '.join(map(str, sizes))}; "
          f"{time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if failed else 0


def layer_check_main(spec: str, grids: Sequence[tuple[int, int, int]]) -> int:
    """``plexus-bench check --layer MODULE:CLASS``: `plexus.nn.check_layer` on ``grids``, one
    line per check and a summary; exit 0 if all pass, 1 if any fails, 2 on a bad spec."""
    import os
    import sys

    from plexus.nn.check import check_layer, load_layer

    sys.path.insert(0, os.getcwd())  # the user's module, as `python -m` would find it
    try:
        load_layer(spec)
    except ValueError as e:
        return report_error(PROG, f"--layer {e}")
    start = time.perf_counter()
    try:
        checks = check_layer(spec, grids, report=lambda line: print(line, flush=True))
    except RuntimeError as e:  # a rank died
        lines = [s for s in str(e).strip().splitlines() if s.strip()]
        return report_error(PROG, f"check --layer: {lines[-1] if lines else 'failed'}", status=1)
    failed = sum(not c.passed for c in checks)
    print(f"{PROG} check --layer {spec}: {len(checks) - failed} of {len(checks)} checks passed "
          f"against 1x1x1 ({time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if failed else 0
