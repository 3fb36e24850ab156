"""Issue 2's accuracy bar: the serial reference GCN reaches Kipf & Welling's Cora accuracy."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from cora_accuracy import run_seeds  # noqa: E402


def test_cora_mean_test_accuracy_over_10_seeds(capsys):
    runs = run_seeds(10)
    mean = statistics.mean(final for final, _ in runs)
    with capsys.disabled():
        print(f"\nCora, serial GCN, 10 seeds: mean test accuracy {mean:.4f} "
              f"(per seed: {', '.join(f'{f:.3f}' for f, _ in runs)})")
    assert mean >= 0.805, f"mean test accuracy {mean:.4f} < 0.805"
