"""What recording a kind's collectives from a dry run costs (`plexus.engine.dryrun`).

Run: ``python benchmarks/dryrun_cost.py [--rounds 5]``

Prints, per operator (GAT with 2 heads, dense, BatchNorm, a GCN stage), the milliseconds of
one fit (five dry runs of its training forward and backward at probe sizes, torch on one
thread) with every axis of the grid above one rank and with one only (a fit depends on no more
of the grid), medians over interleaved rounds; then the first
`plexus.perfmodel.model.rank_configs` of a 2-layer GAT on 16 ranks with the best orders per
grid (every fit it needs, cold) against the same call again (every fit cached), and the load
before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from common import loadavg, median, repo_on_path

repo_on_path()

from plexus.engine import dryrun  # noqa: E402
from plexus.perfmodel.model import rank_configs  # noqa: E402
from plexus.perfmodel.spec import ModelSpec  # noqa: E402
from plexus_partition.model.model import ModelConfig  # noqa: E402

CASES = {"gat": ("gat", {"heads": 2}), "dense": ("mlp", {}), "batchnorm": ("gcn", {}),
         "gcn": ("gcn", {})}


def fit_ms(op: str, dims: tuple[int, int, int]) -> float:
    kind, options = CASES[op]
    cfg = ModelConfig(2, 16, 0.0, kind=kind, norm="batch", **options)
    plan = cfg.plans(64, 8)[1]
    if op == "batchnorm":
        plan = dataclasses.replace(plan, op="batchnorm")
    t = time.perf_counter()
    dryrun.fit_stage(plan, dims, first=False, training=True)
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load before: {loadavg()}")
    grids = ((2, 2, 2), (1, 16, 1))
    times: dict[tuple, list[float]] = {}
    fit_ms("gcn", (2, 2, 2))  # warm up torch's kernels
    for _ in range(args.rounds):
        for op in CASES:
            for dims in grids:
                times.setdefault((op, dims), []).append(fit_ms(op, dims))
    print("one fit (5 dry runs, forward and backward), ms, median of", args.rounds)
    for (op, dims), ts in times.items():
        print(f"  {op:<10} {'x'.join(map(str, dims)):<8} {median(ts):7.1f}")
    spec = ModelSpec(num_nodes=100_000, nnz=2_000_000, num_features=128, num_classes=40,
                     model=ModelConfig(2, 64, 0.5, kind="gat", heads=2), best_orders=True)
    dryrun._cached_fit.cache_clear()
    t = time.perf_counter()
    rank_configs(16, spec)
    cold = time.perf_counter() - t
    fits = dryrun._cached_fit.cache_info().currsize
    t = time.perf_counter()
    rank_configs(16, spec)
    warm = time.perf_counter() - t
    print(f"rank_configs, GAT on 16 ranks, best orders: {cold:.2f} s with {fits} fits cold, "
          f"{warm:.2f} s cached")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
