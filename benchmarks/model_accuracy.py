"""Test accuracy of Plexus's models next to PyG's same models, on two graphs, over several seeds.

Graphs: Cora (the embedded Planetoid copy, public split, rows of features summing to 1) and
``csbm``, a contextual stochastic block model generated here deterministically (`make_csbm`:
5 classes of 600 nodes, each pair of nodes joined with probability 5/599 inside a class and
5/2400 across, so an average degree of 10 and half of the edges inside the class; 100
features, the class's mean, a random vector of norm 2, plus standard-normal noise; 20 training
nodes per class, 500 validation, 1000 test, drawn at random once). It is written to a ``.npz``
in a fresh temporary folder; Plexus loads it with ``load_dataset("npz:PATH")`` and PyG trains on
the arrays of that same loaded graph, so both use the same features, edges and split.

GCN, GCN+BatchNorm, GraphSAGE, GIN and GraphConv (PyG's GraphConv, aggr="add"): 2 layers,
hidden 16, dropout 0.5 (input too), Adam lr 0.01, weight decay 5e-4 on every parameter. GAT with
the GAT paper's Cora settings (Veličković et al., ICLR 2018): 8 heads of 8 features
concatenated, one output head, dropout 0.6 on every layer's input and on the attention
coefficients, lr 0.005, weight decay 5e-4. 200 epochs; the test accuracy at the best-validation
epoch. Plexus runs its engine (a 1-rank grid); PyG runs `plexus.testing.pyg_reference.PygStack`
(GCNConv, BatchNorm1d, SAGEConv, GINConv, GATConv, GraphConv) with PyG's own initialization and
dropout. Ours should lie within one standard deviation of PyG's mean.

    ./run python benchmarks/model_accuracy.py [--seeds 10] [--epochs 200] [--graphs cora,csbm]
        [--models gcn,sage,gat,graphconv]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from plexus_datasets import load_dataset
from plexus.engine.config import ModelConfig, TrainConfig
from plexus.engine.trainer import Trainer
from plexus.testing.localworld import run_world

MODELS = {"gcn": ModelConfig(), "gcn+bn": ModelConfig(norm="batch"),
          "sage": ModelConfig(kind="sage"), "gin": ModelConfig(kind="gin"),
          "gat": ModelConfig(hidden=8, heads=8, kind="gat", dropout=0.6, attn_dropout=0.6),
          "graphconv": ModelConfig(kind="graphconv")}
LR = {"gat": 0.005}  # the rest: 0.01
GRAPHS = ("cora", "csbm")
#: The synthetic graph's parameters (see the module docstring); changing one changes the graph.
CSBM = {"classes": 5, "per_class": 600, "intra_degree": 5.0, "inter_degree": 5.0,
        "features": 100, "mean_norm": 2.0, "train_per_class": 20, "val": 500, "test": 1000,
        "seed": 0}


def make_csbm(path: Path) -> str:
    """Write the contextual SBM of `CSBM` to ``path`` (gnn-benchmark .npz keys: CSR adjacency,
    dense ``attr_matrix``, ``labels``, ``train/val/test_mask``); returns the sha256 of the file's
    arrays. Deterministic: the same parameters give the same bytes on every machine."""
    c = CSBM
    k, m = c["classes"], c["per_class"]
    n = k * m
    rng = np.random.default_rng(c["seed"])
    labels = rng.permutation(np.repeat(np.arange(k, dtype=np.int64), m))
    rows, cols = np.triu_indices(n, 1)  # every unordered pair once: n²/2 = 4.5 M for 3000 nodes
    same = labels[rows] == labels[cols]
    prob = np.where(same, c["intra_degree"] / (m - 1), c["inter_degree"] / (n - m))
    keep = rng.random(rows.size) < prob
    rows, cols = rows[keep], cols[keep]
    adj = sp.coo_matrix((np.ones(2 * rows.size, dtype=np.float32),
                         (np.r_[rows, cols], np.r_[cols, rows])), shape=(n, n)).tocsr()
    means = rng.standard_normal((k, c["features"]))
    means *= c["mean_norm"] / np.linalg.norm(means, axis=1, keepdims=True)
    attr = (means[labels] + rng.standard_normal((n, c["features"]))).astype(np.float32)
    order = rng.permutation(n)
    train = np.concatenate([order[labels[order] == cls][:c["train_per_class"]]
                            for cls in range(k)])
    rest = order[~np.isin(order, train)]
    split = {"train_mask": train, "val_mask": rest[:c["val"]],
             "test_mask": rest[c["val"]:c["val"] + c["test"]]}
    arrays = {"adj_data": adj.data, "adj_indices": adj.indices.astype(np.int64),
              "adj_indptr": adj.indptr.astype(np.int64), "adj_shape": np.array(adj.shape),
              "attr_matrix": attr, "labels": labels}
    for key, idx in split.items():
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        arrays[key] = mask
    np.savez(path, **arrays)
    digest = hashlib.sha256()
    for key in sorted(arrays):
        digest.update(key.encode() + np.ascontiguousarray(arrays[key]).tobytes())
    return digest.hexdigest()


def plexus_runs(seeds: int, epochs: int, names: list[str],
                specs: dict[str, str]) -> dict[tuple[str, str], list[float]]:
    """Best-validation test accuracy per (graph, model) and seed, on the engine (inside a 1-rank
    world)."""
    from plexus.engine.build import build_model
    from plexus.engine.grid import Grid
    from plexus_partition import shard_graph

    grid = Grid.create((1, 1, 1))
    out: dict[tuple[str, str], list[float]] = {}
    for graph_name, spec in specs.items():
        graph = load_dataset(spec)
        for name in names:
            cfg = MODELS[name]
            for seed in range(seeds):
                shard = shard_graph(graph, grid.shape, grid.coords, cfg.num_stages,
                                    cfg.orders(graph.num_features, graph.num_classes),
                                    "none", seed, aggregation=cfg.aggregation)
                trainer = Trainer(build_model(grid, shard, cfg, seed),
                                  TrainConfig(epochs=epochs, seed=seed, lr=LR.get(name, 0.01)))
                best = max(trainer.fit(), key=lambda s: s.val_acc)
                out.setdefault((graph_name, name), []).append(best.test_acc)
    return out


def pyg_runs(seeds: int, epochs: int, names: list[str],
             specs: dict[str, str]) -> dict[tuple[str, str], list[float]]:
    """The same for PyG's models, with PyG's initialization and dropout, on the arrays of the
    graph Plexus loads (the same features, edges and split)."""
    from plexus.testing.pyg_reference import PygStack

    out: dict[tuple[str, str], list[float]] = {}
    for graph_name, spec in specs.items():
        graph = load_dataset(spec)
        coo = graph.adj.tocoo()
        edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
        x, y = torch.from_numpy(graph.features), torch.from_numpy(graph.labels)
        masks = {k: torch.from_numpy(getattr(graph, f"{k}_mask"))
                 for k in ("train", "val", "test")}
        for name in names:
            cfg = MODELS[name]
            for seed in range(seeds):
                torch.manual_seed(seed)
                model = PygStack(cfg, graph.num_features, graph.num_classes)
                opt = torch.optim.Adam(model.parameters(), lr=LR.get(name, 0.01),
                                       weight_decay=5e-4)
                best_val, best_test = -1.0, 0.0
                for _ in range(epochs):
                    model.train()
                    opt.zero_grad()
                    F.cross_entropy(model(x, edge_index)[masks["train"]],
                                    y[masks["train"]]).backward()
                    opt.step()
                    model.eval()
                    with torch.no_grad():
                        pred = model(x, edge_index).argmax(1)
                    acc = {k: float((pred[m] == y[m]).float().mean()) for k, m in masks.items()}
                    if acc["val"] > best_val:
                        best_val, best_test = acc["val"], acc["test"]
                out.setdefault((graph_name, name), []).append(best_test)
    return out


def _names(parser: argparse.ArgumentParser, text: str, known, what: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in known]
    if unknown or not names:
        parser.error(f"unknown {what} {unknown[0] if unknown else text!r}; use {', '.join(known)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)} (default all)")
    parser.add_argument("--graphs", default="cora",
                        help=f"comma-separated, of {', '.join(GRAPHS)} (default cora)")
    parser.add_argument("--out", default="benchmarks/out",
                        help="folder for model_accuracy.txt")
    parser.add_argument("--smoke", action="store_true",
                        help="1 seed, 3 epochs, gcn and graphconv on both graphs (a test's run)")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.epochs, args.models, args.graphs = 1, 3, "gcn,graphconv", "cora,csbm"
    names = _names(parser, args.models, MODELS, "model")
    graphs = _names(parser, args.graphs, GRAPHS, "graph")
    if args.seeds < 1 or args.epochs < 1:
        parser.error("--seeds and --epochs must be at least 1")
    torch.set_num_threads(1)
    from plexus.bench.output import Tee, write_text

    say = Tee()
    with tempfile.TemporaryDirectory(prefix="plexus-accuracy-") as tmp:
        specs = {}
        for graph_name in graphs:
            if graph_name == "csbm":
                path = Path(tmp) / "csbm.npz"
                digest = make_csbm(path)
                specs[graph_name] = f"npz:{path}"
                n = CSBM["classes"] * CSBM["per_class"]
                say(f"csbm: SYNTHETIC contextual stochastic block model made by make_csbm "
                    f"({', '.join(f'{k}={v}' for k, v in CSBM.items())}): {n} nodes, "
                    f"{load_dataset(specs[graph_name]).adj.nnz // 2} undirected edges, "
                    f"arrays' sha256 {digest[:16]}")
            else:
                specs[graph_name] = graph_name
        ours = run_world(1, plexus_runs, args.seeds, args.epochs, names, specs,
                         timeout=6 * 3600)[0]
        theirs = pyg_runs(args.seeds, args.epochs, names, specs)
    say(f"{args.seeds} seeds, {args.epochs} epochs: test accuracy at the best-validation epoch, "
        "mean ± std (population std over the seeds)")
    say(f"{'graph':6s} {'model':10s} {'Plexus':>16s} {'PyG':>16s}  within one std of PyG")
    for graph_name in graphs:
        for name in names:
            a, b = ours[graph_name, name], theirs[graph_name, name]
            ma, sa, mb, sb = (statistics.mean(a), statistics.pstdev(a), statistics.mean(b),
                              statistics.pstdev(b))
            say(f"{graph_name:6s} {name:10s} {ma:8.4f} ± {sa:.4f} {mb:8.4f} ± {sb:.4f}  "
                f"{'yes' if abs(ma - mb) <= sb else 'NO'}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "model_accuracy.txt", say.text())


if __name__ == "__main__":
    main()
