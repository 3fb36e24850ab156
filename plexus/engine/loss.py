"""Masked cross-entropy and accuracy on the last layer's distributed logits.

Logits are cut by rows over ``rows_axis`` and by classes over ``class_axis`` (replicated over the
third axis). Softmax statistics are all-reduced over the class cut, per-node sums over the row
cut. Padded classes get -inf logits; padded, unlabelled and unmasked nodes contribute nothing.
"""

from __future__ import annotations

import torch

from .comm import Comm


class ParallelCrossEntropy(torch.autograd.Function):
    """mean over masked nodes of -log softmax(z)[label], for a block of z."""

    @staticmethod
    def forward(ctx, z, labels, mask, count: int, col_start: int, num_classes: int,
                comm: Comm, rows_axis: str, class_axis: str):  # noqa: D102
        cols = torch.arange(col_start, col_start + z.shape[1], device=z.device)
        z = z.masked_fill(cols[None, :] >= num_classes, float("-inf"))
        zmax = comm.raw_all_reduce(z.max(dim=1).values.clone(), class_axis, "max")
        e = torch.exp(z - zmax[:, None])
        local = (labels >= col_start) & (labels < col_start + z.shape[1]) & mask
        onehot = torch.zeros_like(z, dtype=torch.bool)
        onehot[local.nonzero().squeeze(1), (labels[local] - col_start)] = True
        label_z = torch.where(onehot, z, torch.zeros_like(z)).sum(dim=1)
        stats = comm.raw_all_reduce(torch.stack([e.sum(dim=1), label_z]), class_axis)
        per_node = torch.log(stats[0]) + zmax - stats[1]
        total = torch.where(mask, per_node, torch.zeros_like(per_node)).sum().reshape(1)
        total = comm.raw_all_reduce(total, rows_axis)
        ctx.save_for_backward(e / stats[0][:, None], onehot, mask)
        ctx.count = max(count, 1)
        return total[0] / ctx.count

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        softmax, onehot, mask = ctx.saved_tensors
        dz = (softmax - onehot.to(softmax.dtype)) * mask[:, None].to(softmax.dtype)
        return dz * (grad / ctx.count), None, None, None, None, None, None, None, None


def cross_entropy(z: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, count: int,
                  col_start: int, num_classes: int, comm: Comm, rows_axis: str,
                  class_axis: str) -> torch.Tensor:
    """Global masked mean cross-entropy (the same scalar on every rank)."""
    return ParallelCrossEntropy.apply(z, labels, mask, count, col_start, num_classes, comm,
                                      rows_axis, class_axis)


def predict(z: torch.Tensor, col_start: int, num_classes: int, comm: Comm,
            class_axis: str) -> torch.Tensor:
    """Global argmax class of every row (the lowest index among equal maxima, as torch.argmax)."""
    cols = torch.arange(col_start, col_start + z.shape[1], device=z.device)
    z = z.masked_fill(cols[None, :] >= num_classes, float("-inf"))
    zmax = comm.raw_all_reduce(z.max(dim=1).values.clone(), class_axis, "max")
    big = torch.iinfo(torch.int64).max
    cand = torch.where(z == zmax[:, None], cols[None, :].expand_as(z), torch.full_like(z, 0, dtype=torch.int64) + big)
    return comm.raw_all_reduce(cand.min(dim=1).values.clone(), class_axis, "min")


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
