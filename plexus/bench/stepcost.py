"""The fixed work of the engine's training step, for the performance model's calibration.

A step's Python, autograd and the dispatch of its small operations cost the same whatever the
graph's size, and no flop rate sees them: on small graphs, or ranks sharing cores, they are much
of the epoch. `step_seconds` times the engine's own step (the GCN plexus-train trains, 1x1x1,
under the tensor tracker as CPU runs train) on a graph so small its flops are negligible, at
several depths; `plexus.perfmodel.measure.calibrate` turns two depths into a cost per stage
and one per step. It lives here because the performance model may not build the engine.
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

#: The tiny graph's R-MAT scale, edge factor, feature and class counts: flops of microseconds.
TINY_GRAPH = {"scale": 6, "edge_factor": 4, "features": 16, "classes": 4}
HIDDEN = 16


def _rank_steps(layers: Sequence[int], reps: int) -> list[float]:
    """On a 1-rank world: the median seconds of a training step for each depth in ``layers``."""
    import torch

    from plexus.api.model import distributed_model
    from plexus_partition.model.grid import GridShape
    from plexus_datasets import rmat_graph
    from plexus.engine.config import TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer
    from plexus.runtime.memstats import TensorTracker, resident_storages

    graph = rmat_graph(**TINY_GRAPH)
    grid = Grid.create(GridShape.of((1, 1, 1)), torch.device("cpu"))
    out = []
    for depth in layers:
        model = distributed_model(graph, grid, "gcn", num_layers=depth, hidden=HIDDEN,
                                  dropout=0.5, memory_check=False)
        trainer = Trainer(model, TrainConfig())
        times = []
        with TensorTracker(resident_storages(model)):
            for _ in range(reps + 2):  # two warm-up steps: first-touch allocations
                start = time.perf_counter()
                trainer.train_step()
                times.append(time.perf_counter() - start)
        # the median, as the other rates: on a machine other jobs load, what a step costs there
        out.append(statistics.median(times[2:]))
    return out


def step_seconds(layers: Sequence[int], reps: int, threads: int = 1) -> list[float]:
    """The median seconds of ``reps`` training steps of a GCN of each depth in ``layers`` on
    a tiny graph, in a fresh 1-rank process with ``threads`` torch threads
    (`plexus.perfmodel.measure.StepTimer`)."""
    from plexus.runtime.world import run_world

    # the thread count in the environment too, as plexus-train's ranks start with it
    return run_world(1, _rank_steps, list(layers), reps, threads=threads,
                     env={"OMP_NUM_THREADS": str(threads)})[0]
