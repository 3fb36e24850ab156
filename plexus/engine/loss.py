"""Masked losses and metrics on the last layer's distributed logits.

Logits are cut by rows over ``rows_axis`` and by classes (or tasks) over ``class_axis``
(replicated over the third axis). Single-label: softmax cross-entropy, whose statistics are
all-reduced over the class cut and per-node sums over the row cut; padded classes get -inf
logits; accuracy. Multi-label: binary cross-entropy with logits, elementwise, so only its sum
and the number of labelled entries are all-reduced (over the row cut, then the task cut); the
ROC-AUC of every task (`plexus.engine.rocauc`). Padded, unlabelled and unmasked nodes (and
missing or padded tasks) contribute nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from .comm import Comm
from .rocauc import distributed_rocauc, mean_rocauc


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
    classes, and a few float32 vectors per row (maximum, sums, per-node loss, the label's logit)
    and the labels' columns: what `plexus.perfmodel` prices for the loss. No host
    synchronisation: the labelled rows are selected by masks, never gathered by index."""

    @staticmethod
    def forward(ctx, z, labels, mask, count: int, col_start: int, num_classes: int,
                comm: Comm, rows_axis: str, class_axis: str):  # noqa: D102
        z = _pad_classes(z, col_start, num_classes)
        width = z.shape[1]
        zmax = comm.raw_all_reduce(z.max(dim=1).values.clone(), class_axis, "max")
        local = (labels >= col_start) & (labels < col_start + width) & mask
        cols = (labels - col_start).clamp_(0, max(width - 1, 0))
        onehot = (torch.arange(width, device=z.device)[None, :] == cols[:, None]) & local[:, None]
        label_z = torch.where(local, z.gather(1, cols[:, None]).squeeze(1),
                              torch.zeros((), dtype=z.dtype, device=z.device))
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
        dz.sub_(onehot.to(dz.dtype))  # softmax - one-hot labels
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


def task_block(labels: torch.Tensor, col_start: int, width: int) -> torch.Tensor:
    """The int8 labels of the task columns [col_start, col_start + width) of a row×task label
    matrix, -1 (missing) for the padded columns past its last task."""
    out = torch.full((labels.shape[0], width), -1, dtype=torch.int8, device=labels.device)
    real = max(0, min(width, labels.shape[1] - col_start))
    out[:, :real] = labels[:, col_start:col_start + real]
    return out


class ParallelBCE(torch.autograd.Function):
    """mean over the labelled (node, task) entries of the masked nodes of
    BCEWithLogits(z, y) = max(z, 0) − z·y + log(1 + e^−|z|), for a block of z and its block of
    int8 labels (-1: missing).

    The three terms are summed one at a time (in float64), so the forward holds one float
    buffer per logit and two one-byte masks; backward builds σ(z) − y in place in one buffer.
    Autograd keeps the logits anyway; the labels are the model's own."""

    @staticmethod
    def forward(ctx, z, labels, mask, comm: Comm, rows_axis: str,
                class_axis: str):  # noqa: D102
        skip = (labels < 0) | ~mask[:, None]  # entries left out of the loss
        softplus = z.abs().neg_().exp_().log1p_().masked_fill_(skip, 0).sum(dtype=torch.float64)
        relu = z.clamp(min=0).masked_fill_(skip, 0).sum(dtype=torch.float64)
        skip |= labels != 1  # z·y: only the positive labels' logits
        zy = z.masked_fill(skip, 0).sum(dtype=torch.float64)
        del skip
        # the sum and the count in float64: the count is exact and the mean grid-independent
        # to float32 rounding
        count = ((labels >= 0) & mask[:, None]).sum(dtype=torch.float64)
        stats = torch.stack([softplus + relu - zy, count])
        comm.raw_all_reduce(stats, rows_axis)
        comm.raw_all_reduce(stats, class_axis)
        count = stats[1].clamp(min=1.0)  # stays on the device: no host synchronisation
        ctx.save_for_backward(z, labels, mask, count)
        return (stats[0] / count).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        z, labels, mask, count = ctx.saved_tensors
        dz = torch.sigmoid(z).sub_(labels.clamp(min=0))  # σ(z) − y
        dz.masked_fill_((labels < 0) | ~mask[:, None], 0)
        return dz.mul_(grad / count.float()), None, None, None, None, None


def binary_cross_entropy(z: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                         comm: Comm, rows_axis: str, class_axis: str) -> torch.Tensor:
    """Global mean binary cross-entropy with logits over the labelled (node, task) entries of
    the nodes of ``mask`` (the same scalar on every rank): torch's ``BCEWithLogitsLoss`` on
    those entries. ``labels`` is this rank's int8 block of the tasks (`task_block`)."""
    return ParallelBCE.apply(z, labels, mask, comm, rows_axis, class_axis)


