"""Work efficiency of the 3D split: the sum over ranks of SpMM + GEMM time over 1x1x1's, each rank
measured alone.

Run: ``python benchmarks/work_efficiency.py [--spec SPEC] [--grids ...] [--rounds 3]``
     ``python benchmarks/work_efficiency.py --smoke`` (tiny graph, seconds; for the tests)

The issue's target: on G ranks with one thread each, Σ over ranks of compute time <= 1.15 × the
1x1x1 compute time with one thread, for G = 2, 4, 8 (the 3D split adds no hidden work). "One
thread each" means one core each; this machine has 2 cores and is shared with other jobs, so G
concurrent ranks measure the sharing of cores, caches and memory bandwidth as much as the work
(`strong_scaling.py` prints those concurrent figures). Here every rank's training step runs
alone instead: in this one process, one torch thread, on a fake process group
(``torch.testing._internal.distributed.fake_pg``: collectives return at once and leave their
buffers as they are). The rank builds its real shard and model and runs the same SpMMs and GEMMs,
with the same blocks, shapes, layouts and GEMM formulations, as in a real run; only the values that
collectives would have brought differ, and kernel times do not depend on values (denormals are
flushed to zero, for every variant alike). Round by round, the 1x1x1 step is measured between
the grids' ranks, so a drift of the machine's load hits both sides of the ratio alike.

Per grid: Σ over ranks of the median (over rounds) compute CPU seconds, split into SpMM and GEMM,
and the ratio to 1x1x1; per G, the verdict on the best grid (the one the strong-scaling run or
the performance model would pick) and the range over all grids.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (OUT_DIR, SMOKE_SPEC, COMPUTE, Tee, add_grid_options,
                               add_training_options, format_table, grid_text, load_bundle,
                               machine_info, rank_shards, selected_grids, timers_class,
                               training_config, write_results)

TARGET = 1.15


def rank_step(shard: Any, dims: tuple[int, int, int], rank: int, cfg: Any, engine: Any,
              steps: int, seed: int = 0) -> dict[str, float]:
    """Median SpMM and GEMM thread-CPU seconds of ``steps`` training steps of rank ``rank`` of
    grid ``dims``, run alone on a fake process group (after one untimed warm-up step)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from plexus.engine.build import build_model
    from plexus.engine.config import TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer

    world = dims[0] * dims[1] * dims[2]
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        grid = Grid.create(dims)
        timers = timers_class()(grid.device, enabled=True)
        model = build_model(grid, shard, cfg, seed, engine, timers)
        trainer = Trainer(model, TrainConfig(epochs=10**9, seed=seed, eval_every=0))
        trainer.train_step()  # warm-up: GEMM tuning, first touch of the buffers
        out: dict[str, list[float]] = {n: [] for n in COMPUTE}
        for _ in range(steps):
            timers.reset()
            trainer.train_step()
            for n in COMPUTE:
                out[n].append(timers.cpu_seconds.get(n, 0.0))
        return {n: median(v) for n, v in out.items()}
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_options(p, "2,4,8")
    p.add_argument("--rounds", type=int, default=3,
                   help="measurements of every rank and of 1x1x1 per grid (default 3)")
    add_training_options(p, epochs=1)
    p.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    p.add_argument("--smoke", action="store_true", help="tiny graph, grids 2x1x1,1x2x2, 1 round")
    args = p.parse_args(argv)
    if args.smoke:
        args.spec, args.hidden, args.rounds = SMOKE_SPEC, 16, 1
        args.grids = args.grids or "2x1x1,1x2x2"
    grids = [g for g in selected_grids(args, p) if g != (1, 1, 1)]
    if args.rounds < 1 or args.epochs < 1:
        p.error("--rounds and --epochs must be >= 1")
    cfg, engine = training_config(args, p)

    from plexus_partition.launch.hostmem import enable_huge_pages

    huge = engine.huge_pages and enable_huge_pages()  # as plexus-train's workers, before tensors
    import torch

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # buffers a fake collective left alone may hold denormals
    say = Tee()
    bundle = load_bundle(args.spec, args.root)
    info = machine_info()
    say(f"graph {bundle.describe()}")
    say(f"model: {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, order "
        f"{args.order}, backend {args.backend}, perm {args.perm}; 1 thread; every rank alone on "
        f"a fake process group; {args.rounds} round(s) x {args.epochs} step(s), median; huge "
        f"pages {'on' if huge else 'off'}")
    say(f"machine: {info['cpus']} cpus, load {info['loadavg']}, torch {info['torch']}")
    from plexus_partition import make_permutation

    def shards_of(dims: tuple[int, int, int]) -> list:
        world = dims[0] * dims[1] * dims[2]
        perm = make_permutation(bundle.adj_hat, args.perm, 0, world)
        return list(rank_shards(bundle, dims, cfg, perm, 0))

    base_shard = shards_of((1, 1, 1))[0]
    rows, csv_rows, by_world = [], [], {}
    for dims in grids:
        shards = shards_of(dims)
        per_rank: list[list[dict[str, float]]] = [[] for _ in shards]
        base_here = []
        for _ in range(args.rounds):
            base_here.append(rank_step(base_shard, (1, 1, 1), 0, cfg, engine, args.epochs))
            for r, shard in enumerate(shards):
                per_rank[r].append(rank_step(shard, dims, r, cfg, engine, args.epochs))
        base = {n: median(b[n] for b in base_here) for n in COMPUTE}
        ranks = [{n: median(m[n] for m in meas) for n in COMPUTE} for meas in per_rank]
        total = {n: sum(r[n] for r in ranks) for n in COMPUTE}
        eff = sum(total.values()) / sum(base.values())
        by_world.setdefault(len(shards), []).append((dims, eff))
        rows.append([grid_text(dims), len(shards), f"{sum(base.values()):.3f}",
                     f"{total['spmm']:.3f}", f"{total['gemm']:.3f}",
                     f"{total['spmm'] / base['spmm']:.3f}", f"{total['gemm'] / base['gemm']:.3f}",
                     f"{eff:.3f} {'ok' if eff <= TARGET else 'MISS'}"])
        csv_rows.append({"grid": grid_text(dims), "world": len(shards),
                         "base_spmm_s": base["spmm"], "base_gemm_s": base["gemm"],
                         "sum_spmm_s": total["spmm"], "sum_gemm_s": total["gemm"],
                         "work_efficiency": eff})
        say(f"  {grid_text(dims)}: {eff:.3f}")
    say("")
    say("seconds of thread CPU time per epoch; 1x1x1 = its compute (spmm + gemm) measured in the "
        "same rounds; sum = over ranks; ratios to 1x1x1; work eff = sum / 1x1x1 "
        f"(target <= {TARGET})")
    say(format_table(["grid", "G", "1x1x1 s", "sum spmm s", "sum gemm s", "spmm x", "gemm x",
                      "work eff"], rows))
    say("")
    for world, effs in sorted(by_world.items()):
        best_dims, best = min(effs, key=lambda t: t[1])
        ok = [grid_text(d) for d, e in effs if e <= TARGET]
        say(f"G={world}: work efficiency {min(e for _, e in effs):.3f}..{max(e for _, e in effs):.3f}"
            f"; <= {TARGET} on {len(ok)} of {len(effs)} grids ({', '.join(ok) or 'none'}); best "
            f"{grid_text(best_dims)} {best:.3f}")
    write_results(args.out, "work_efficiency", csv_rows, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
