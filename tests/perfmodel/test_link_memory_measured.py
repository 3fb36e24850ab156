"""The memory model of a link-prediction step (`plexus.perfmodel.linkcost.link_memory`: the
encoder's peak with the pair batches' buffers in place of the backward's temporaries) against
the tensor tracker's high-water mark (`plexus.runtime.memstats`, exact for tensors) over two
training steps at 1x1x1, batches of pairs held to 4 MiB, both decoders; within the 15 % the
node model's memory test allows (tests/perfmodel/test_memory_measured.py)."""

from __future__ import annotations

import pytest

from plexus.api.link import link_model
from plexus.api.session import run_grid
from plexus.perfmodel.linkcost import link_cost, link_memory
from plexus.perfmodel.spec import ModelSpec
from plexus.runtime.memstats import TensorTracker, resident_storages
from plexus_datasets import load_dataset
from plexus_datasets.graph import gcn_nnz
from plexus_datasets.linksplit import random_edge_split

pytestmark = pytest.mark.slow  # a 1-rank world and a graph of 4096 nodes

SPEC = "rmat:scale=12,edge_factor=32,features=128,classes=8,seed=0"
BUDGET = 4 << 20
TOLERANCE = 0.15
GRID = {"x": 1, "y": 1, "z": 1}


def _tracked(grid, split, decoder):
    model = link_model(split, grid, "gcn", num_layers=2, hidden=128, dropout=0.5,
                       out_channels=64, decoder=decoder, budget=BUDGET)
    with TensorTracker(resident_storages(model.task, model.encoder.shard)) as tracker:
        for step in range(2):
            for p in model.task.parameters_by_name().values():
                p.grad = None
            model.task.train_step(step)
    return tracker.peak_bytes, [p.order for p in model.task.encoder.plans]


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_step_memory_predicted_within_15_percent(decoder):
    split = random_edge_split(load_dataset(SPEC, None, seed=0), (0.85, 0.05, 0.1), seed=0)
    measured, orders = run_grid(_tracked, split, decoder, grid="1x1x1")
    eg = split.encoder_graph(64)
    spec = ModelSpec.of(eg.num_nodes, gcn_nnz(eg), eg.num_features, 64, num_layers=2,
                        hidden=128, dropout=0.5, allocator_slack=False)
    cost = link_cost(spec, GRID, orders, split.pos["train"].shape[1], decoder, 128, 3,
                     budget=BUDGET)
    memory = link_memory(spec, GRID, orders, cost)
    predicted = memory.total - memory.runtime
    assert abs(predicted / measured - 1) <= TOLERANCE, (
        f"predicted {predicted / 2**20:.2f} MiB, tracked {measured / 2**20:.2f} MiB")