class TaskMetrics:
    """What a task's kind decides, for a model with ``labels`` (class ids, or a row×task
    matrix), ``accuracy`` and ``task_metrics``: the distributed head and the serial model."""

    labels: torch.Tensor

    @property
    def multilabel(self) -> bool:
        """Whether the task is multi-label (binary tasks; labels a row×task matrix)."""
        return self.labels.ndim == 2

    @property
    def metric_name(self) -> str:
        """What `metrics` measures: "acc", or "rocauc" for a multi-label task (OGB's)."""
        return "rocauc" if self.multilabel else "acc"

    def metrics(self, logits: torch.Tensor) -> dict[str, float | None]:
        """The task's metric on the train/val/test masks (on a grid a collective, the same on
        every rank): accuracy, or for a multi-label task the mean ROC-AUC over its tasks (None
        where no task has both a positive and a negative label)."""
        if self.multilabel:
            return {k: mean_rocauc(v) for k, v in self.task_metrics(logits).items()}
        return self.accuracy(logits)


class ClassifierHead(TaskMetrics):
    """Loss, accuracy and predictions on the last stage's output layout, for a model that has
    ``plans`` (its stages' `LayerPlan`s), ``labels``/``masks``/``counts`` of its output rows,
    ``class_start``/``num_classes`` and ``comm``: the engine's model and a `plexus.nn` network
    share them. A multi-label task (``labels``: the int8 rows×tasks block of this rank's task
    columns, `head_labels`) trains with binary cross-entropy and is scored by ROC-AUC."""

    plans: list
    labels: torch.Tensor
    masks: dict[str, torch.Tensor]
    counts: dict[str, int]
    class_start: int
    num_classes: int
    comm: Comm

    @staticmethod
    def head_labels(labels: np.ndarray, class_start: int, width: int,
                    device: torch.device) -> torch.Tensor:
        """The ``labels`` attribute from a shard's labels: its class ids, or for a multi-label
        shard the ``width`` task columns of the logits block that starts at ``class_start``."""
        out = torch.from_numpy(labels).to(device)
        return task_block(out, class_start, width) if out.ndim == 2 else out

    def _axes(self) -> tuple[str, str]:
        return self.plans[-1].out_rows, self.plans[-1].out_cols

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """Mean cross-entropy over the nodes of ``mask`` (multi-label: mean binary cross-entropy
        over their labelled (node, task) entries); the same value on every rank."""
        rows, classes = self._axes()
        with self.comm.at(None, "loss"), self.comm.exact(), self.comm.labelled("loss"):
            # statistics: float32
            if self.multilabel:
                return binary_cross_entropy(logits, self.labels, self.masks[mask], self.comm,
                                            rows, classes)
            return cross_entropy(logits, self.labels, self.masks[mask], self.counts[mask],
                                 self.class_start, self.num_classes, self.comm, rows, classes)

    def task_metrics(self, logits: torch.Tensor, scorer=None) -> dict[str, np.ndarray]:
        """Multi-label: the ROC-AUC of every task (NaN where undefined) on each mask
        (``scorer``: a block of tasks at once, `plexus.engine.rocauc.distributed_rocauc`)."""
        if not self.multilabel:
            raise ValueError("per-task metrics are for multi-label tasks; this one is "
                             "single-label (use accuracy)")
        rows, classes = self._axes()
        with self.comm.at(None, "eval"), self.comm.exact(), self.comm.labelled("rocauc"):
            return distributed_rocauc(logits, self.labels, self.masks, self.class_start,
                                      self.num_classes, self.comm, rows, classes,
                                      self.plans[-1].out_replicated,
                                      **({"scorer": scorer} if scorer else {}))

    def accuracy(self, logits: torch.Tensor) -> dict[str, float]:
        """Accuracy on the train/val/test masks (single-label tasks)."""
        if self.multilabel:
            raise ValueError("accuracy is for single-label tasks; a multi-label task's metric "
                             "is the ROC-AUC (metrics)")
        rows, classes = self._axes()
        with self.comm.at(None, "eval"), self.comm.exact(), self.comm.labelled("accuracy"):
            return accuracy(logits, self.labels, self.masks, self.counts, self.class_start,
                            self.num_classes, self.comm, rows, classes)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Predicted class per logits row (padded rows included); multi-label: 1 where a task's
        logit is positive (probability above 1/2), for this rank's task block."""
        if self.multilabel:
            return (logits > 0).to(torch.int8)
        with self.comm.at(None, "eval"), self.comm.exact(), self.comm.labelled("predict"):
            return predict(logits, self.class_start, self.num_classes, self.comm,
                           self._axes()[1])
