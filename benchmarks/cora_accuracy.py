"""Serial reference accuracy on Cora in Kipf & Welling's setup, over several seeds.

2 layers, hidden 16, dropout 0.5, weight decay 5e-4, lr 0.01, 200 epochs, public split.
Kipf & Welling report 81.5%. Prints per-seed and mean test accuracy (final epoch, and at the
best-validation epoch).

    python benchmarks/cora_accuracy.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from plexus.engine.config import ModelConfig, TrainConfig
from plexus_datasets import load_dataset
from plexus.engine.serial import SerialModel
from plexus.engine.trainer import Trainer


def run_seeds(seeds: int, threads: int = 2) -> list[tuple[float, float]]:
    """(final-epoch test accuracy, test accuracy at the best-validation epoch) per seed."""
    torch.set_num_threads(threads)
    graph = load_dataset("cora")
    out = []
    for seed in range(seeds):
        trainer = Trainer(SerialModel(graph, ModelConfig(), seed), TrainConfig(seed=seed))
        history = trainer.fit()
        best = max(history, key=lambda s: s.val_acc)
        out.append((history[-1].test_acc, best.test_acc))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    runs = run_seeds(args.seeds)
    for seed, (final, best) in enumerate(runs):
        print(f"seed {seed}: test acc {final:.4f} (at best val: {best:.4f})")
    print(f"mean over {len(runs)} seeds: test acc {statistics.mean(r[0] for r in runs):.4f} "
          f"(at best val: {statistics.mean(r[1] for r in runs):.4f}); Kipf & Welling: 0.815")


if __name__ == "__main__":
    main()
