"""The distributed model against the serial one: small graphs, both models from one seed, and
the tolerance every exactness check shares (the test suite's `tests/engine_checks.py` and
``plexus-bench check``, `plexus.testing.firstrun`).

The distributed model runs on its grid's device; the serial reference always runs on the CPU,
so a GPU rank's results are compared after they are copied to the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from plexus.datasets.graph import Graph
from plexus.engine.comm import Comm
from plexus.engine.config import EngineConfig, ModelConfig
from plexus.engine.grid import Grid
from plexus.engine.model import DistributedModel
from plexus.engine.serial import SerialModel
from plexus.partitioners import shard_graph

# float32 on both sides; the reductions run in another order on a grid than serially
RTOL, ATOL = 1e-4, 1e-5


def toy_graph(n: int = 37, f: int = 11, c: int = 5, seed: int = 1) -> Graph:
    """A small random undirected graph whose N, feature and class counts are primes (no axis
    divides them), with unlabelled nodes and all three masks."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.12, random_state=seed, format="csr")
    a = sp.csr_matrix(((a + a.T) > 0).astype(np.float32))
    labels = rng.integers(0, c, n).astype(np.int64)
    labels[:3] = -1
    order = rng.permutation(np.arange(3, n))
    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][order[:17]] = True
    masks[1][order[17:25]] = True
    masks[2][order[25:]] = True
    feats = rng.standard_normal((n, f)).astype(np.float32)
    return Graph("toy", a, feats, labels, *masks, num_classes=c).validate()


def directed_toy_graph(n: int = 41, f: int = 7, c: int = 3, seed: int = 2) -> Graph:
    """Like `toy_graph` but directed (Â not symmetric: a broken transpose path shows), with a
    node that has no in-neighbour."""
    g = toy_graph(n, f, c, seed)
    a = sp.random(n, n, density=0.1, random_state=seed + 7, format="csr")
    keep = np.ones(n, np.float32)
    keep[5] = 0  # node 5 has no in-neighbour: mean aggregation over nothing is 0
    a = sp.csr_matrix((a > 0).astype(np.float32) @ sp.diags(keep))
    a.eliminate_zeros()
    return Graph("toy-directed", a, g.features, g.labels, g.train_mask, g.val_mask, g.test_mask,
                 num_classes=c, directed=True).validate()


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


@dataclass(frozen=True)
class Difference:
    """How far a tensor is from its reference: the largest absolute difference, the tolerance
    it is held to (`ATOL` in units of the reference's largest value once that exceeds 1, as
    float32 rounding grows with the size of what is summed) and whether every element is
    within ``RTOL``·|reference| + that. A shape mismatch is never close."""

    max_abs: float
    scale: float
    close: bool
    shape_error: str = ""

    def message(self, name: str) -> str:
        """One line saying how ``name`` differs ('' when it is close)."""
        if self.shape_error:
            return f"{name}: {self.shape_error}"
        if self.close:
            return ""
        return f"{name}: max abs error {self.max_abs:.3g} (largest value {self.scale:.3g})"


def difference(got: torch.Tensor, want: torch.Tensor) -> Difference:
    """`Difference` of ``got`` from ``want`` (any devices; compared in float64 on the CPU)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if got.shape != want.shape:
        return Difference(float("inf"), 1.0, False,
                          f"shape {tuple(got.shape)} != {tuple(want.shape)}")
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    max_abs = (got - want).abs().max().item() if want.numel() else 0.0
    return Difference(max_abs, scale, torch.allclose(got, want, rtol=RTOL, atol=ATOL * scale))


def close(name: str, got: torch.Tensor, want: torch.Tensor) -> list[str]:
    """[] when ``got`` is close to ``want`` (see `Difference`), else the one failure message."""
    message = difference(got, want).message(name)
    return [message] if message else []


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
