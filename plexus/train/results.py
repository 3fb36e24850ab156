"""What a run hands back at its end, through the Python API (`plexus.api`): predictions, logits
and embeddings (``--save-predictions DIR``, ``--save-embeddings``: every rank writes its own rows,
`plexus.api.outputs`), the unsharded weights under PyG's names (``--export``, ``--export-best``),
and the OGB evaluator's test metric at the final and at the best-validation epoch (accuracy from
per-rank counts, ROC-AUC per task on one rank each: no rank gathers every node's output).

The best-validation epoch's weights are kept as this rank's shards (`BestWeights`: one copy of
the parameters, no communication) whenever something needs them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from plexus.api import GraphModel, OutputsError, save_weights
from plexus.api.outputs import write_outputs
from plexus.api.results import NodeBlock, output_blocks
from plexus_datasets.base.atomic import UnsafeTargetError

from .errors import output_failure
from .plan import RunRequest


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


def needs_best_weights(plan: RunRequest, dataset_name: str) -> bool:
    """Whether the run keeps the best-validation weights: for --export-best, and for the OGB
    evaluator's metric at the best epoch."""
    return plan.export_best or is_ogb(dataset_name)


def is_ogb(dataset_name: str) -> bool:
    """Whether the official OGB evaluator applies to the dataset: an OGB dataset, or a
    gnn-benchmark file named after one (``ogbn-arxiv.npz``: files are named by the file)."""
    return ogb_name(dataset_name).startswith("ogbn-")


def ogb_name(dataset_name: str) -> str:
    """The OGB dataset a run's dataset name scores as (the name without a ``.npz``)."""
    return dataset_name.removesuffix(".npz")


def ogb_metric(model: GraphModel, name: str, pred: NodeBlock, mask: str = "test"
               ) -> dict | None:
    """The official ``ogb.nodeproppred.Evaluator`` metric over the nodes of ``mask`` (None where
    it is not accuracy), from per-rank counts (collective): every rank that holds the counted
    copy of some of those nodes runs the evaluator on them, and the correct counts and node
    counts are summed over ranks. No rank ever holds more than its own rows."""
    from ogb.nodeproppred import Evaluator  # noqa: PLC0415 (only for OGB datasets)

    evaluator = Evaluator(name)
    if evaluator.eval_metric != "acc":
        return None
    rows = model.net.masks[mask] & (model.labels >= 0)
    if not pred.speaks(model.grid.coords):
        rows = torch.zeros_like(rows)
    n = int(rows.sum())
    correct = 0
    if n:
        y_true = model.labels[rows].cpu().numpy().reshape(-1, 1)
        y_pred = pred.values[rows].cpu().numpy().reshape(-1, 1)
        correct = round(float(evaluator.eval({"y_true": y_true, "y_pred": y_pred})["acc"]) * n)
    counts = torch.tensor([correct, n], dtype=torch.int64, device=model.grid.device)
    dist.all_reduce(counts)
    total_correct, total = (int(v) for v in counts.tolist())
    return {"name": name, "metric": "acc", "value": total_correct / max(total, 1)}


def ogb_rocauc(model: GraphModel, name: str, mask: str = "test") -> dict | None:
    """OGB's ROC-AUC (``ogb.nodeproppred.Evaluator``'s rule, multi-label datasets:
    ogbn-proteins) over the nodes of ``mask``, without dropout (collective; None where the
    evaluator's metric is not ROC-AUC). Each rank scores its share of its task block in one
    vectorised pass (`plexus.engine.rocauc.block_rocauc`, equal to the Evaluator's per-task
    scikit-learn areas to 1e-12: tests/train/test_ux_round3.py), from the split's rows gathered over
    the logits' rows axis (no rank holds more than its task block of the split); the per-task
    values are summed over the grid and averaged as ogb does (the mean over the tasks with a
    positive and a negative label). One Evaluator call per task, the earlier way, cost 13% of a
    proteins run's wall time."""
    from ogb.nodeproppred import Evaluator  # noqa: PLC0415 (only for OGB datasets)

    from plexus.api.training import mean_rocauc  # noqa: PLC0415

    if Evaluator(name).eval_metric != "rocauc":
        return None
    logits = output_blocks(model, logits=True, predictions=False)["logits"].values
    per_task = model.net.task_metrics(logits)[mask]
    value = mean_rocauc(per_task)
    return None if value is None else {"name": name, "metric": "rocauc", "value": value}


def _metric(model: GraphModel, name: str, pred: NodeBlock | None) -> dict | None:
    """The OGB evaluator's test metric: ROC-AUC for a multi-label task, else accuracy."""
    if model.multilabel:
        return ogb_rocauc(model, ogb_name(name))
    assert pred is not None
    return ogb_metric(model, ogb_name(name), pred)


def _predictions(model: GraphModel) -> NodeBlock:
    """This rank's block of predicted classes (collective)."""
    return output_blocks(model, logits=False, predictions=True)["pred"]


def end_of_run(plan: RunRequest, model: GraphModel, dataset_name: str, epoch: int,
               best_epoch: int | None, best: BestWeights | None) -> dict:
    """Collective: the run's results through the API, for the final epoch ``epoch`` and the
    best-validation epoch ``best_epoch`` (whose weights ``best`` holds unless it is the final
    one). Returns, on rank 0, the summary's additions: ``ogb`` (final epoch), ``ogb_best``
    (best-validation epoch) and the files written."""
    summary: dict = {}
    rank0 = model.grid.rank == 0
    ogb = is_ogb(dataset_name)
    def failed(error: BaseException, what: str) -> None:  # reported after the last collective
        summary.setdefault("output_error", output_failure(error, what))

    save = bool(plan.save_predictions)
    if save or ogb:
        blocks = output_blocks(model, logits=save, predictions=True,
                               embeddings=save and plan.save_embeddings)
        if save:
            try:  # collective: every rank writes its rows; a failure is raised on every rank
                path = write_outputs(model, blocks, plan.save_predictions,  # type: ignore[arg-type]
                                     {"epoch": int(epoch), "dataset": dataset_name})
                if rank0:
                    summary["predictions_file"] = str(path)
            except (OSError, OutputsError) as e:
                failed(e, "--save-predictions")
        if ogb:
            summary["ogb"] = _metric(model, dataset_name, blocks["pred"])
            if summary["ogb"] is not None and best_epoch == epoch:
                summary["ogb_best"] = {**summary["ogb"], "epoch": epoch}
        del blocks

    def export(final: bool, at: int | None) -> None:
        try:  # a collective; only rank 0 writes (last), so only it can fail here
            path = save_weights(model, plan.export, {"epoch": at, "best": not final})
        except (OSError, UnsafeTargetError) as e:
            failed(e, "--export")
            return
        if rank0:
            summary["export_file"] = str(path)

    at_best = best_epoch is not None and best_epoch != epoch
    if at_best and best is not None and best.epoch == best_epoch and (ogb or plan.export_best):
        best.swap(model)  # the best epoch's weights in, for its predictions and its export
        try:
            if ogb:
                metric = _metric(model, dataset_name,
                                 None if model.multilabel else _predictions(model))
                summary["ogb_best"] = metric and {**metric, "epoch": best_epoch}
            if plan.export and plan.export_best:
                export(False, best_epoch)
        finally:
            best.swap(model)
    elif at_best and plan.export and plan.export_best:
        raise RuntimeError(f"the weights of the best-validation epoch {best_epoch} were not "
                           "kept; cannot --export-best")
    if plan.export and (not plan.export_best or not at_best):
        export(not plan.export_best, epoch)
    return summary
