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


def block_rocauc(y: np.ndarray, score: np.ndarray) -> np.ndarray:
    """ROC-AUC of every task (column) of an n×k label block ``y`` (1, 0, or -1 for missing) and
    its n×k scores, in one vectorised pass; NaN for a task whose labelled entries lack a
    positive or a negative (OGB's Evaluator leaves such a task out).

    The area under the ROC curve is the Mann-Whitney statistic: the chance that a positive
    scores above a negative, ties counting one half, i.e. (Σ ranks of the positives −
    P(P+1)/2) / (P·N) with tied scores' ranks averaged. Missing entries are ranked after every
    labelled one (+inf), which leaves the labelled entries' ranks as they are among themselves.
    scikit-learn's ``roc_auc_score`` (what OGB calls, one task at a time) computes the same area
    by the trapezoid rule; the tests check the two agree to 1e-12. numpy only: every rank of a
    grid scores tasks, and importing scikit-learn costs each of them over a second."""
    y = np.asarray(y)
    if y.ndim == 1:
        y, score = y[:, None], np.asarray(score)[:, None]
    n, k = y.shape
    if n == 0 or k == 0:
        return np.full(k, np.nan)
    labelled = y >= 0
    s = np.where(labelled, np.asarray(score, dtype=np.float64), np.inf)
    order = np.argsort(s, axis=0, kind="stable")
    ordered = np.take_along_axis(s, order, axis=0)
    index = np.arange(n)[:, None]
    new_run = np.ones((n, k), dtype=bool)
    new_run[1:] = ordered[1:] != ordered[:-1]
    first = np.maximum.accumulate(np.where(new_run, index, 0), axis=0)  # a run's first index
    run_end = np.ones((n, k), dtype=bool)
    run_end[:-1] = new_run[1:]
    last = n - 1 - np.maximum.accumulate(np.where(run_end, n - 1 - index, 0)[::-1], axis=0)[::-1]
    ranks = np.empty((n, k))
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=0)  # 1-based, ties averaged
    positive = y == 1
    p = positive.sum(axis=0).astype(np.float64)
    neg = (y == 0).sum(axis=0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (np.where(positive, ranks, 0.0).sum(axis=0) - p * (p + 1) / 2) / (p * neg)
    return np.where((p > 0) & (neg > 0), auc, np.nan)


def task_rocauc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC-AUC of one task over its labelled entries (`block_rocauc` of one column)."""
    return float(block_rocauc(np.asarray(y)[:, None], np.asarray(score)[:, None])[0])


def mean_rocauc(per_task: np.ndarray) -> float | None:
    """The mean over the tasks that count (OGB's ``sum(list) / len(list)``, in task order);
    None when no task counts (OGB's Evaluator raises there)."""
    values = [float(v) for v in per_task if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def serial_rocauc(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per-task ROC-AUC (NaN where undefined) of an n×T label matrix and its n×T scores."""
    return block_rocauc(np.asarray(labels), np.asarray(scores))


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
                       scorer: Callable[[np.ndarray, np.ndarray], np.ndarray] = block_rocauc
                       ) -> dict[str, np.ndarray]:
    """Per mask, the per-task ROC-AUC (num_tasks values, NaN where undefined), the same on
    every rank (collective). ``z`` and ``labels`` are this rank's logits block and its int8
    task block (`plexus.engine.loss.task_block`); ``scorer(labels, scores)`` scores all the
    tasks this rank scores at once, an n×k block each (`block_rocauc`)."""
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
        values = np.zeros((2, num_tasks))
        mine = np.array([j for j in range(width)  # this rank's share of its block's tasks
                         if col_start + j < num_tasks and j % sharers == me], dtype=np.int64)
        if len(mine):
            auc = np.asarray(scorer(both[:, width + mine].astype(np.int8), both[:, mine]),
                             dtype=np.float64)
            scored = ~np.isnan(auc)
            values[0, col_start + mine[scored]] = auc[scored]
            values[1, col_start + mine[scored]] = 1.0
        values = torch.from_numpy(values).to(z.device)
        for axis in ("x", "y", "z"):  # each task was scored by one rank: sum over the grid
            comm.raw_all_reduce(values, axis)
        per_task = values.cpu().numpy()
        out[name] = np.where(per_task[1] > 0, per_task[0], np.nan)
    return out
