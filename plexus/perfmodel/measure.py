"""How ``plexus-bench calibrate`` measures this machine's rates for the performance model (SpMM
and GEMM rates, collective α and β, fixed costs); `plexus.perfmodel.calibration` holds and
reads them.

Compute rates are taken with ``threads`` torch threads (1 by default, as each rank of a local
gloo world runs). Collectives run on local gloo worlds over 127.0.0.1 (one thread per rank), one
world per size asked for: a training step's collectives follow compute, so each timed call comes
after a fixed amount of GEMM on every rank (`BUSY_S` of one rank's measured GEMM rate), whose
waking peers and caches a back-to-back loop would not see (on a 2-core VM that made a call 3-10x
slower than back to back, and far slower once ranks outnumber the cores: a rank descheduled to
let a peer compute is one the collective waits for). Each world's whole-world times are fitted
to the ring model of `plexus.perfmodel`:

    t(all_reduce of n over p)  = 2(p-1)·α + 2(p-1)/p·n·b·β
    t(all_gather  of n over p) =  (p-1)·α +  (p-1)/p·n·b·β      (b = bytes per element)

by least squares on relative error, so the latency-bound small messages weigh as much as the
bandwidth-bound large ones; the smallest world's pair is the file's ``alpha``/``beta``, every
world's pair is kept under ``worlds``. What prices a local run (``groups``): each world is also
timed in groups of every size dividing it (a grid's axis groups, all busy at once) and fitted
per group size to t = latency + bytes moved·β, a fixed cost per call (on a shared host every
call waits for its peers to be scheduled, once per call rather than per ring step).

The step's fixed work (``stage_overhead`` per stage and ``step_overhead``: Python, autograd and
the dispatch of its small operations, which no flop rate sees) is the engine's own training
step timed on a tiny graph at two depths, by a timer the caller passes (`StepTimer`: the model
cannot build the engine). The whole calibration takes well under a minute.
"""

from __future__ import annotations

import platform
import statistics
import time
import warnings
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import numpy as np

from plexus.core.maskhash import GOLDEN, KEY0, MUL
from plexus_partition.model.ops.base import DROPOUT_PASSES
from plexus_partition.model.schedule import ring_volume
from plexus.core.timing import time_calls
from plexus_partition.launch.env import available_cores

from .calibration import FORMAT_VERSION

#: Seconds of GEMM every rank runs before each timed collective (see the module doc), in GEMMs
#: of this side (square, float32).
BUSY_S = 1e-3
BUSY_SIDE = 128


