"""What ``--dtype bf16`` and ``--recompute`` cost and save: Cora accuracy and epoch time of
float32 against bfloat16, and the memory and epoch time of each option on an R-MAT graph.

    python benchmarks/precision.py                   # Cora 10 seeds + R-MAT scale 16, ~10 min
    python benchmarks/precision.py --seeds 3 --skip-rmat
    python benchmarks/precision.py --smoke           # tiny graphs, 2 of the variants, ~30 s

- Cora: Kipf & Welling's GCN (2 layers, hidden 16, dropout 0.5, lr 0.01, weight decay 5e-4,
  200 epochs, public split) on a 1x1x1 grid, in one local world; test accuracy at the
  best-validation epoch (as ``plexus-train`` reports it), mean ± standard deviation over the
  seeds, and the median training step.
- R-MAT: ``plexus-train`` per variant in its own process (`benchmarks/memory.py`'s runner), a
  3-layer GCN of hidden 256 without and with BatchNorm: peak RSS of training, the tracked tensor
  peak and the memory model's figure per rank, and the median epoch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEFAULT_SPEC = "rmat:scale=16,edge_factor=16,features=128,classes=16,seed=0"
SMOKE_SPEC = "rmat:scale=10,edge_factor=8,features=16,classes=4,seed=0"
# (name, norm, plexus-train flags)
VARIANTS = [("fp32", "none", []), ("bf16", "none", ["--dtype", "bf16"]),
            ("fp32 recompute", "none", ["--recompute"]),
            ("bf16 recompute", "none", ["--dtype", "bf16", "--recompute"]),
            ("fp32", "batch", []), ("bf16", "batch", ["--dtype", "bf16"]),
            ("fp32 recompute", "batch", ["--recompute"]),
            ("bf16 recompute", "batch", ["--dtype", "bf16", "--recompute"])]
MIB = 2**20


def cora_runs(dtypes: list[str], seeds: int, epochs: int, dataset: str) -> dict[str, dict]:
    """Per dtype: test accuracy at the best validation epoch per seed and every training step's
    time. Runs inside a 1-rank world (`plexus.testing.localworld.run_world`)."""
    from plexus.api import distributed_model
    from plexus_datasets import load_dataset
    from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer

    graph, grid = load_dataset(dataset), Grid.create((1, 1, 1))
    out: dict[str, dict] = {d: {"acc": [], "step_s": []} for d in dtypes}
    for seed in range(seeds):
        for dtype in dtypes:  # interleaved: a burst of the machine's other load hits both
            model = distributed_model(graph, grid, ModelConfig(), seed=seed,
                                      engine=EngineConfig(dtype=dtype))
            history = Trainer(model, TrainConfig(epochs=epochs, seed=seed)).fit()
            out[dtype]["acc"].append(max(history, key=lambda s: s.val_acc).test_acc)
            out[dtype]["step_s"] += [s.epoch_time_s for s in history[1:]]
    return out


def mean_std(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.4f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="Cora seeds (default 10)")
    p.add_argument("--cora-epochs", type=int, default=200)
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"R-MAT graph (default {DEFAULT_SPEC})")
    p.add_argument("--grid", default="1x1x1", help="grid of the R-MAT runs")
    p.add_argument("--epochs", type=int, default=4, help="R-MAT epochs per run (the first is "
                                                         "warm-up)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per process")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--min-free", type=float, default=4.0,
                   help="kill a run when the host's available memory drops below this (GiB)")
    p.add_argument("--skip-cora", action="store_true")
    p.add_argument("--skip-rmat", action="store_true")
    p.add_argument("--smoke", action="store_true", help="tiny graphs: seconds")
    p.add_argument("--out", default="benchmarks/out", help="folder for precision.txt and .json")
    args = p.parse_args(argv)
    cora = "cora"
    if args.smoke:
        args.seeds, args.cora_epochs, args.spec, args.epochs, args.hidden = 2, 5, SMOKE_SPEC, 2, 16
        cora = SMOKE_SPEC
    from benchmarks.memory import build_parser as memory_parser, run_plexus
    from plexus.testing.localworld import run_world
    from plexus.bench.output import Tee, machine_info, write_json, write_text

    memory_options = memory_parser().parse_args  # memory.py's own defaults for every other field

    say = Tee()
    info = machine_info()
    say(f"precision benchmark on {info['host']} ({info['cpus']} cpus, load {info['loadavg']}), "
        f"torch {info['torch']}")
    results: dict = {"machine": info}
    if not args.skip_cora:
        say(f"\n{cora}: GCN 2 layers, hidden 16, {args.cora_epochs} epochs, {args.seeds} seeds, "
            f"1x1x1 ({args.threads} threads); test accuracy at the best validation epoch, "
            "mean ± std; median training step")
        runs = run_world(1, cora_runs, ["fp32", "bf16"], args.seeds, args.cora_epochs, cora,
                         threads=args.threads)[0]
        for dtype, r in runs.items():
            say(f"  {dtype:<5} test acc {mean_std(r['acc'])}   step "
                f"{statistics.median(r['step_s']) * 1e3:7.2f} ms   per seed: "
                + " ".join(f"{a:.3f}" for a in r["acc"]))
        diff = statistics.mean(runs["bf16"]["acc"]) - statistics.mean(runs["fp32"]["acc"])
        say(f"  bf16 - fp32 mean test accuracy: {diff * 100:+.2f} points")
        results["cora"] = runs
    if not args.skip_rmat:
        say(f"\n{args.spec}: GCN {args.layers} layers, hidden {args.hidden}, dropout 0.5, grid "
            f"{args.grid}, {args.epochs} epochs (median of all but the first), {args.threads} "
            "threads; per rank, max over ranks: peak RSS of training, tracked tensor peak, the "
            "memory model (no recompute term: an upper bound with it)")
        say(f"  {'variant':<16} {'norm':<6} {'training RSS':>12} {'tensors':>10} {'model':>10} "
            f"{'epoch':>8}")
        rows = []
        for name, norm, flags in VARIANTS[::7] if args.smoke else VARIANTS:
            opts = memory_options([
                "--spec", args.spec, "--layers", str(args.layers), "--hidden", str(args.hidden),
                "--epochs", str(args.epochs), "--threads", str(args.threads), "--min-free",
                str(args.min_free), "--plexus-arg=--norm", f"--plexus-arg={norm}",
                *(f"--plexus-arg={flag}" for flag in flags)])
            r = run_plexus(opts, args.grid)
            rows.append({"variant": name, "norm": norm, **r})
            if not r["ok"]:
                say(f"  {name:<16} {norm:<6} failed: {r['why']}")
                continue
            say(f"  {name:<16} {norm:<6} {max(r['train_rss']) / MIB:8.0f} MiB "
                f"{max(r['tracked']) / MIB:6.0f} MiB {r['predicted'] / MIB:6.0f} MiB "
                f"{r['epoch_s']:7.2f}s")
        results["rmat"] = {"spec": args.spec, "grid": args.grid, "runs": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "precision.txt", say.text())
    write_json(out / "precision.json", results)
    return 0 if all(r["ok"] for r in results.get("rmat", {}).get("runs", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
