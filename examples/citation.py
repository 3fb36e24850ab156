"""What examples/gcnii.py and examples/appnp.py share: the training loop of PyG's citation
examples on a grid, and their command line (``--grid``, the model's one option, ``--epochs``;
Cora). Each example builds its network and optimizer and hands them to `fit`."""

import argparse

import torch

import plexus


def fit(net, opt, epochs, grid):
    """``epochs`` full-batch steps of ``net`` with ``opt`` (dropout on), then the accuracies
    (dropout off); rank 0 returns the last loss and the validation and test accuracies."""
    for epoch in range(epochs):
        net.train()
        opt.zero_grad()
        loss = net.loss(net(step=epoch))
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = net.eval().accuracy(net())
    if grid.rank == 0:
        return {"loss": loss.item(), "val_acc": acc["val"], "test_acc": acc["test"]}


def main(doc, train, option, default):
    """The command line: ``--grid``, ``option`` (a whole number, ``default``) and ``--epochs``;
    ``train(grid, graph, value of option, epochs)`` on Cora under `plexus.launch`, rank 0's
    figures printed on one line."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--grid", default="1x1x2")
    parser.add_argument(option, type=int, default=default)
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()
    value = getattr(args, option.lstrip("-").replace("-", "_"))
    result = plexus.launch(train, plexus.load_dataset("cora"), value, args.epochs,
                           grid=args.grid)
    if result is not None:  # rank 0's
        print(" ".join(f"{k} {v:.4f}" for k, v in result.items()))
