"""The OGB ogbn-arxiv GCN recipe on a Plexus grid, with your own loop and OGB's evaluator.

    python examples/ogbn_arxiv.py --root ~/data/ogb --grid 2x2x2
    python examples/ogbn_arxiv.py --stand-in --epochs 20     # small stand-in graph (CI)

The settings are those of ogb/examples/nodeproppred/arxiv/gnn.py (`plexus.RECIPES`): 3 layers,
hidden 256, BatchNorm, dropout 0.5 on hidden layers, Adam lr 0.01, 500 epochs, the graph made
undirected; the reported number is the test accuracy at the best validation epoch, computed by
``ogb.nodeproppred.Evaluator``. ``--stand-in`` (or PLEXUS_EXAMPLE_STAND_IN=1) trains on the
embedded Cora instead of reading ogbn-arxiv, with the same code path.
"""

import argparse
import os

import torch
import plexus


def train(grid, graph, model_config, train_config):
    model = plexus.distributed_model(graph, grid, model_config, seed=train_config.seed)
    opt = torch.optim.Adam(model.parameters(), lr=train_config.lr,
                           weight_decay=train_config.weight_decay)
    best_val, best_epoch, best_pred = -1.0, 0, None
    for epoch in range(1, train_config.epochs + 1):
        model.train()
        opt.zero_grad()
        model.loss(model(step=epoch)).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            acc = model.accuracy(model())  # train/val/test, the same on every rank
        if acc["val"] > best_val:  # keep the best validation epoch's predictions (rank 0)
            best_val, best_epoch = acc["val"], epoch
            best_pred = plexus.gather_predictions(model)
    if grid.rank != 0:
        return None
    result = plexus.ogb_evaluate(graph, best_pred, "test", name="ogbn-arxiv")  # OGB's Evaluator
    return {"best_epoch": best_epoch, "best_val_acc": best_val, "test_acc": result["value"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", help="directory holding ogbn-arxiv (never downloaded)")
    p.add_argument("--grid", default="1x1x1")
    p.add_argument("--epochs", type=int, help="override the recipe's 500")
    p.add_argument("--hidden", type=int, help="override the recipe's 256")
    p.add_argument("--stand-in", action="store_true",
                   default=os.environ.get("PLEXUS_EXAMPLE_STAND_IN") == "1")
    args = p.parse_args()
    recipe = plexus.RECIPES["ogbn-arxiv-gcn"]
    overrides = {} if args.hidden is None else {"hidden": args.hidden}
    model_config = recipe.model_config(**overrides)  # a bad override: one line (run_script)
    train_config = recipe.train_config(**({} if args.epochs is None else {"epochs": args.epochs}))
    if args.stand_in:
        graph = plexus.load_dataset("cora")
    elif args.root:
        graph = plexus.load_dataset(recipe.dataset, args.root)
    else:
        raise plexus.UsageError("give --root DIR (where ogbn-arxiv is) or --stand-in")
    if recipe.symmetrize:
        graph = graph.to_undirected()
    result = plexus.launch(train, graph, model_config, train_config, grid=args.grid)
    if result is not None:
        print(f"best validation epoch {result['best_epoch']}: val {result['best_val_acc']:.4f}"
              f"  test {result['test_acc']:.4f} (OGB evaluator)")


if __name__ == "__main__":
    plexus.run_script(main)  # bad input (a missing dataset, a bad grid): one line, status 2
