"""bf16 compute (`EngineConfig.dtype`) does not move Cora's accuracy: Kipf & Welling's GCN, 3
seeds of 200 epochs per precision, on a 1x1x1 grid. A world of its own (one rank), outside the
shared worlds (`tests/worlds.py`): one process's work, run beside other files rather than in
the worlds' phase, when the other cores wait (`tests/workers.py`)."""

from __future__ import annotations

import statistics

import pytest

from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
from plexus.engine.grid import Grid
from plexus.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # 1,200 epochs in a one-rank world


def cora_accuracy(dtypes: tuple[str, ...], seeds: int, epochs: int) -> dict[str, list[float]]:
    """Test accuracy at the best validation epoch (as plexus-train reports it) of Kipf &
    Welling's GCN on Cora, per compute precision and seed, on a 1x1x1 grid."""
    from plexus.api import distributed_model
    from plexus_datasets import load_dataset

    g, grid = load_dataset("cora"), Grid.create((1, 1, 1))
    out: dict[str, list[float]] = {}
    for dtype in dtypes:
        for seed in range(seeds):
            model = distributed_model(g, grid, ModelConfig(), seed=seed,
                                      engine=EngineConfig(dtype=dtype))
            history = Trainer(model, TrainConfig(epochs=epochs, seed=seed)).fit()
            out.setdefault(dtype, []).append(max(history, key=lambda s: s.val_acc).test_acc)
    return out


def test_bf16_cora_accuracy_equals_fp32(capsys):
    from plexus.testing.localworld import run_world

    acc = run_world(1, cora_accuracy, ("fp32", "bf16"), 3, 200)[0]
    means = {k: statistics.mean(v) for k, v in acc.items()}
    with capsys.disabled():
        print("\nCora GCN, 3 seeds, test accuracy at the best validation epoch: "
              + ", ".join(f"{k} {m:.4f} ({', '.join(f'{a:.3f}' for a in acc[k])})"
                          for k, m in means.items()))
    assert abs(means["bf16"] - means["fp32"]) <= 0.005, means
