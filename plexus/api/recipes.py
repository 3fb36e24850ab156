"""The settings of the official OGB examples, as presets (``plexus-train --recipe NAME``).

Sources: ogb/examples/nodeproppred/arxiv/gnn.py (GCN: 3 layers, hidden 256, BatchNorm after
every layer but the last, dropout 0.5 after each hidden layer's ReLU and none on the input,
Adam lr 0.01 without weight decay, 500 epochs, the graph made undirected with
``adj_t.to_symmetric()``) and ogb/examples/nodeproppred/products/gnn.py (GCN or SAGE: 3 layers,
hidden 256, no BatchNorm, dropout 0.5 on hidden layers, lr 0.01, no weight decay, 300 epochs; the
products graph is undirected already). Both report the test accuracy at the best validation
epoch with ``ogb.nodeproppred.Evaluator``.

ogbn-arxiv-gat: the OGB leaderboard's GAT on ogbn-arxiv (entry "GAT (norm. adj.)", DGL,
dgl/examples/pytorch/ogb/ogbn-arxiv/gat.py by Espylapiza) with its default settings as far as
PyG's GATConv has them: 3 layers, 3 heads of 250 features on every layer (concatenated on hidden
layers, averaged on the last), BatchNorm after every hidden layer, dropout 0.75 on hidden layers,
no attention dropout, Adam lr 0.002 without weight decay, 2000 epochs, the graph made
undirected, self loops added. Left out (GATConv has no such option): its input dropout of 0.1
(here none), the symmetric degree normalization of the attention coefficients, its linear
residual connections and its loss transform log(ε + CE) − log ε; expect a lower accuracy than
the leaderboard's 73.66 ± 0.11.

ogbn-proteins-gcn and -sage: ogb/examples/nodeproppred/proteins/gnn.py (GCN, or SAGE with
--use_sage: 3 layers, hidden 256, no BatchNorm, dropout 0, Adam lr 0.01 without weight decay, 1000
epochs evaluated every 5; node features the mean of each node's incoming edges' features; GCN's Â
with one self loop per node and symmetric degree normalization; BCEWithLogitsLoss over the 112
tasks), which reports the test ROC-AUC at the best validation epoch with
``ogb.nodeproppred.Evaluator``.

``ogbn-papers100M-gcn`` is the Plexus paper's model, from its authors' code (hpcgroup/plexus):
examples/train.py (3 GCNConv layers without bias, hidden 128, no dropout, the input features
trained with the weights, AdamW at lr 3e-3 without weight decay, which is Adam), examples/run_4.sh
(10 epochs, the paper's timed runs) and plexus/utils/dataset.py (papers100M kept directed:
aggregation over incoming edges). The paper's script takes its loss over every labelled node;
this recipe, like every run here, over the training split.

A recipe names `ModelConfig` fields; one the engine does not have yet is a `RecipeError`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Mapping

from plexus_partition.model.model import ModelConfig
from plexus.engine.config import TrainConfig


#: A recipe's field -> the tools' option that sets it, where their names differ.
OPTION_OF_FIELD = {"num_layers": "layers", "kind": "model"}


class RecipeError(ValueError):
    """A recipe that is unknown, or that needs a model option the engine does not have."""


@dataclass(frozen=True)
class Recipe:
    """One preset: model and training settings, the dataset it is for and where it comes from."""

    name: str
    dataset: str
    source: str
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields
    symmetrize: bool = False

    def check(self) -> None:
        """Raise `RecipeError` when the engine lacks a model option this recipe sets."""
        have = set(ModelConfig.field_names())
        missing = [k for k in self.model if k not in have]
        if missing:
            wanted = ", ".join(f"{k}={self.model[k]!r}" for k in missing)
            raise RecipeError(f"recipe {self.name} needs model options this version of the "
                              f"engine does not have yet ({wanted})")

    def model_config(self, **overrides: Any) -> ModelConfig:
        """The recipe's `ModelConfig`, with ``overrides`` (fields) taking precedence."""
        self.check()
        try:
            return ModelConfig(**{**self.model, **overrides})
        except ValueError as e:  # e.g. a model kind the engine does not know
            raise RecipeError(f"recipe {self.name}: {e}") from None

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The recipe's `TrainConfig`, with ``overrides`` (fields) taking precedence."""
        return TrainConfig(**{**self.train, **overrides})

    @staticmethod
    def set_options(values: Mapping[str, Any], args: argparse.Namespace,
                    given: set[str]) -> dict[str, Any]:
        """Set each of ``values`` (a recipe's fields) on the option of a tool's ``args`` that
        holds it, unless the command line gave that option (``given``: the command line wins);
        return the fields no option of the tool holds (for its `ModelConfig`)."""
        rest = {}
        for name, value in values.items():
            dest = OPTION_OF_FIELD.get(name, name)
            if dest in given:
                continue
            if hasattr(args, dest):
                setattr(args, dest, value)
            else:
                rest[name] = value
        return rest


