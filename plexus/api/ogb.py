"""The official OGB evaluator on a run's predictions, from the Python API (``plexus-train``
reports the same metric in its summary)."""

from __future__ import annotations

from typing import Any

import numpy as np

from plexus_datasets import DatasetError, Graph


def ogb_evaluate(graph: Graph, pred: Any, mask: str | Any = "test",
                 name: str | None = None) -> dict[str, Any]:
    """``ogb.nodeproppred.Evaluator``'s metric of ``pred`` on the labelled nodes of ``mask``.

    ``pred`` has one row per node of ``graph``, in its original order (what
    `plexus.gather_predictions` returns on rank 0: classes; for a multi-label graph, scores per
    task, e.g. `plexus.gather_logits`). ``mask`` is "train", "val", "test" or a bool mask of the
    nodes; ``name`` the OGB dataset (default ``graph.name``). Returns ``{"name", "metric",
    "value"}``, e.g. ``{"name": "ogbn-arxiv", "metric": "acc", "value": 0.7172}``. Raises
    `DatasetError` for a name OGB's evaluator does not know or ``pred`` of the wrong length.
    """
    from ogb.nodeproppred import Evaluator  # noqa: PLC0415 (ogb only where it is used)

    name = name or graph.name
    try:
        evaluator = Evaluator(name)
    except (ValueError, KeyError) as e:  # ogb: "Invalid dataset name" or a missing master row
        raise DatasetError(f"{name}: not an OGB node-property dataset the evaluator knows "
                           f"({e}); give name='ogbn-...'") from None
    pred = np.asarray(pred)
    if pred.shape[0] != graph.num_nodes:
        raise DatasetError(f"pred has {pred.shape[0]} rows for {graph.num_nodes} nodes: give one "
                           "row per node, in the graph's order (plexus.gather_predictions)")
    rows = np.asarray(getattr(graph, f"{mask}_mask") if isinstance(mask, str) else mask,
                      dtype=bool)
    labels = np.asarray(graph.labels)
    if labels.ndim == 1:  # one class per node: unlabelled nodes (-1) are not scored
        rows = rows & (labels >= 0)
        y_true, y_pred = labels[rows].reshape(-1, 1), pred[rows].reshape(-1, 1)
    else:  # a label per task, -1 missing: ogb's ROC-AUC skips NaN
        y_true = np.where(labels[rows] < 0, np.nan, labels[rows]).astype(np.float64)
        y_pred = pred[rows].astype(np.float64)
    metric = evaluator.eval_metric
    value = evaluator.eval({"y_true": y_true, "y_pred": y_pred})[metric]
    return {"name": name, "metric": metric, "value": float(value)}
