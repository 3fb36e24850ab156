"""Link prediction accuracy on real graphs: Plexus against PyG, the same model and the same split.

For each graph and seed: a random edge split (`plexus_datasets.linksplit.random_edge_split`,
0.85/0.05/0.1, PyG's RandomLinkSplit's counts; the seed draws it), then
- Plexus: `plexus.api.link.link_model` on a grid (default 1x1x1; the engine's distributed model,
  every grid equal to it: tests/engine/test_link_grid.py), the encoder a 2-layer GCN (hidden
  128, 64 output columns, no dropout), the decoder ``--decoder`` (dot: PyG's link_pred example /
  GAE), Adam lr 0.01, ``--epochs`` full-graph steps, the negatives Plexus's hash draws;
- PyG: GCNConv(F, 128) → ReLU → GCNConv(128, 64) on the same message graph and features, the
  same decoder, the same optimizer and epochs, negatives from ``torch_geometric.utils.
  negative_sampling`` each epoch, weights from torch's generator (the seed);
both scored at the last epoch on the split's test pairs and negatives: ROC-AUC (sklearn) and
Hits@50 (OGB's rule). Prints per seed and mean ± std (sample std) per graph.

    ./run python benchmarks/link_accuracy.py [--graphs cora] [--seeds 5] [--epochs 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from plexus.api.link import link_model
from plexus.api.session import run_grid
from plexus.engine.link import hits_at_k
from plexus_datasets import load_dataset
from plexus_datasets.linksplit import random_edge_split

HIDDEN, OUT, LR = 128, 64, 0.01


def scores_of(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """(ROC-AUC, Hits@50) of positive and negative scores."""
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    return float(roc_auc_score(y, np.r_[pos, neg])), hits_at_k(pos, neg, 50)


def plexus_runs(grid, splits, decoder: str, epochs: int) -> list[tuple[float, float]]:
    """Every seed's (test AUC, test Hits@50) on the engine (rank 0's; every rank alike)."""
    out = []
    for seed, split in enumerate(splits):
        model = link_model(split, grid, "gcn", num_layers=2, hidden=HIDDEN, dropout=0.0,
                           out_channels=OUT, decoder=decoder, decoder_layers=3, seed=seed)
        model.fit(epochs, lr=LR, eval_every=0)
        out.append(scores_of(model.scores(split.pos["test"]), model.scores(split.neg["test"])))
    return out


def pyg_run(split, decoder: str, epochs: int, seed: int) -> tuple[float, float]:
    """The same model, split and training in PyG: (test AUC, test Hits@50)."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    g = split.graph
    coo = g.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    x = torch.from_numpy(g.features)
    convs = torch.nn.ModuleList([GCNConv(g.num_features, HIDDEN, cached=True),
                                 GCNConv(HIDDEN, OUT, cached=True)])
    lins = torch.nn.ModuleList([torch.nn.Linear(OUT, HIDDEN), torch.nn.Linear(HIDDEN, HIDDEN),
                                torch.nn.Linear(HIDDEN, 1)]) if decoder == "mlp" else \
        torch.nn.ModuleList()

    def encode() -> torch.Tensor:
        return convs[1](F.relu(convs[0](x, edge_index)), edge_index)

    def decode(h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        z = h[pairs[0]] * h[pairs[1]]
        if decoder == "dot":
            return z.sum(dim=-1)
        for lin in lins[:-1]:
            z = F.relu(lin(z))
        return lins[-1](z).squeeze(-1)

    opt = torch.optim.Adam(list(convs.parameters()) + list(lins.parameters()), lr=LR)
    pos = torch.from_numpy(split.pos["train"])
    for _ in range(epochs):
        opt.zero_grad()
        h = encode()
        neg = negative_sampling(edge_index, num_nodes=g.num_nodes, num_neg_samples=pos.shape[1])
        p, n = decode(h, pos), decode(h, neg)
        loss = F.binary_cross_entropy_with_logits(p, torch.ones_like(p)) + \
            F.binary_cross_entropy_with_logits(n, torch.zeros_like(n))
        loss.backward()
        opt.step()
    with torch.no_grad():
        h = encode()
        return scores_of(decode(h, torch.from_numpy(split.pos["test"])).numpy(),
                         decode(h, torch.from_numpy(split.neg["test"])).numpy())


def summary(name: str, runs: list[tuple[float, float]]) -> str:
    """``name: test AUC m ± s, Hits@50 m ± s``."""
    auc, hits = [r[0] for r in runs], [r[1] for r in runs]
    return (f"{name}: test AUC {statistics.mean(auc):.4f} ± {statistics.stdev(auc):.4f}, "
            f"Hits@50 {statistics.mean(hits):.4f} ± {statistics.stdev(hits):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="cora", help="dataset specs, comma-separated")
    parser.add_argument("--root", default=None, help="where citeseer's files are")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--decoder", choices=("dot", "mlp"), default="dot")
    parser.add_argument("--grid", default="1x1x1")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"# link_accuracy: decoder {args.decoder}, {args.epochs} epochs, {args.seeds} seeds, "
          f"grid {args.grid}, GCN 2 layers hidden {HIDDEN} out {OUT}, lr {LR}; "
          f"load {os.getloadavg()[0]:.2f} at the start")
    for spec in args.graphs.split(","):
        graph = load_dataset(spec, args.root)
        splits = [random_edge_split(graph, (0.85, 0.05, 0.1), seed=s) for s in range(args.seeds)]
        t0 = time.time()
        ours = run_grid(plexus_runs, splits, args.decoder, args.epochs, grid=args.grid)
        t1 = time.time()
        theirs = [pyg_run(split, args.decoder, args.epochs, s) for s, split in enumerate(splits)]
        t2 = time.time()
        print(f"## {graph.name}: {graph.num_nodes} nodes, {splits[0].pos['train'].shape[1]} "
              f"training pairs, {splits[0].pos['test'].shape[1]} test pairs (+ as many "
              f"negatives); Plexus {t1 - t0:.1f} s, PyG {t2 - t1:.1f} s")
        for s, (a, b) in enumerate(zip(ours, theirs)):
            print(f"seed {s}: Plexus AUC {a[0]:.4f} Hits@50 {a[1]:.4f} | PyG AUC {b[0]:.4f} "
                  f"Hits@50 {b[1]:.4f}")
        print(summary("Plexus", ours))
        print(summary("PyG   ", theirs))
    print(f"# load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
