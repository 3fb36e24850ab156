"""Issue 2's accuracy bar: the serial reference GCN reaches Kipf & Welling's Cora accuracy."""

from __future__ import annotations

import statistics
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from cora_accuracy import run_seeds  # noqa: E402


@pytest.mark.slow
def test_cora_mean_test_accuracy_over_3_seeds(capsys):
    # 3 seeds keep the suite short (10 seeds: `benchmarks/cora_accuracy.py`, 0.8167 in CI)
    runs = run_seeds(3)
    mean = statistics.mean(final for final, _ in runs)
    with capsys.disabled():
        print(f"\nCora, serial GCN, {len(runs)} seeds: mean test accuracy {mean:.4f} "
              f"(per seed: {', '.join(f'{f:.3f}' for f, _ in runs)})")
    assert mean >= 0.805, f"mean test accuracy {mean:.4f} < 0.805"
