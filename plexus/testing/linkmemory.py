"""A link-prediction step's peak memory on one rank, measured and predicted: the tensor
tracker's high-water mark (`plexus.runtime.memstats.TensorTracker`, exact for tensors) over
training steps of a `plexus.api.link.LinkModel`, beside the memory model's figure for the same
rank (`plexus.perfmodel.linkcost.link_memory` at its grid coordinates, tensors only: no runtime,
no allocator slack). The link world's check (tests/link_checks.py), the 1x1x1 test
(tests/perfmodel/test_link_memory_measured.py) and benchmarks/link_memory.py call it."""

from __future__ import annotations

from dataclasses import dataclass

from plexus.api.link import link_model
from plexus_partition.model.pairs import DECODER_LAYERS
from plexus.engine.grid import Grid
from plexus.perfmodel.linkcost import link_cost, link_memory
from plexus.perfmodel.memory import Memory
from plexus.perfmodel.spec import ModelSpec
from plexus.runtime.memstats import TensorTracker, resident_storages
from plexus_datasets.graph import gcn_nnz
from plexus_datasets.linksplit import LinkSplit


@dataclass(frozen=True)
class LinkPeak:
    """One rank's tracked tensor peak and the model's tensors for it, in bytes."""

    rank: int
    coords: tuple[int, int, int]
    tracked: int
    memory: Memory

    @property
    def predicted(self) -> float:
        """The model's tensors: its total less the process's runtime."""
        return self.memory.total - self.memory.runtime

    @property
    def ratio(self) -> float:
        """Predicted over tracked."""
        return self.predicted / self.tracked


def link_peak(grid: Grid, split: LinkSplit, decoder: str, hidden: int, out_channels: int,
              budget: float, steps: int = 2, dropout: float = 0.5) -> LinkPeak:
    """This rank's `LinkPeak`: a 2-layer GCN encoder of ``hidden`` units and ``out_channels``
    output columns, the ``decoder`` (its MLP of ``hidden`` units), batches of ``budget``
    bytes, ``steps`` training steps (gradients zeroed between them, as an optimizer does)."""
    model = link_model(split, grid, "gcn", num_layers=2, hidden=hidden, dropout=dropout,
                       out_channels=out_channels, decoder=decoder,
                       decoder_layers=DECODER_LAYERS, budget=budget)
    with TensorTracker(resident_storages(model.task, model.encoder.shard)) as tracker:
        for step in range(steps):
            for p in model.task.parameters_by_name().values():
                p.grad = None
            model.task.train_step(step)
    orders = [p.order for p in model.task.encoder.plans]
    eg = split.encoder_graph(out_channels)
    spec = ModelSpec.of(eg.num_nodes, gcn_nnz(eg), eg.num_features, out_channels,
                        num_layers=2, hidden=hidden, dropout=dropout, allocator_slack=False)
    shape = dict(grid.shape.items())
    cost = link_cost(spec, shape, orders, split.pos["train"].shape[1], decoder, hidden,
                     DECODER_LAYERS, budget=budget)
    coords = dict(grid.coords)
    memory = link_memory(spec, shape, orders, cost, coords)
    return LinkPeak(grid.rank, tuple(coords[a] for a in "xyz"), tracker.peak_bytes, memory)
