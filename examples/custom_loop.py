"""Your own training loop on a Plexus grid: a GCN on Cora, Adam, your metric, results out.

    python examples/custom_loop.py [--grid 2x1x2] [--epochs 200] [--out DIR]

Runs the same under torchrun (``torchrun --nproc-per-node 4 examples/custom_loop.py``): there
`plexus.launch` joins the job instead of starting workers.
"""

import argparse

import numpy as np
import torch

import plexus


def train(grid, graph, epochs, out):
    model = plexus.distributed_model(graph, grid, num_layers=2, hidden=16, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        loss = model.loss(model(step=epoch), mask="train")  # the same value on every rank
        loss.backward()
        opt.step()
    pred = plexus.gather_predictions(model)  # rank 0: every node's class, original order
    plexus.save_weights(model, f"{out}/gcn.pt")  # unsharded, PyG names (convs.0.lin.weight...)
    if grid.rank == 0:
        test = graph.test_mask
        macro_f1 = np.mean([f1(pred[test] == c, graph.labels[test] == c)
                            for c in range(graph.num_classes)])
        return {"loss": loss.item(), "test_acc": float((pred[test] == graph.labels[test]).mean()),
                "macro_f1": float(macro_f1), "pred": pred}


def f1(predicted, actual):
    tp = np.sum(predicted & actual)
    return 2 * tp / max(np.sum(predicted) + np.sum(actual), 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="2x1x2")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--out", default=".")
    args = p.parse_args()
    cora = plexus.load_dataset("cora")  # or plexus.Graph.from_scipy(adj, x, y, train=..., ...)
    result = plexus.launch(train, cora, args.epochs, args.out, grid=args.grid)
    if result is not None:  # rank 0's (under torchrun: every other rank returns None)
        np.save(f"{args.out}/pred.npy", result.pop("pred"))
        print(" ".join(f"{k} {v:.4f}" for k, v in result.items()))


if __name__ == "__main__":
    plexus.run_script(main)  # bad input (e.g. a bad --grid): one line, status 2
