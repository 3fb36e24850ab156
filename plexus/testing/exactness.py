"""The distributed model against the serial one: small graphs, both models from one seed, and
the tolerance every exactness check shares (the test suite's `tests/engine_checks.py` and
``plexus-bench check``, `plexus.bench.check`; the graphs live in `plexus_datasets.toy`,
the tolerance in `plexus.engine.tolerance`, for `plexus.nn.check_layer` too).

The distributed model runs on its grid's device; the serial reference always runs on the CPU,
so a GPU rank's results are compared after they are copied to the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from plexus_datasets.graph import Graph
from plexus_datasets.toy import directed_toy_graph, toy_graph  # noqa: F401 (re-exported)
from plexus.engine.comm import Comm
from plexus_partition.model.model import ModelConfig
from plexus.engine.config import EngineConfig
from plexus.engine.grid import Grid
from plexus.engine.model import DistributedModel
from plexus.engine.serial import SerialModel
from plexus.engine.tolerance import (ATOL, RTOL, Difference, close,  # noqa: F401 (re-exported)
                                     difference)
from plexus_partition import shard_graph


def build_pair(grid: Grid, g: Graph, cfg: ModelConfig, perm: str,
               engine: EngineConfig | None = None
               ) -> tuple[DistributedModel, SerialModel, object]:
    """This rank's distributed model (on the grid's device), the serial model (CPU) with the same
    config and seed, and the rank's shard."""
    orders = cfg.orders(g.num_features, g.num_classes)
    adj_hat = g.normalized(cfg.aggregation)
    shard = shard_graph(g, grid.shape, grid.coords, cfg.num_stages, orders, perm, seed=11,
                        adj_hat=adj_hat, aggregation=cfg.aggregation)
    return (DistributedModel(Comm(grid), shard, cfg, seed=5, engine=engine),
            SerialModel(g, cfg, seed=5, adj_hat=adj_hat), shard)


@dataclass
class StepComparison:
    """One training step (dropout on) of the distributed model against the serial one: the
    largest difference of the logits (this rank's real rows and classes), of the loss and of
    any gradient, and the failure messages (empty when everything is close)."""

    logits: float
    loss: float
    grads: float
    failures: list[str]


def compare_step(dist_model: DistributedModel, serial: SerialModel, shard, num_classes: int,
                 step: int = 3) -> StepComparison:
    """Run one forward and backward step of both models with dropout key ``step`` and compare
    the logits, the loss and every parameter's gradient (each held to `difference`'s rule)."""
    dist_model.train()
    serial.train()
    zd, zs = dist_model(step=step), serial(step=step)
    ld, ls = dist_model.loss(zd), serial.loss(zs)
    ld.backward()
    ls.backward()
    rows = torch.from_numpy(shard.output_ids).to(zd.device)
    real = rows >= 0
    c0 = dist_model.class_start
    c1 = min(c0 + zd.shape[1], num_classes)
    named: list[tuple[str, str, Difference]] = []
    if c1 > c0:
        named.append(("logits", "logits", difference(zd[real][:, : c1 - c0],
                                                     zs[rows[real].cpu()][:, c0:c1])))
    named.append(("loss", "loss", difference(ld, ls)))
    want = serial.named_shards()
    for name, p in dist_model.named_shards().items():
        # shard_of pads with zeros: padded gradient entries must be exactly zero as well
        named.append(("grads", f"grad {name}",
                      difference(p.grad, dist_model.shard_of(name, want[name].grad))))
    largest = {kind: max((d.max_abs for k, _, d in named if k == kind), default=0.0)
               for kind in ("logits", "loss", "grads")}
    failures = [m for _, name, d in named if (m := d.message(name))]
    return StepComparison(largest["logits"], largest["loss"], largest["grads"], failures)
