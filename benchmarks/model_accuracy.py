"""Test accuracy on Cora of Plexus's models next to PyG's same models, over several seeds.

GCN, GCN+BatchNorm, GraphSAGE and GIN: 2 layers, hidden 16, dropout 0.5 (input too), Adam lr 0.01,
weight decay 5e-4 on every parameter. GAT with the GAT paper's Cora settings (Veličković et al.,
ICLR 2018): 8 heads of 8 features concatenated, one output head, dropout 0.6 on every layer's
input and on the attention coefficients, lr 0.005, weight decay 5e-4. 200 epochs, the public
split; the test accuracy at the best-validation epoch. Plexus runs its engine (a 1-rank grid);
PyG runs `plexus.testing.pyg_reference.PygStack` (GCNConv, BatchNorm1d, SAGEConv, GINConv,
GATConv) with PyG's own initialization and dropout. Ours should lie within one standard
deviation of PyG's mean.

    ./run python benchmarks/model_accuracy.py [--seeds 10] [--epochs 200] [--models gat]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from plexus.datasets import load_dataset
from plexus.engine.config import ModelConfig, TrainConfig
from plexus.engine.trainer import Trainer
from plexus.testing.localworld import run_world

MODELS = {"gcn": ModelConfig(), "gcn+bn": ModelConfig(norm="batch"),
          "sage": ModelConfig(kind="sage"), "gin": ModelConfig(kind="gin"),
          "gat": ModelConfig(hidden=8, heads=8, kind="gat", dropout=0.6, attn_dropout=0.6)}
LR = {"gat": 0.005}  # the rest: 0.01


def plexus_runs(seeds: int, epochs: int, names: list[str]) -> dict[str, list[float]]:
    """Best-validation test accuracy per model and seed, on the engine (inside a 1-rank world)."""
    from plexus.engine.build import build_model
    from plexus.engine.grid import Grid
    from plexus.partitioners import shard_graph

    graph = load_dataset("cora")
    grid = Grid.create((1, 1, 1))
    out: dict[str, list[float]] = {}
    for name in names:
        cfg = MODELS[name]
        for seed in range(seeds):
            shard = shard_graph(graph, grid.shape, grid.coords, cfg.num_stages,
                                cfg.orders(graph.num_features, graph.num_classes),
                                "none", seed, aggregation=cfg.aggregation)
            trainer = Trainer(build_model(grid, shard, cfg, seed),
                              TrainConfig(epochs=epochs, seed=seed, lr=LR.get(name, 0.01)))
            best = max(trainer.fit(), key=lambda s: s.val_acc)
            out.setdefault(name, []).append(best.test_acc)
    return out


def pyg_runs(seeds: int, epochs: int, names: list[str]) -> dict[str, list[float]]:
    """The same for PyG's models, with PyG's initialization and dropout."""
    from plexus.testing.pyg_reference import PygStack

    graph = load_dataset("cora")
    coo = graph.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    x, y = torch.from_numpy(graph.features), torch.from_numpy(graph.labels)
    masks = {k: torch.from_numpy(getattr(graph, f"{k}_mask")) for k in ("train", "val", "test")}
    out: dict[str, list[float]] = {}
    for name in names:
        cfg = MODELS[name]
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = PygStack(cfg, graph.num_features, graph.num_classes)
            opt = torch.optim.Adam(model.parameters(), lr=LR.get(name, 0.01), weight_decay=5e-4)
            best_val, best_test = -1.0, 0.0
            for _ in range(epochs):
                model.train()
                opt.zero_grad()
                F.cross_entropy(model(x, edge_index)[masks["train"]], y[masks["train"]]).backward()
                opt.step()
                model.eval()
                with torch.no_grad():
                    pred = model(x, edge_index).argmax(1)
                acc = {k: float((pred[m] == y[m]).float().mean()) for k, m in masks.items()}
                if acc["val"] > best_val:
                    best_val, best_test = acc["val"], acc["test"]
            out.setdefault(name, []).append(best_test)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)} (default all)")
    parser.add_argument("--out", default="benchmarks/out",
                        help="folder for model_accuracy.txt")
    args = parser.parse_args()
    names = [m.strip() for m in args.models.split(",")]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; use {', '.join(MODELS)}")
    torch.set_num_threads(1)
    from plexus.bench.output import Tee

    say = Tee()
    ours = run_world(1, plexus_runs, args.seeds, args.epochs, names, timeout=6 * 3600)[0]
    theirs = pyg_runs(args.seeds, args.epochs, names)
    say(f"Cora, {args.seeds} seeds, {args.epochs} epochs: test accuracy at the best-validation "
        "epoch, mean ± std")
    say(f"{'model':8s} {'Plexus':>16s} {'PyG':>16s}  within one std of PyG")
    for name in names:
        a, b = ours[name], theirs[name]
        ma, sa, mb, sb = (statistics.mean(a), statistics.pstdev(a), statistics.mean(b),
                          statistics.pstdev(b))
        say(f"{name:8s} {ma:8.4f} ± {sa:.4f} {mb:8.4f} ± {sb:.4f}  "
            f"{'yes' if abs(ma - mb) <= sb else 'NO'}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_accuracy.txt").write_text(say.text(), encoding="utf-8")


if __name__ == "__main__":
    main()