_HIDDEN_ONLY_DROPOUT = {"num_layers": 3, "hidden": 256, "dropout": 0.5, "input_dropout": False}
_OGB_TRAIN = {"lr": 0.01, "weight_decay": 0.0}

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("ogbn-arxiv-gcn", "ogbn-arxiv", "ogb/examples/nodeproppred/arxiv/gnn.py",
           model={"kind": "gcn", "norm": "batch", **_HIDDEN_ONLY_DROPOUT},
           train={**_OGB_TRAIN, "epochs": 500}, symmetrize=True),
    Recipe("ogbn-products-gcn", "ogbn-products", "ogb/examples/nodeproppred/products/gnn.py",
           model={"kind": "gcn", **_HIDDEN_ONLY_DROPOUT}, train={**_OGB_TRAIN, "epochs": 300}),
    Recipe("ogbn-products-sage", "ogbn-products", "ogb/examples/nodeproppred/products/gnn.py "
           "(--use_sage)", model={"kind": "sage", **_HIDDEN_ONLY_DROPOUT},
           train={**_OGB_TRAIN, "epochs": 300}),
    Recipe("ogbn-arxiv-gat", "ogbn-arxiv", "OGB leaderboard, GAT (norm. adj.): "
           "dgl/examples/pytorch/ogb/ogbn-arxiv/gat.py (its defaults GATConv has)",
           model={"kind": "gat", "num_layers": 3, "hidden": 250, "heads": 3, "out_heads": 3,
                  "norm": "batch", "dropout": 0.75, "input_dropout": False,
                  "attn_dropout": 0.0},
           train={"lr": 0.002, "weight_decay": 0.0, "epochs": 2000}, symmetrize=True),
    Recipe("ogbn-proteins-gcn", "ogbn-proteins", "ogb/examples/nodeproppred/proteins/gnn.py",
           model={"kind": "gcn", **_HIDDEN_ONLY_DROPOUT, "dropout": 0.0},
           train={**_OGB_TRAIN, "epochs": 1000, "eval_every": 5}),
    Recipe("ogbn-proteins-sage", "ogbn-proteins", "ogb/examples/nodeproppred/proteins/gnn.py "
           "(--use_sage)", model={"kind": "sage", **_HIDDEN_ONLY_DROPOUT, "dropout": 0.0},
           train={**_OGB_TRAIN, "epochs": 1000, "eval_every": 5}),
    Recipe("ogbn-papers100M-gcn", "ogbn-papers100M",
           "hpcgroup/plexus examples/train.py, examples/run_4.sh, plexus/utils/dataset.py",
           model={"kind": "gcn", "num_layers": 3, "hidden": 128, "bias": False, "dropout": 0.0,
                  "learnable_features": True},
           train={"lr": 0.003, "weight_decay": 0.0, "epochs": 10}),
)}


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; raises `RecipeError` for an unknown one."""
    try:
        return RECIPES[name]
    except KeyError:
        raise RecipeError(f"unknown recipe {name!r}; choose one of "
                          f"{', '.join(RECIPES)}") from None
