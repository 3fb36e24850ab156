"""Link prediction's data on the engine's side: OGB's split files (torch pickles) read safely,
OGB's link datasets from a local root, and OGB's link Evaluator on pair scores.

A split file is read with ``torch.load(weights_only=True)`` (tensors and plain containers, no
code run); one that holds numpy arrays, as some of OGB's releases do, with the datasets
project's restricted unpickler (`plexus_datasets.safepickle.load_torch_numpy`, no code run
either). Either way the arrays are checked before use (`plexus_datasets.ogbl.split_arrays`) and
a bad file is one `DatasetError` line naming it.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plexus_datasets.base.values import one_line
from plexus_datasets.errors import DatasetError
from plexus_datasets.files import open_regular
from plexus_datasets.linksplit import LinkSplit
from plexus_datasets.ogbl import link_meta, ogbl_split, split_paths
from plexus_datasets.safepickle import load_torch_numpy

_LOAD_ERRORS = (pickle.UnpicklingError, RuntimeError, ValueError, OSError, EOFError,
                zipfile.BadZipFile, TypeError, AttributeError, KeyError, IndexError)


def _numpy(value: Any) -> Any:
    """Tensors as numpy arrays, inside dicts, lists and tuples too."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_numpy(v) for v in value)
    return value


def read_split_file(path: str | Path) -> Any:
    """A split file's object with its tensors as numpy arrays (module docstring: nothing in it
    runs); `DatasetError` (one line) for a file that is no such pickle."""
    path = Path(path)
    try:
        with open_regular(path) as f:
            obj = torch.load(f, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing (a split file)") from None
    except DatasetError:
        raise
    except _LOAD_ERRORS as first:
        try:
            obj = load_torch_numpy(path)
        except _LOAD_ERRORS:
            raise DatasetError(f"{path}: not a split file of tensors or numpy arrays "
                               f"({type(first).__name__}: {one_line(first)[:160]})") from None
    return _numpy(obj)


def load_ogbl(name: str, root: str | Path | None) -> LinkSplit:
    """OGB's link dataset ``name`` (ogbl-collab, ogbl-ppa, ogbl-ddi) from its raw files and split
    files under ``root`` (`plexus_datasets.ogbl`): the message graph of its training edges and
    every split's pairs."""
    paths = split_paths(name, root)
    return ogbl_split(name, root, {s: read_split_file(p) for s, p in paths.items()})


def ogbl_evaluate(name: str, pos: Any, neg: Any) -> dict[str, Any]:
    """``ogb.linkproppred.Evaluator``'s metric (Hits@K of the dataset) of the scores of the
    positive and the negative pairs: {"name", "metric", "value"}."""
    from ogb.linkproppred import Evaluator  # noqa: PLC0415 (ogb only where it is used)

    metric = link_meta(name)["eval metric"]
    evaluator = Evaluator(name)
    got = evaluator.eval({"y_pred_pos": torch.as_tensor(np.asarray(pos, dtype=np.float32)),
                          "y_pred_neg": torch.as_tensor(np.asarray(neg, dtype=np.float32))})
    return {"name": name, "metric": metric, "value": float(got[metric])}
