"""The memory model of a link-prediction step (`plexus.perfmodel.linkcost.link_memory`: the
encoder's stages with one batch of pairs' peak in place of the node loss, the embedding block
and its gradient, the positives' ids and the decoder's parameters, gradients and moments)
against the tensor tracker's high-water mark (`plexus.runtime.memstats`, exact for tensors) over
two training steps at 1x1x1, batches of pairs held to 4 MiB, both decoders; within the issue's
15 %. The link world checks every rank of the other grids (tests/link_checks.py)."""

from __future__ import annotations

import pytest

from plexus.api.session import run_grid
from plexus.testing.linkmemory import link_peak
from plexus_datasets import load_dataset
from plexus_datasets.linksplit import random_edge_split

pytestmark = pytest.mark.slow  # a 1-rank world and a graph of 4096 nodes

SPEC = "rmat:scale=12,edge_factor=32,features=128,classes=8,seed=0"
BUDGET = 4 << 20
TOLERANCE = 0.15


def _peak(grid, split, decoder):
    peak = link_peak(grid, split, decoder, hidden=128, out_channels=64, budget=BUDGET)
    return peak.tracked, peak.predicted


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_step_memory_predicted_within_15_percent(decoder):
    split = random_edge_split(load_dataset(SPEC, None, seed=0), (0.85, 0.05, 0.1), seed=0)
    tracked, predicted = run_grid(_peak, split, decoder, grid="1x1x1")
    assert tracked > 8 * 2**20  # the step's tensors, not noise
    assert abs(predicted / tracked - 1) <= TOLERANCE, (
        f"predicted {predicted / 2**20:.2f} MiB, tracked {tracked / 2**20:.2f} MiB")