def _timeit(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` calls, after one warm-up call."""
    return statistics.median(time_calls(fn, reps))


def measure_spmm(num_nodes: int = 50_000, nnz_per_row: int = 16,
                 widths: Sequence[int] = (16, 64, 128), reps: int = 5,
                 seed: int = 0) -> list[dict[str, Any]]:
    """Time ``torch.sparse.mm`` of a random float32 CSR matrix with dense blocks of each width.

    Returns one record per width: n, nnz, width, seconds, flops (2·nnz·width / seconds).
    """
    import torch

    rng = np.random.default_rng(seed)
    nnz = num_nodes * nnz_per_row
    # Random columns per row: a scattered access pattern like a permuted graph's.
    crow = np.arange(0, nnz + 1, nnz_per_row, dtype=np.int64)
    col = np.sort(rng.integers(0, num_nodes, size=(num_nodes, nnz_per_row)), axis=1).ravel()
    val = rng.random(nnz, dtype=np.float32)
    with warnings.catch_warnings():  # "CSR support is in beta": noise for a benchmark
        warnings.simplefilter("ignore", UserWarning)
        a = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col),
                                    torch.from_numpy(val), size=(num_nodes, num_nodes),
                                    check_invariants=False)
    out = []
    for width in widths:
        x = torch.randn(num_nodes, width)
        seconds = _timeit(lambda: torch.sparse.mm(a, x), reps)
        out.append({"n": num_nodes, "nnz": nnz, "width": width, "seconds": seconds,
                    "flops": 2.0 * nnz * width / seconds})
    return out


def measure_gemm(shapes: Sequence[tuple[int, int, int]] = ((32_768, 128, 128), (32_768, 64, 64),
                                                           (8_192, 256, 128)),
                 reps: int = 5) -> list[dict[str, Any]]:
    """Time ``torch.mm`` of (m×k)·(k×n) float32 for each (m, k, n): the tall-skinny products of
    a GCN layer. Returns records with m, k, n, seconds, flops (2·m·k·n / seconds)."""
    import torch

    out = []
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        seconds = _timeit(lambda: torch.mm(a, b), reps)
        out.append({"m": m, "k": k, "n": n, "seconds": seconds,
                    "flops": 2.0 * m * k * n / seconds})
    return out


def measure_elementwise(rows: int = 8192, cols: int = 128, reps: int = 5
                        ) -> list[dict[str, Any]]:
    """Time the elementwise chain the model counts as `DROPOUT_PASSES` per element of a
    ``rows`` × ``cols`` float32 activation (`plexus_partition.model.ops.base`): the row and column
    hashes' xor, two int32 rounds of a multiply and a half-word xor over half the columns, then a
    comparison of the int16 halves, a select and a scale over every element (the engine's dropout
    mask on CPUs, `plexus.engine.masks.masked`, has this shape). Returns one record with elements,
    passes, seconds and rate (element passes per second), what ReLU, bias and the loss are priced at
    too: memory-bound passes, far slower than flops."""
    import torch

    x = torch.randn(rows, cols)
    out = torch.empty_like(x)
    # the engine's hash constants (each below 2**31: an int32 multiplier)
    row_h = torch.arange(rows, dtype=torch.int32) * GOLDEN
    col_h = torch.arange(cols // 2, dtype=torch.int32) * KEY0
    zero = torch.zeros(())

    def chain() -> None:
        h = row_h[:, None] ^ col_h[None, :]
        halves = h.view(torch.int16)
        for _ in range(2):
            h.mul_(MUL)
            halves[:, 0::2].bitwise_xor_(halves[:, 1::2])
        keep = halves[:, :cols] >= 0
        torch.where(keep, x, zero, out=out).mul_(2.0)

    seconds = _timeit(chain, reps)
    passes = DROPOUT_PASSES * rows * cols
    return [{"op": "dropout_chain", "elements": rows * cols, "passes": passes,
             "seconds": seconds, "rate": passes / seconds}]


def _time_collectives(sizes: Sequence[int], reps: int, gemms: int,
                      group_sizes: Sequence[int]) -> list[dict[str, Any]]:
    """One rank of the calibration world: time all_reduce and all_gather at every size in
    groups of each of ``group_sizes`` ranks (the world cut into consecutive blocks, every group
    busy at once, as a grid's axis groups are), each call after ``gemms`` GEMMs on every rank:
    a fixed amount of work, which ranks sharing cores take their share of the cores to finish,
    as a training step's compute before its collectives (so a call's time holds the wait for
    peers still computing)."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    # torch >= 2.13 renames all_gather_into_tensor; use whichever exists.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    a = torch.randn(BUSY_SIDE, BUSY_SIDE)

    def busy() -> None:
        for _ in range(gemms):
            torch.mm(a, a)

    batches = 5
    records = []
    for p in group_sizes:
        # A grid's axis of p ranks leaves the world's other ranks in axes across it, and a step
        # alternates between them: so calls alternate between the blocks of p consecutive ranks
        # and the groups of ranks at one stride of p (every rank in one of each), which couples
        # the whole world as a step does. Every rank creates every group (torch.distributed's
        # rule), then uses its own.
        q = world // p
        blocks = [dist.new_group(list(range(g, g + p))) for g in range(0, world, p)]
        across = [dist.new_group(list(range(i, world, p))) for i in range(p)] if q > 1 else []
        pairs = [(p, blocks[rank // p])] + ([(q, across[rank % p])] if q > 1 else [])
        for n in sizes:
            x = torch.ones(n)
            outs = {size: torch.empty(n * size) for size, _ in pairs}
            for op in ("all_reduce", "all_gather"):
                def call(size: int, group: Any, op: str = op) -> None:
                    if op == "all_reduce":
                        dist.all_reduce(x, group=group)
                    else:
                        gather(outs[size], x, group=group)

                for size, group in pairs:
                    call(size, group)  # warm-up: connection set-up and buffer allocation
                means: dict[int, list[float]] = {size: [] for size, _ in pairs}
                # Median of batch means: robust to the scheduler hiccups of a shared machine.
                for _ in range(batches):
                    dist.barrier()
                    spent = {size: 0.0 for size, _ in pairs}
                    for _ in range(max(1, reps // batches)):
                        for size, group in pairs:
                            busy()
                            start = time.perf_counter()
                            call(size, group)
                            spent[size] += time.perf_counter() - start
                    for size in spent:
                        means[size].append(spent[size] / max(1, reps // batches))
                for size, _ in pairs:
                    mean = torch.tensor([statistics.median(means[size])], dtype=torch.float64)
                    # the mean over ranks: what any one rank (the one whose epoch is timed) waits
                    dist.all_reduce(mean)
                    # all_gather's per-rank input is n; its full size (the model's n) n·size.
                    full = n if op == "all_reduce" else n * size
                    records.append({"op": op, "world": world, "group": size, "elements": full,
                                    "seconds": float(mean) / world})
    return records


def measure_collectives(world_size: int = 2, sizes: Sequence[int] = (1, 4_096, 65_536, 1 << 20),
                        reps: int = 20, timeout: float = 120.0, gemms: int = 1,
                        group_sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Time gloo all_reduce / all_gather on a fresh local world of ``world_size`` processes,
    in groups of each of ``group_sizes`` ranks (default: the whole world), each call after
    ``gemms`` GEMMs of `BUSY_SIDE` square on every rank (`busy_gemms`).

    ``sizes`` are per-rank float32 element counts. Returns records with op, world, group,
    elements (the full size n), seconds (mean per call over the ranks). Raises RuntimeError if
    a rank fails.
    """
    from plexus.runtime.world import run_world  # noqa: PLC0415 (starts processes)

    groups = list(group_sizes) if group_sizes else [world_size]
    # forked from a fork server that imported torch once: a calibration starts several worlds
    return run_world(world_size, _time_collectives, list(sizes), reps, gemms, groups,
                     timeout=timeout, preload=[__name__])[0]


def busy_gemms(gemm_flops: float, busy_s: float = BUSY_S) -> int:
    """How many `BUSY_SIDE`-square GEMMs one rank runs in ``busy_s`` at ``gemm_flops``."""
    return max(1, round(busy_s * gemm_flops / (2.0 * BUSY_SIDE ** 3)))


def group_sizes(world: int) -> list[int]:
    """The group sizes a local world of ``world`` ranks is timed in: every divisor >= 2 (the
    axis sizes of its grids)."""
    return [p for p in range(2, world + 1) if world % p == 0]


def fit_group(records: Sequence[dict[str, Any]], dtype_bytes: int = 4) -> tuple[float, float]:
    """Least-squares (latency per call, β) over collective records of one group size:
    t = latency + bytes moved per rank (ring volume)·β, on relative error. On a shared host a
    call's fixed cost is the wake-up of every peer, once per call whatever the ring's steps
    (an all-gather of one element costs what an all-reduce of one does)."""
    rows, times = [], []
    for r in records:
        rows.append([1.0, ring_volume(r["op"], r["elements"], r["group"]) * dtype_bytes])
        times.append(r["seconds"])
    a, t = np.asarray(rows, dtype=float), np.asarray(times, dtype=float)
    w = 1.0 / t  # relative error
    (latency, beta), *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    return max(float(latency), 1e-9), max(float(beta), 1e-15)


def fit_alpha_beta(records: Sequence[dict[str, Any]], dtype_bytes: int = 4) -> tuple[float, float]:
    """Least-squares (α, β) of the ring model over collective timing records (see module doc)."""
    rows, times = [], []
    for r in records:
        p, n = r["world"], r["elements"]
        factor = 2 if r["op"] == "all_reduce" else 1
        rows.append([factor * (p - 1), factor * (p - 1) / p * n * dtype_bytes])
        times.append(r["seconds"])
    a, t = np.asarray(rows, dtype=float), np.asarray(times, dtype=float)
    w = 1.0 / t  # relative error
    (alpha, beta), *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    # A negative coefficient means noise swamped that term; keep a tiny positive value so the
    # model stays well defined.
    return max(float(alpha), 1e-9), max(float(beta), 1e-15)


#: What times the engine's own training steps for `calibrate`: given layer counts, repetitions
#: and threads, the seconds of one step (the fastest) of a model of each depth on a tiny graph
#: (the model cannot build the engine; `plexus.bench.stepcost.step_seconds` is the one).
StepTimer = Callable[[Sequence[int], int, int], Sequence[float]]
#: The depths `calibrate` times the step at: their difference is stages' fixed work.
OVERHEAD_LAYERS = (1, 3)


def calibrate(world_size: int | Sequence[int] = 2, threads: int = 1, quick: bool = False,
              log: Callable[[str], None] | None = None,
              step_timer: StepTimer | None = None) -> dict[str, Any]:
    """Measure everything and return the calibration document (see `write_calibration`).

    ``world_size``: the local world size(s) to time collectives on; each size above 1 gets its
    own (α, β) under ``worlds``, the smallest's is ``alpha``/``beta``, and a latency per call
    and β per group size under ``groups``. Only 1: no collectives (α and β are then left to the
    model's defaults). ``step_timer`` (`StepTimer`) gives ``stage_overhead`` and
    ``step_overhead``; without it they are not measured (the model prices no fixed work).
    ``quick`` uses small problems and few repetitions (for tests and sweeps; the rates are
    rough).
    """
    import torch

    sizes_asked = [world_size] if isinstance(world_size, int) else list(world_size)
    if not sizes_asked or min(sizes_asked) < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    worlds = sorted({w for w in sizes_asked if w > 1})
    say = log or (lambda _msg: None)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        say(f"SpMM (torch.sparse.mm, CSR, {threads} thread(s)) ...")
        spmm = measure_spmm(num_nodes=5_000 if quick else 50_000, reps=2 if quick else 5)
        say("GEMM (torch.mm) ...")
        gemm = measure_gemm(((4_096, 64, 64),) if quick else
                            ((32_768, 128, 128), (32_768, 64, 64), (8_192, 256, 128)),
                            reps=2 if quick else 5)
        say("elementwise passes (dropout's hash, select, scale) ...")
        elementwise = measure_elementwise(reps=3 if quick else 7)
    finally:
        torch.set_num_threads(previous)
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "machine": platform.machine(), "torch": torch.__version__,
        "threads": threads, "cores": available_cores(),
        "spmm_flops": statistics.median(r["flops"] for r in spmm),
        "gemm_flops": statistics.median(r["flops"] for r in gemm),
        "elementwise_rate": statistics.median(r["rate"] for r in elementwise),
        "measurements": {"spmm": spmm, "gemm": gemm, "elementwise": elementwise,
                         "collectives": []},
    }
    if step_timer is not None:
        say(f"fixed work of a training step (the engine on a tiny graph, {threads} thread(s), "
            f"{' and '.join(map(str, OVERHEAD_LAYERS))} layers) ...")
        few, many = step_timer(OVERHEAD_LAYERS, 30 if quick else 100, threads)
        stage = max(many - few, 0.0) / (OVERHEAD_LAYERS[1] - OVERHEAD_LAYERS[0])
        doc["stage_overhead"] = stage
        doc["step_overhead"] = max(few - OVERHEAD_LAYERS[0] * stage, 0.0)
        doc["measurements"]["steps"] = [{"layers": n, "seconds": t}
                                        for n, t in zip(OVERHEAD_LAYERS, (few, many))]
    if worlds:
        sizes = (1, 4_096, 65_536, 262_144) if quick else (1, 4_096, 65_536, 1 << 20)
        gemms = busy_gemms(doc["gemm_flops"])
        doc["worlds"], doc["groups"] = {}, {}
        for w in worlds:
            say(f"collectives (gloo, {w} local ranks in groups of "
                f"{', '.join(map(str, group_sizes(w)))}, each after {BUSY_S * 1e3:g} ms of "
                "compute) ...")
            coll = measure_collectives(w, sizes, reps=10 if quick else 20, gemms=gemms,
                                       group_sizes=group_sizes(w))
            alpha, beta = fit_alpha_beta([r for r in coll if r["group"] == w])
            doc["worlds"][str(w)] = {"alpha": alpha, "beta": beta}
            doc["groups"][str(w)] = {}
            for p in group_sizes(w):
                latency, beta = fit_group([r for r in coll if r["group"] == p])
                doc["groups"][str(w)][str(p)] = {"latency": latency, "beta": beta}
            doc["measurements"]["collectives"] += coll
        doc["alpha"], doc["beta"] = (doc["worlds"][str(worlds[0])][k] for k in ("alpha", "beta"))
        doc["backend"] = "gloo"
    else:
        doc["note"] = ("world size 1: collectives not measured, the model uses its default "
                       "alpha/beta")
    return doc
