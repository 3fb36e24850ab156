"""Link prediction from the Python API: this rank's `LinkModel` (an encoder on the grid, any
built-in kind, and a decoder) from a `LinkSplit`, its training loop, its metrics, and its
exports (the encoder as today's PyG export, the decoder as a torch module OGB's examples' code
loads: `load_decoder`).

    split = random_edge_split(graph, "0.85,0.05,0.1", seed=0)   # or load_ogbl(name, root)
    def main(grid):
        model = plexus.api.link.link_model(split, grid, "gcn", num_layers=2, hidden=64,
                                           decoder="mlp")
        return model.fit(epochs=100, lr=0.01, eval_every=10)
    history = plexus.launch(main, grid="2x2x1")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.linksplit import LinkSplit
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.pairs import DECODER_LAYERS
from plexus.engine.config import EngineConfig
from plexus.engine.grid import Grid
from plexus.engine.link import LinkTask
from plexus.engine.optim import Adam
from plexus.engine.pairs import LinkDecoder

from .export import save_weights
from .model import GraphModel, cut_shard, model_from_shard

DECODER_FORMAT = "plexus-link-decoder-1"


def _config(model: ModelConfig | str | None, options: dict) -> ModelConfig:
    if isinstance(model, ModelConfig):
        if options:
            raise TypeError("give either a ModelConfig or the model's options as keywords, "
                            f"not both (got {', '.join(sorted(options))})")
        return model
    return ModelConfig.from_options(kind=model or "gcn", **options)


@dataclass
class LinkModel:
    """This rank's link predictor: ``task`` (the engine's `LinkTask`), its ``encoder`` (a
    `GraphModel`, whose output is the embedding) and the ``split`` it trains on."""

    task: LinkTask
    encoder: GraphModel
    split: LinkSplit

    def splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """{"val", "test"}: their positive and negative pairs."""
        return {s: (torch.from_numpy(self.split.pos[s]), torch.from_numpy(self.split.neg[s]))
                for s in ("val", "test") if self.split.pos[s].shape[1]}

    def fit(self, epochs: int, lr: float = 0.01, eval_every: int = 1, k: int = 50,
            on_epoch: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
        """``epochs`` steps of Adam; every ``eval_every`` epochs (and the last) the ROC-AUC and
        Hits@``k`` of validation and test. Returns one dict per epoch ({"epoch", "loss",
        "val_auc", "val_hits@50", ...}), each handed to ``on_epoch`` too (the same on every
        rank)."""
        opt = Adam(list(self.task.parameters_by_name().values()), lr=lr)
        history = []
        for epoch in range(epochs):
            opt.zero_grad()
            row: dict[str, Any] = {"epoch": epoch + 1, "loss": float(self.task.train_step(epoch))}
            opt.step()
            if eval_every and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
                for split, values in self.task.evaluate(self.splits(), k).items():
                    row.update({f"{split}_{name}": v for name, v in values.items()})
            history.append(row)
            if on_epoch is not None:
                on_epoch(row)
        return history

    def scores(self, pairs: Any) -> np.ndarray:
        """The logits of ``pairs`` (2 × P node ids), the same on every rank."""
        return self.task.scores(torch.as_tensor(np.asarray(pairs), dtype=torch.int64)).cpu().numpy()

    def save_weights(self, path: str | os.PathLike) -> Path | None:
        """Collective: the encoder's PyG export (`plexus.api.export.save_weights`), written by
        rank 0."""
        return save_weights(self.encoder, path)

    def save_decoder(self, path: str | os.PathLike) -> Path | None:
        """Rank 0 writes the decoder (`load_decoder` reads it); the MLP's state dict has OGB's
        ``LinkPredictor`` names. Returns the path on rank 0, None elsewhere."""
        if self.encoder.grid.rank != 0:
            return None
        dec = self.task.decoder
        payload = {"format": DECODER_FORMAT, "kind": dec.kind, "in_channels": dec.channels,
                   "hidden": dec.lins[0].out_features if dec.lins else 0,
                   "layers": len(dec.lins), "dropout": dec.p,
                   "state_dict": {k: v.detach().cpu() for k, v in dec.state_dict().items()}}
        target = Path(path).expanduser()
        with atomic_file(target) as f:
            torch.save(payload, f)
        return target


def link_model(split: LinkSplit, grid: Grid, model: ModelConfig | str | None = None, *,
               decoder: str = "mlp", seed: int = 0, perm: str = DEFAULT_PERMUTATION,
               engine: EngineConfig | None = None, out_channels: int | None = None,
               decoder_layers: int = DECODER_LAYERS, decoder_hidden: int | None = None,
               decoder_dropout: float | None = None, budget: float | None = None,
               **options: Any) -> LinkModel:
    """This rank's `LinkModel` on ``grid`` (call it on every rank): the encoder ``model`` (a
    `ModelConfig`, or a kind's name with its options as keywords, as
    `plexus.api.distributed_model` takes them) on the message graph of ``split``, its output
    of ``out_channels`` columns (default: the hidden width) the embedding; the ``decoder``
    ("dot" or "mlp": ``decoder_layers`` layers of ``decoder_hidden`` units, the hidden width by
    default, with the encoder's dropout unless ``decoder_dropout``); batches of pairs of
    ``budget`` bytes (None: the engine's piece budget)."""
    cfg = _config(model, options)
    out = int(out_channels or cfg.hidden)
    graph = split.encoder_graph(out)
    shard = cut_shard(graph, grid.shape, grid.coords, cfg, perm, seed)
    encoder = model_from_shard(grid, shard, cfg, seed, engine)
    dec = LinkDecoder(decoder, out, hidden=int(decoder_hidden or cfg.hidden),
                      layers=decoder_layers,
                      dropout=cfg.dropout if decoder_dropout is None else decoder_dropout,
                      seed=seed).to(grid.device)
    task = LinkTask(encoder.net, dec, torch.from_numpy(split.pos["train"]), split.num_nodes,
                    seed, grid=True, budget=budget)
    return LinkModel(task, encoder, split)


class LinkPredictor(nn.Module):
    """OGB's examples' ``LinkPredictor`` (``lins``; ReLU and dropout between them), returning
    the logit (σ of it is OGB's output), or for "dot" the sum of h_u ⊙ h_v."""

    def __init__(self, kind: str, in_channels: int, hidden: int, layers: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.kind, self.dropout = kind, dropout
        widths = [in_channels] + [hidden] * (layers - 1) + [1] if kind == "mlp" else []
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))

    def forward(self, x_i: torch.Tensor, x_j: torch.Tensor) -> torch.Tensor:
        """The logits of the pairs whose embeddings are ``x_i`` and ``x_j``."""
        x = x_i * x_j
        if self.kind == "dot":
            return x.sum(dim=-1)
        for lin in self.lins[:-1]:
            x = torch.nn.functional.dropout(torch.relu(lin(x)), self.dropout, self.training)
        return self.lins[-1](x).squeeze(-1)


def load_decoder(path: str | os.PathLike) -> LinkPredictor:
    """The decoder `LinkModel.save_decoder` wrote, as a `LinkPredictor` (read with
    ``weights_only``: nothing in the file runs)."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != DECODER_FORMAT:
        raise ValueError(f"{path}: not a Plexus link decoder ({DECODER_FORMAT})")
    module = LinkPredictor(payload["kind"], payload["in_channels"], payload["hidden"],
                           payload["layers"], payload["dropout"])
    module.load_state_dict(payload["state_dict"])
    return module
