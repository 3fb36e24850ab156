"""The Python API: build a distributed model from a `Graph`, train it with your own loop, get
results out.

`session` (start local workers or join a torchrun/SLURM job: `launch`, `init`), `model`
(`distributed_model`: this rank's model from a graph; `GraphModel`), `results` (logits,
predictions and embeddings gathered on rank 0 in the original node order, for graphs small
enough), `outputs` (the same written by every rank into its own rows of memory-mapped .npy
files, for any size), `export` (unsharded weights under PyG's parameter names; `load_pyg`: the
PyG model an export describes, loaded), `inference` (`infer`: a trained model on a new graph,
on any grid), `recipes` (the OGB examples' settings),
`script` (`run_script`: a script's bad input as one line, as the command-line tools say it),
`ogb` (`ogb_evaluate`: the official OGB evaluator on gathered predictions), `memcheck` (a model
predicted not to fit in memory refused before it is built: `distributed_model` and plexus-train).
It sits at the application level, beside `plexus.train`, which uses it for its results.
"""

from .export import (ExportError, export_payload, full_weights, load_pyg, pyg_names,
                     pyg_state_dict, save_weights)
from .inference import InferenceError, Weights, infer, read_export
from .model import GraphModel, cut_shard, distributed_model, model_from_shard
from .recipes import RECIPES, Recipe, RecipeError
from .outputs import OutputsError, load_outputs, save_outputs
from .results import (GatherTooLargeError, gather_embeddings, gather_logits, gather_outputs,
                      gather_predictions)
from .ogb import ogb_evaluate
from .script import USER_ERRORS, run_script
from .session import init, launch

__all__ = [
    "GraphModel", "cut_shard", "distributed_model", "model_from_shard",
    "gather_embeddings", "gather_logits", "gather_outputs", "gather_predictions",
    "GatherTooLargeError", "save_outputs", "load_outputs", "OutputsError",
    "pyg_names", "export_payload", "full_weights", "pyg_state_dict", "save_weights",
    "load_pyg", "ExportError", "infer", "read_export", "Weights", "InferenceError",
    "RECIPES", "Recipe", "RecipeError", "init", "launch", "run_script", "USER_ERRORS",
    "ogb_evaluate",
]
