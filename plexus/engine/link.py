"""Link prediction on any model of the engine: an encoder (the serial model, or one rank's
`GridModel`: its forward output is the embedding), a `LinkDecoder`, the training step and the
scores of given pairs, in batches of pairs sized in bytes.

A step runs the encoder once, then the decoder over the positive training pairs and as many
negatives (`plexus.engine.pairs.negative_pairs`, drawn for the step), a batch at a time: each
batch's part of the loss is backpropagated into the embedding's gradient at once (so only one
batch's pair buffers are alive), and the encoder's backward runs once, from the whole
gradient. The positives are pairs 0 .. P-1 of the step, the negatives P .. 2P-1 (the decoder's
dropout rows). Every rank of a grid runs the same batches and gets the same scores and loss.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch
from torch import nn

from plexus_partition.model.pairs import batch_pairs, pair_bytes

from .pairs import GridPairs, LinkDecoder, negative_pairs, pair_loss, serial_products
from .rocauc import task_rocauc


class LinkTask(nn.Module):
    """``encoder`` (a `SerialModel`, or a `GridModel` on one rank of a grid: ``grid`` True)
    and ``decoder`` trained on the positive pairs ``train_pos`` (2 × P original node ids) of a
    graph of ``num_nodes`` nodes; ``budget``: the bytes one batch's pair buffers may take
    (None: the encoder's piece budget on a grid, every pair at once in the serial model)."""

    def __init__(self, encoder: nn.Module, decoder: LinkDecoder, train_pos: torch.Tensor,
                 num_nodes: int, seed: int, grid: bool = False,
                 budget: float | None = None) -> None:
        super().__init__()
        self.encoder, self.decoder, self.seed = encoder, decoder, seed
        self.num_nodes = int(num_nodes)
        self.pairs = GridPairs.of_model(encoder) if grid else None
        device = encoder.comm.grid.device if grid else torch.device("cpu")
        self.device = device
        self.register_buffer("train_pos", train_pos.to(torch.int64).to(device), persistent=False)
        if budget is None and grid:
            budget = encoder.comm.budget
        if grid:
            wp = encoder.pad.widths_padded[-1]
            block = wp // encoder.comm.grid.size(self.pairs.cols_axis)
        else:
            wp = block = decoder.channels
        hidden = decoder.lins[0].out_features if decoder.lins else 0
        self.per_pair = pair_bytes(block, wp, decoder.kind, hidden, len(decoder.lins))
        self.budget = budget

    def batch(self, total: int) -> int:
        """Pairs per batch for ``total`` pairs (`plexus_partition.model.pairs.batch_pairs`)."""
        if self.budget is None:
            return max(1, total)
        return batch_pairs(self.budget, self.per_pair, total)

    def logits(self, H: torch.Tensor, pairs: torch.Tensor, pair_ids: torch.Tensor | None = None,
               step: int = 0) -> torch.Tensor:
        """The decoder's logits of ``pairs`` (2 × P) from the embedding ``H`` (the full matrix
        in the serial model, this rank's block on a grid)."""
        if self.pairs is not None:
            return self.pairs.logits(H, pairs, self.decoder, pair_ids, step)
        return self.decoder(serial_products(H, pairs), pair_ids, step)

    def negatives(self, step: int, start: int, count: int) -> torch.Tensor:
        """Negatives ``start`` .. ``start + count - 1`` of ``step``."""
        return negative_pairs(self.seed, step, self.num_nodes, count, start, self.device)

    def train_step(self, step: int) -> torch.Tensor:
        """One step's loss (a 0-d tensor, the same on every rank), with every parameter's
        gradient accumulated (the caller zeroes and applies them)."""
        self.train()
        H = self.encoder(step=step)
        Hd = H.detach().requires_grad_()
        P = self.train_pos.shape[1]
        total = torch.zeros((), device=H.device)
        size = self.batch(P)
        with self._phase("loss"):
            for start in range(0, P, size):
                count = min(size, P - start)
                ids = torch.arange(start, start + count, device=H.device)
                pos = self.logits(Hd, self.train_pos[:, start:start + count], ids, step)
                neg = self.logits(Hd, self.negatives(step, start, count), ids + P, step)
                part = pair_loss(pos, neg, P, P)
                part.backward()
                total += part.detach()
        H.backward(Hd.grad)
        return total

    def _phase(self, phase: str):
        """Within: the pairs' collectives recorded as ``phase``'s (the loss's, or the
        evaluation's), issued by no layer."""
        comm = getattr(self.encoder, "comm", None)
        return nullcontext() if comm is None else comm.at(None, phase)

    @torch.no_grad()
    def scores(self, pairs: torch.Tensor, H: torch.Tensor | None = None) -> torch.Tensor:
        """The logits of ``pairs`` (2 × P) in evaluation mode (the same on every rank),
        scored a batch at a time; ``H``: the embedding, computed once by the caller."""
        self.eval()
        H = self.encoder() if H is None else H
        pairs = pairs.to(torch.int64).to(self.device)
        size = self.batch(pairs.shape[1])
        with self._phase("eval"):
            out = [self.logits(H, pairs[:, s:s + size]) for s in range(0, pairs.shape[1], size)]
        return torch.cat(out) if out else torch.zeros(0, device=self.device)

    def evaluate(self, splits: dict[str, tuple[torch.Tensor, torch.Tensor]],
                 k: int = 50) -> dict[str, dict[str, float]]:
        """Per split {name: (positive pairs, negative pairs)}: the ROC-AUC and Hits@``k`` of
        their scores (`link_metrics`), the encoder run once."""
        with torch.no_grad():
            self.eval()
            H = self.encoder()
            return {name: link_metrics(self.scores(pos, H).cpu().numpy(),
                                       self.scores(neg, H).cpu().numpy(), k)
                    for name, (pos, neg) in splits.items()}

    def parameters_by_name(self) -> dict[str, nn.Parameter]:
        """The encoder's trainable shards and the decoder's parameters ("decoder.lins.0.weight",
        ...): what the optimizer updates."""
        out = dict(self.encoder.named_shards())
        out.update({f"decoder.{n}": p for n, p in self.decoder.named_parameters()})
        return out


def hits_at_k(pos: np.ndarray, neg: np.ndarray, k: int) -> float:
    """OGB's Hits@K: the fraction of positive scores above the K-th highest negative score
    (1.0 when there are fewer than K negatives)."""
    if len(neg) < k:
        return 1.0
    kth = np.sort(neg)[-k]
    return float(np.mean(pos > kth))


def link_metrics(pos: np.ndarray, neg: np.ndarray, k: int = 50) -> dict[str, float]:
    """ROC-AUC (positives against negatives, ties one half) and Hits@``k`` of the scores."""
    y = np.r_[np.ones(len(pos), np.int8), np.zeros(len(neg), np.int8)]
    return {"auc": task_rocauc(y, np.r_[pos, neg]), f"hits@{k}": hits_at_k(pos, neg, k)}


def fit(task: LinkTask, epochs: int, lr: float = 0.01) -> list[float]:
    """``epochs`` steps of Adam (lr ``lr``) on every parameter of ``task`` (step e keys the
    masks and the negatives of epoch e); the losses."""
    from .optim import Adam
    opt = Adam(list(task.parameters_by_name().values()), lr=lr)
    losses = []
    for epoch in range(epochs):
        opt.zero_grad()
        losses.append(float(task.train_step(epoch)))
        opt.step()
    return losses
