"""SpMM seconds per training epoch at 1x1x1: the node order and the product order, before/after.

Run: ``python benchmarks/spmm_epoch.py``            (R-MAT scale 19, edge factor 25; minutes)
     ``python benchmarks/spmm_epoch.py --smoke``    (tiny graph, seconds; for the tests)

Issue 14 asks for the SpMM time per epoch at 1x1x1 on the scale-19 graph to drop by >= 1.5x.
Four engines train the same model (3 GCN layers, hidden 256, dropout 0.5) on the same graph:

- ``before``: the engine as it was, a random node order ("double" permutation without the
  locality sort) and the paper's aggregate-first order on every layer;
- ``+locality``: the same with each fine block of the permutation sorted by degree
  (`plexus_partition.permutations.locality_order`);
- ``+auto``: the random order with ``--order auto`` (combine first on the narrowing last layer:
  its SpMM then multiplies C columns instead of the hidden width);
- ``after``: both (the defaults now).

All four models are built first, then their training steps run round-robin (one step of each
per round), so a change in the machine's load hits every engine alike; each figure is the
median over rounds of the step's SpMM wall seconds (``plexus.engine.timing.Timers``, the same
timer plexus-train reports), with ``--threads`` torch threads. The losses of every round must
agree between the engines to float rounding (the orders change nothing else): the largest
difference is printed, and a difference above 1e-4 fails the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (
    OUT_DIR,
    Tee,
    format_table,
    load_bundle,
    machine_info,
    median,
    rank_shards,
    write_text,
)

SPEC = "rmat:scale=19,edge_factor=25,features=100,classes=47,seed=0"
SMOKE_SPEC = "rmat:scale=10,edge_factor=8,features=16,classes=4,seed=0"
VARIANTS = {"before": ("agg", False), "+locality": ("agg", True), "+auto": ("auto", False),
            "after": ("auto", True)}
TARGET = 1.5
LOSS_TOLERANCE = 1e-4


def build(bundle, order: str, locality: bool, hidden: int, seed: int):
    """The 1x1x1 model and its trainer for one variant."""
    from plexus_partition import make_permutation

    from plexus.engine.build import build_model
    from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.timing import Timers
    from plexus.engine.trainer import Trainer

    cfg = ModelConfig(num_layers=3, hidden=hidden, dropout=0.5, order=order)
    perm = make_permutation(bundle.adj_hat, "double", seed, 1, locality=locality)
    shard = next(rank_shards(bundle, (1, 1, 1), cfg, perm, seed))
    grid = Grid.create((1, 1, 1))
    timers = Timers(grid.device)
    model = build_model(grid, shard, cfg, seed, EngineConfig(), timers)
    return Trainer(model, TrainConfig(epochs=10**9, seed=seed, eval_every=0)), timers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default=SPEC, help=f"dataset (default {SPEC})")
    p.add_argument("--root", default=None, help="dataset root for file-based specs")
    p.add_argument("--hidden", type=int, default=256, help="hidden width (default 256)")
    p.add_argument("--rounds", type=int, default=5, help="timed steps per engine (default 5)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    p.add_argument("--smoke", action="store_true", help="tiny graph, 2 rounds")
    args = p.parse_args(argv)
    if args.smoke:
        args.spec, args.hidden, args.rounds = SMOKE_SPEC, 32, 2
    if args.rounds < 1:
        p.error("--rounds must be >= 1")

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    say = Tee()
    bundle = load_bundle(args.spec, args.root)
    say(f"graph {bundle.describe()}")
    say(f"model: 3 GCN layers, hidden {args.hidden}, dropout 0.5, 1x1x1, {args.threads} torch "
        f"threads; {args.rounds} rounds, one step of each engine per round, medians")
    info = machine_info()
    say(f"machine: {info['cpus']} cpus, load {info['loadavg']}, torch {info['torch']}")
    store = dist.HashStore()
    dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    try:
        engines = {name: build(bundle, order, loc, args.hidden, 0)
                   for name, (order, loc) in VARIANTS.items()}
        del bundle  # the shards hold what the models need
        for trainer, _ in engines.values():
            trainer.train_step()  # warm-up: first touch of every buffer
        spmm = {name: [] for name in engines}
        step = {name: [] for name in engines}
        losses = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, (trainer, timers) in engines.items():
                timers.reset()
                start = time.perf_counter()
                losses[name].append(trainer.train_step())
                step[name].append(time.perf_counter() - start)
                spmm[name].append(timers.seconds.get("spmm", 0.0))
    finally:
        dist.destroy_process_group()
    base = median(spmm["before"])
    rows = [[name, VARIANTS[name][0], "on" if VARIANTS[name][1] else "off",
             f"{median(spmm[name]):.3f}", f"{median(step[name]):.2f}",
             f"{base / median(spmm[name]):.2f}x"] for name in engines]
    say(format_table(["engine", "order", "locality", "spmm s/epoch", "step s", "spmm speed-up"],
                     rows))
    worst = max(abs(a - b) for name in engines for a, b in zip(losses[name], losses["before"]))
    say(f"largest loss difference to 'before' over {args.rounds} steps: {worst:.2e} "
        f"(limit {LOSS_TOLERANCE:g})")
    gain = base / median(spmm["after"])
    say(f"SpMM per epoch: before {base:.3f} s, after {median(spmm['after']):.3f} s: {gain:.2f}x "
        f"(target >= {TARGET}x: {'met' if gain >= TARGET else 'NOT met'})")
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "spmm_epoch.txt", say.text())
    say(f"wrote {args.out / 'spmm_epoch.txt'}")
    return 0 if worst <= LOSS_TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
