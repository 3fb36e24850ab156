"""Whether a graph's labels and split can train a model at all: a node to train on, a
validation node where the run needs the validation metric (early stopping, the plateau schedule,
the best epoch's weights), and two classes to tell apart. A graph that fails trains with a loss
of 0 and an accuracy that means nothing, exit 0; it is refused in one line naming the dataset
and the fix, before a step runs."""

from __future__ import annotations

from typing import Mapping

from .errors import DatasetError


class UntrainableError(DatasetError):
    """Labels or a split that cannot train (one line naming the dataset and the fix)."""


def check_trainable(name: str, counts: Mapping[str, int], num_classes: int, multilabel: bool,
                    needs_val: str | None = None) -> None:
    """Raise `UntrainableError` unless ``counts`` (nodes per split: "train", "val", "test",
    labelled nodes only) has a training node, a validation node when ``needs_val`` names what
    needs one, and a single-label task has two classes or more."""
    if counts.get("train", 0) < 1:
        raise UntrainableError(f"{name}: no labelled training node (the train split is empty "
                               "or all its labels are -1), so there is nothing to learn; give "
                               "labels and a train mask that selects labelled nodes")
    if needs_val and counts.get("val", 0) < 1:
        raise UntrainableError(f"{name}: {needs_val} needs the validation metric, but the "
                               "validation split has no node; give a val mask, or drop "
                               f"{needs_val}")
    if not multilabel and num_classes < 2:
        raise UntrainableError(f"{name}: one class only, so every prediction is right and "
                               "the accuracy means nothing; give labels of two classes or "
                               "more")


def graph_counts(graph) -> dict[str, int]:  # noqa: ANN001 (a Graph: its module imports this)
    """Nodes per split of ``graph`` (its masks select labelled nodes only: `Graph.validate`)."""
    return {k: int(getattr(graph, f"{k}_mask").sum()) for k in ("train", "val", "test")}
