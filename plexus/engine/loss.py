"""Masked cross-entropy and accuracy on the last layer's distributed logits.

Logits are cut by rows over ``rows_axis`` and by classes over ``class_axis`` (replicated over the
third axis). Softmax statistics are all-reduced over the class cut, per-node sums over the row
cut. Padded classes get -inf logits; padded, unlabelled and unmasked nodes contribute nothing.
"""

from __future__ import annotations

import torch

from .comm import Comm


def _pad_classes(z: torch.Tensor, col_start: int, num_classes: int) -> torch.Tensor:
    """``z`` with its padded classes at -inf (a copy, only where the block has padded classes)."""
    if col_start + z.shape[1] <= num_classes:
        return z
    cols = torch.arange(col_start, col_start + z.shape[1], device=z.device)
    return z.masked_fill(cols[None, :] >= num_classes, float("-inf"))


class ParallelCrossEntropy(torch.autograd.Function):
    """mean over masked nodes of -log softmax(z)[label], for a block of z.

    Per logit it holds one float buffer (exp, turned into the softmax in place, kept for
    backward) and the one-byte one-hot labels, plus a -inf copy where the block has padded
    classes: what `plexus.perfmodel` prices for the loss."""

    @staticmethod
    def forward(ctx, z, labels, mask, count: int, col_start: int, num_classes: int,
                comm: Comm, rows_axis: str, class_axis: str):  # noqa: D102
        z = _pad_classes(z, col_start, num_classes)
        zmax = comm.raw_all_reduce(z.max(dim=1).values.clone(), class_axis, "max")
        local = (labels >= col_start) & (labels < col_start + z.shape[1]) & mask
        rows = local.nonzero().squeeze(1)
        cols = labels[rows] - col_start
        onehot = torch.zeros_like(z, dtype=torch.bool)
        onehot[rows, cols] = True
        label_z = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        label_z[rows] = z[rows, cols]
        e = z - zmax[:, None]
        e.exp_()
        stats = comm.raw_all_reduce(torch.stack([e.sum(dim=1), label_z]), class_axis)
        per_node = torch.log(stats[0]) + zmax - stats[1]
        total = torch.where(mask, per_node, torch.zeros_like(per_node)).sum().reshape(1)
        total = comm.raw_all_reduce(total, rows_axis)
        ctx.save_for_backward(e.div_(stats[0][:, None]), onehot, mask)  # the softmax
        ctx.count = max(count, 1)
        return total[0] / ctx.count

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        softmax, onehot, mask = ctx.saved_tensors
        dz = softmax.clone()
        dz[onehot] -= 1.0  # softmax - one-hot labels
        dz.mul_(mask[:, None])
        return dz.mul_(grad / ctx.count), None, None, None, None, None, None, None, None


def cross_entropy(z: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, count: int,
                  col_start: int, num_classes: int, comm: Comm, rows_axis: str,
                  class_axis: str) -> torch.Tensor:
    """Global masked mean cross-entropy (the same scalar on every rank)."""
    return ParallelCrossEntropy.apply(z, labels, mask, count, col_start, num_classes, comm,
                                      rows_axis, class_axis)


def predict(z: torch.Tensor, col_start: int, num_classes: int, comm: Comm,
            class_axis: str) -> torch.Tensor:
    """Global argmax class of every row (the lowest index among equal maxima, as torch.argmax):
    each block's first maximum, then the lowest column among the blocks that hold the global
    one (memory per row, not per logit)."""
    values, first = _pad_classes(z, col_start, num_classes).max(dim=1)
    zmax = comm.raw_all_reduce(values.clone(), class_axis, "max")
    big = torch.iinfo(torch.int64).max
    cand = torch.where(values == zmax, first + col_start, torch.full_like(first, big))
    return comm.raw_all_reduce(cand, class_axis, "min")


def accuracy(z: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor],
             counts: dict[str, int], col_start: int, num_classes: int, comm: Comm,
             rows_axis: str, class_axis: str) -> dict[str, float]:
    """Accuracy over each mask (global; the same on every rank)."""
    pred = predict(z, col_start, num_classes, comm, class_axis)
    right = pred == labels
    names = sorted(masks)
    hits = torch.stack([(right & masks[n]).sum() for n in names]).to(torch.float64)
    hits = comm.raw_all_reduce(hits, rows_axis)
    return {n: float(h) / max(counts[n], 1) for n, h in zip(names, hits.tolist())}


class ClassifierHead:
    """Loss, accuracy and predictions on the last stage's output layout, for a model that has
    ``plans`` (its stages' `LayerPlan`s), ``labels``/``masks``/``counts`` of its output rows,
    ``class_start``/``num_classes`` and ``comm``: the engine's model and a `plexus.nn` network
    share them."""

    plans: list
    labels: torch.Tensor
    masks: dict[str, torch.Tensor]
    counts: dict[str, int]
    class_start: int
    num_classes: int
    comm: Comm

    def _axes(self) -> tuple[str, str]:
        return self.plans[-1].out_rows, self.plans[-1].out_cols

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask`` (the same value on every rank)."""
        rows, classes = self._axes()
        return cross_entropy(logits, self.labels, self.masks[mask], self.counts[mask],
                             self.class_start, self.num_classes, self.comm, rows, classes)

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on the train/val/test masks."""
        rows, classes = self._axes()
        return accuracy(logits, self.labels, self.masks, self.counts, self.class_start,
                        self.num_classes, self.comm, rows, classes)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class per logits row (padded rows included)."""
        return predict(logits, self.class_start, self.num_classes, self.comm, self._axes()[1])
