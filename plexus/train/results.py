"""What a run hands back at its end, through the Python API (`plexus.api`): predictions, logits
and embeddings (``--save-predictions``, ``--save-embeddings``), the unsharded weights under PyG's
names (``--export``, ``--export-best``), and the OGB evaluator's test metric at the final and at
the best-validation epoch.

The best-validation epoch's weights are kept as this rank's shards (`BestWeights`: one copy of
the parameters, no communication) whenever something needs them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from plexus.api import GraphModel, gather_outputs, save_weights
from plexus.api.results import gather_rows
from plexus.core.atomic import UnsafeTargetError, atomic_file

from .errors import output_failure
from .options import RunOptions


class BestWeights:
    """This rank's parameter shards at the best-validation epoch."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.shards: dict[str, torch.Tensor] | None = None

    def capture(self, model: GraphModel, epoch: int) -> None:
        """Keep a copy of the current shards as those of ``epoch`` (local, no communication)."""
        self.epoch = epoch
        self.shards = {n: p.detach().clone() for n, p in model.named_tensors().items()}

    def full(self, model: GraphModel) -> dict[str, torch.Tensor] | None:
        """The kept weights as full tensors (collective), for a checkpoint; None if none."""
        if self.shards is None:
            return None
        return {n: model.full_parameter(n, s).cpu() for n, s in self.shards.items()}

    def restore(self, model: GraphModel, epoch: int, full: dict[str, torch.Tensor]) -> None:
        """Take the weights of ``epoch`` from a checkpoint's full tensors."""
        self.epoch = epoch
        self.shards = {n: model.shard_of(n, t) for n, t in full.items()}

    def swap(self, model: GraphModel) -> None:
        """Exchange the model's shards with the kept ones (twice restores the model)."""
        assert self.shards is not None
        with torch.no_grad():
            for name, p in model.named_tensors().items():
                kept = self.shards[name]
                current = p.detach().clone()
                p.copy_(kept)
                self.shards[name] = current


def needs_best_weights(opts: RunOptions, dataset_name: str) -> bool:
    """Whether the run keeps the best-validation weights: for --export-best, and for the OGB
    evaluator's metric at the best epoch."""
    return opts.export_best or is_ogb(dataset_name)


def is_ogb(dataset_name: str) -> bool:
    """Whether the official OGB evaluator applies to the dataset."""
    return dataset_name.startswith("ogbn-")


def ogb_metric(name: str, pred: np.ndarray, labels: np.ndarray, test: np.ndarray) -> dict | None:
    """The official ``ogb.nodeproppred.Evaluator`` test metric (None where it is not accuracy)."""
    from ogb.nodeproppred import Evaluator  # noqa: PLC0415 (only for OGB datasets)

    evaluator = Evaluator(name)
    if evaluator.eval_metric != "acc":
        return None
    result = evaluator.eval({"y_true": labels[test].reshape(-1, 1),
                             "y_pred": pred[test].reshape(-1, 1)})
    return {"name": name, "metric": "acc", "value": float(result["acc"])}


def _labels_and_test(model: GraphModel) -> tuple[np.ndarray, np.ndarray] | None:
    """Labels and the test mask of every node on rank 0 (collective)."""
    last = model.net.plans[-1]
    cols = torch.stack([model.labels, model.net.masks["test"].to(torch.int64)], dim=1)
    out = gather_rows(model, cols, model.node_ids, 0, 2,
                      lambda c: c[last.out_replicated] == 0 and c[last.out_cols] == 0)
    return None if out is None else (out[:, 0], out[:, 1].astype(bool))


def save_predictions(path: str | os.PathLike, outputs: dict[str, np.ndarray], epoch: int) -> Path:
    """Write the arrays atomically as an .npz (rank 0)."""
    target = Path(path).expanduser()
    with atomic_file(target) as f:
        np.savez(f, epoch=np.int64(epoch), **outputs)
    return target


def end_of_run(opts: RunOptions, model: GraphModel, dataset_name: str, epoch: int,
               best_epoch: int | None, best: BestWeights | None) -> dict:
    """Collective: the run's results through the API, for the final epoch ``epoch`` and the
    best-validation epoch ``best_epoch`` (whose weights ``best`` holds unless it is the final
    one). Returns, on rank 0, the summary's additions: ``ogb`` (final epoch), ``ogb_best``
    (best-validation epoch) and the files written."""
    summary: dict = {}
    rank0 = model.grid.rank == 0
    ogb = is_ogb(dataset_name)
    outputs = None
    if opts.save_predictions or ogb:
        outputs = gather_outputs(model, logits=bool(opts.save_predictions),
                                 embeddings=bool(opts.save_predictions) and opts.save_embeddings)
    truth = _labels_and_test(model) if ogb else None
    def failed(error: BaseException, what: str) -> None:  # rank 0: report it after the last
        summary.setdefault("output_error", output_failure(error, what))  # collective

    if rank0 and opts.save_predictions:
        assert outputs is not None
        try:
            summary["predictions_file"] = str(save_predictions(opts.save_predictions, outputs,
                                                               epoch))
        except (OSError, UnsafeTargetError) as e:
            failed(e, "--save-predictions")
    if rank0 and ogb:
        assert outputs is not None and truth is not None
        summary["ogb"] = ogb_metric(dataset_name, outputs["pred"], *truth)
        if summary["ogb"] is not None and best_epoch == epoch:
            summary["ogb_best"] = {**summary["ogb"], "epoch": epoch}

    def export(final: bool, at: int | None) -> None:
        try:  # a collective; only rank 0 writes (last), so only it can fail here
            path = save_weights(model, opts.export, {"epoch": at, "best": not final})
        except (OSError, UnsafeTargetError) as e:
            failed(e, "--export")
            return
        if rank0:
            summary["export_file"] = str(path)

    at_best = best_epoch is not None and best_epoch != epoch
    if at_best and best is not None and best.epoch == best_epoch and (ogb or opts.export_best):
        best.swap(model)  # the best epoch's weights in, for its predictions and its export
        try:
            if ogb:
                best_out = gather_outputs(model, logits=False)
                if rank0:
                    assert best_out is not None and truth is not None
                    metric = ogb_metric(dataset_name, best_out["pred"], *truth)
                    summary["ogb_best"] = metric and {**metric, "epoch": best_epoch}
            if opts.export and opts.export_best:
                export(False, best_epoch)
        finally:
            best.swap(model)
    elif at_best and opts.export and opts.export_best:
        raise RuntimeError(f"the weights of the best-validation epoch {best_epoch} were not "
                           "kept; cannot --export-best")
    if opts.export and (not opts.export_best or not at_best):
        export(not opts.export_best, epoch)
    return summary
