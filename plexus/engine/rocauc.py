"""ROC-AUC of multi-label tasks, OGB's rule (``ogb.nodeproppred.Evaluator`` for "rocauc"), on
the serial model's logits and on the distributed model's blocks.

OGB's rule: a task counts when its labelled entries hold a positive and a negative; its ROC-AUC is
scikit-learn's ``roc_auc_score`` over those entries (here the same area, `task_rocauc`); the
metric is the plain mean over the tasks that count. The distributed version gives the same
numbers: a split's scores and labels of a task column block are gathered over the row cut (the
split's rows only, never every node's), each task is scored by exactly one rank (the column
block's tasks shared out over the row and replica axes), and the per-task values are summed over
the whole grid.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from .comm import Comm


def task_rocauc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC-AUC of one task over its labelled entries (``y``: 1, 0, or -1 for missing); NaN when
    they lack a positive or a negative (OGB's Evaluator leaves such a task out).

    The area under the ROC curve is the Mann-Whitney statistic: the chance that a positive
    scores above a negative, ties counting one half, i.e. (Σ ranks of the positives −
    P(P+1)/2) / (P·N) with tied scores' ranks averaged. scikit-learn's ``roc_auc_score`` (what
    OGB calls) computes the same area by the trapezoid rule; the tests check the two agree to
    1e-12. numpy only: every rank of a grid scores tasks, and importing scikit-learn costs each
    of them over a second."""
    labelled = y >= 0
    positive = y[labelled] == 1
    s = np.asarray(score, dtype=np.float64)[labelled]
    p = int(positive.sum())
    n = len(s) - p
    if p == 0 or n == 0:
        return math.nan
    order = np.argsort(s, kind="stable")
    ordered = s[order]
    edges = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])  # runs of ties
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((edges[:-1] + edges[1:] + 1) / 2, np.diff(edges))  # 1-based mean
    return float((ranks[positive].sum() - p * (p + 1) / 2) / (p * n))


def mean_rocauc(per_task: np.ndarray) -> float | None:
    """The mean over the tasks that count (OGB's ``sum(list) / len(list)``, in task order);
    None when no task counts (OGB's Evaluator raises there)."""
    values = [float(v) for v in per_task if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def serial_rocauc(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per-task ROC-AUC (NaN where undefined) of an n×T label matrix and its n×T scores."""
    return np.array([task_rocauc(labels[:, t], scores[:, t]) for t in range(labels.shape[1])])


def _gather_rows(x: torch.Tensor, comm: Comm, axis: str) -> torch.Tensor:
    """The rows of every rank of ``axis`` (each with its own count), in coordinate order."""
    p = comm.grid.size(axis)
    if p == 1:
        return x
    counts = comm.raw_all_gather(torch.tensor([x.shape[0]], dtype=torch.int64,
                                              device=x.device), axis)
    most = int(counts.max())
    padded = torch.zeros((most,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x
    every = comm.raw_all_gather(padded, axis).reshape((p, most) + tuple(x.shape[1:]))
    return torch.cat([every[r, : int(c)] for r, c in enumerate(counts.tolist())])


def distributed_rocauc(z: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor],
                       col_start: int, num_tasks: int, comm: Comm, rows_axis: str,
                       class_axis: str, replica_axis: str,
                       scorer: Callable[[np.ndarray, np.ndarray], float] = task_rocauc
                       ) -> dict[str, np.ndarray]:
    """Per mask, the per-task ROC-AUC (num_tasks values, NaN where undefined), the same on
    every rank (collective). ``z`` and ``labels`` are this rank's logits block and its int8
    task block (`plexus.engine.loss.task_block`); ``scorer(labels, scores)`` scores one task
    (`task_rocauc`; `plexus.train.results` passes OGB's Evaluator)."""
    grid = comm.grid
    sharers = grid.size(rows_axis) * grid.size(replica_axis)
    me = grid.coords[rows_axis] * grid.size(replica_axis) + grid.coords[replica_axis]
    width = z.shape[1]
    out = {}
    for name in sorted(masks):
        rows = masks[name]
        # scores and labels travel together: -1, 0 and 1 are exact in float32
        # a metric is read from the logits, never differentiated: detach before numpy
        both = torch.cat([z[rows].detach().float(), labels[rows].float()], dim=1)
        both = _gather_rows(both, comm, rows_axis).cpu().numpy()
        values = torch.zeros(2, num_tasks, dtype=torch.float64, device=z.device)
        for j in range(width):
            task = col_start + j
            if task >= num_tasks or j % sharers != me:
                continue
            auc = scorer(both[:, width + j].astype(np.int8), both[:, j])
            if not math.isnan(auc):
                values[0, task], values[1, task] = auc, 1.0
        for axis in ("x", "y", "z"):  # each task was scored by one rank: sum over the grid
            comm.raw_all_reduce(values, axis)
        per_task = values.cpu().numpy()
        out[name] = np.where(per_task[1] > 0, per_task[0], np.nan)
    return out
