"""Checks of the sparse exchanges (issue 45 item 4) that run inside a gloo world: results equal
the serial model's, the ledger's bytes equal the performance model's priced with row counts
computed here from every rank's shard (an oracle apart from the engine's
`plexus_partition.rowsets`), and the saving against ``sparse_comm="off"`` is the factor the
model predicts."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from engine_checks import check_step, check_training, exchange_counts, input_by_aggregation
from plexus_partition.model.schedule import SparseExchange, exact_rows
from plexus_datasets.graph import Graph
from plexus_datasets.rmat import rmat_graph
from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
from plexus.engine.grid import Grid
from plexus.engine.trainer import Trainer
from plexus_partition.plan import shard_graph
from plexus.perfmodel import ModelSpec
from plexus.perfmodel.model import epoch_volume
from plexus.testing.exactness import build_pair

HIDDEN = 6
SEED = 11  # build_pair's partition seed
#: both convolution orders on each axis: at 8x1x1 stage 0 sums over x (combine first: AR(OUT);
#: aggregate first: AR(AGG)) and stage 2 over x again with its gradient's gather; at 1x8x1 the
#: second config's stage 1 sums and gathers over y; at 1x1x8 stage 2 (aggregate first) of both
#: sums its input gradient over z as an exchange of the block's touched columns
CONFIGS = {"agg-combine-agg": ModelConfig(3, HIDDEN, 0.5, order="agg,combine,agg"),
           "combine-agg-agg": ModelConfig(3, HIDDEN, 0.5, order="combine,agg,agg")}


def rmat_graphs(scale: int = 8) -> dict[str, Graph]:
    """An undirected R-MAT graph and a directed one made from it (one direction of two edges
    in three dropped)."""
    g = rmat_graph(scale, edge_factor=8, features=12, classes=5, seed=3)
    coo = g.adj.tocoo()
    keep = (coo.row * 7 + coo.col * 3) % 3 != 0
    adj = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=g.adj.shape)
    d = Graph(f"{g.name}-directed", adj, g.features, g.labels, g.train_mask, g.val_mask,
              g.test_mask, g.num_classes, directed=True).validate()
    return {"undirected": g, "directed": d}


def oracle_counts(g: Graph, cfg: ModelConfig, grid: Grid) -> dict[tuple[int, str], tuple]:
    """{(stage, "sum"/"gather"/"input"): (this rank's rows sent, the most of its axis)} from
    the shards of every rank of each stage's outer axis: a row is touched where the block holds
    a non-zero in it; the sum sends the touched rows outside the rank's own 1/p of the rows, the
    gather the other ranks' touched rows inside it; "input" (a later GCN stage, aggregate
    first, over depth) is a sum whose rows are the columns the blocks of depth's ranks touch."""
    shape, coords = grid.shape, grid.coords
    orders = cfg.orders(g.num_features, g.num_classes)
    adj_hat = g.normalized(cfg.aggregation)
    out = {}
    for plan in cfg.plans(g.num_features, g.num_classes):
        o, p = plan.outer, shape[plan.outer]
        d = plan.depth
        if input_by_aggregation(plan) and shape[d] > 1:  # the input gradient's: columns
            touched = [np.asarray(shard_graph(g, shape, dict(coords, **{d: c}), cfg.num_stages,
                                              orders, "double", seed=SEED, adj_hat=adj_hat)
                                  .adj_block(plan.index).getnnz(axis=0) > 0)
                       for c in range(shape[d])]
            out[plan.index, "input"] = exchange_counts(touched, coords[d])[0]
        if p == 1:
            continue
        touched = []
        for c in range(p):
            at = dict(coords, **{o: c})
            blk = shard_graph(g, shape, at, cfg.num_stages, orders, "double", seed=SEED,
                              adj_hat=adj_hat).adj_block(plan.index)
            touched.append(np.asarray(blk.getnnz(axis=1) > 0))
        out[plan.index, "sum"], out[plan.index, "gather"] = exchange_counts(touched, coords[o])
    return out


def _epoch_bytes(grid: Grid, g: Graph, cfg: ModelConfig, mode: str, wire: str) -> dict:
    model, _, _ = build_pair(grid, g, cfg, "double",
                             EngineConfig(sparse_comm=mode, comm_dtype=wire))
    trainer = Trainer(model, TrainConfig(epochs=1, eval_every=0))
    trainer.run_epoch()  # the first epoch builds the exchanges (set-up, not in the ledger)
    model.comm.ledger.reset()
    trainer.run_epoch()
    return dict(model.comm.ledger.bytes)


def check_bytes(grid: Grid, g: Graph, cfg: ModelConfig) -> list[str]:
    """Measured bytes per (axis, op) of an epoch with sparse exchanges on, and off, and on with
    bf16 payloads, equal the model's (priced with the oracle's row counts, 2 bytes per payload
    element under bf16); on moves less than off (where a stage sums over an axis of several
    ranks) exactly by the model's factor."""
    dims = grid.shape.dims
    fails = []
    totals = {}
    for mode, wire in (("on", "fp32"), ("off", "fp32"), ("on", "bf16")):
        spec = ModelSpec(g.num_nodes, 1, g.num_features, g.num_classes, cfg,
                         comm_dtype_bytes=2 if wire == "bf16" else 4)
        got = _epoch_bytes(grid, g, cfg, mode, wire)
        ex = SparseExchange(mode, exact_rows(oracle_counts(g, cfg, grid)) if mode != "off"
                            else None)
        want = epoch_volume(spec, dims, exchange=ex).flat("bytes")
        want = {k: v for k, v in want.items() if v}
        got = {k: v for k, v in got.items() if v}
        if set(got) != set(want) or any(abs(got[k] - want[k]) > 1e-6 * max(1, want[k])
                                        for k in want):
            fails.append(f"sparse_comm={mode} {wire}: ledger bytes {got} != model {want}")
        totals[mode, wire] = (sum(got.values()), sum(want.values()))
    if totals["on", "bf16"][0] >= totals["on", "fp32"][0]:
        fails.append(f"bf16 exchanges moved {totals['on', 'bf16'][0]} bytes, not fewer than "
                     f"fp32's {totals['on', 'fp32'][0]}")
    totals = {mode: totals[mode, "fp32"] for mode in ("on", "off")}
    (on, on_model), (off, off_model) = totals["on"], totals["off"]
    summing = bool(oracle_counts(g, cfg, grid))  # a stage sums over an axis of several ranks
    if summing and not on < off:
        fails.append(f"sparse exchanges moved {on} bytes, not fewer than the {off} without")
    if not summing and on != off:
        fails.append(f"no stage sums over an axis of several ranks, yet {on} != {off} bytes")
    if abs(on / off - on_model / off_model) > 1e-9:
        fails.append(f"measured factor {on / off} != the model's {on_model / off_model}")
    return fails


def run_exchange_checks(grids: list[tuple[int, int, int]]) -> dict[str, list[str]]:
    """Every check on every grid of this world, both graphs, both configs."""
    torch.manual_seed(0)
    out: dict[str, list[str]] = {}
    graphs = rmat_graphs()
    engine = EngineConfig(sparse_comm="on")
    for dims in grids:
        grid = Grid.create(dims)
        tag = "x".join(map(str, dims))
        for gname, g in graphs.items():
            for name, cfg in CONFIGS.items():
                key = f"{tag}/{gname}/{name}"
                out[f"{key}/step"] = check_step(grid, g, cfg, "double", engine)
                out[f"{key}/train"] = check_training(grid, g, cfg, "double", epochs=5,
                                                     engine=engine)
                out[f"{key}/bytes"] = check_bytes(grid, g, cfg)
    rank = torch.distributed.get_rank()
    return {k: [f"rank {rank}: {m}" for m in v] for k, v in out.items()}
