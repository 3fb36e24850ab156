"""``plexus-predict``: run a trained model (a ``plexus-train --export`` file or a
``--checkpoint`` directory) over a graph of the same feature width on a grid, and write its
outputs as ``plexus-train --save-predictions`` writes them (`plexus.infer`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from plexus_datasets import DatasetError
from plexus_datasets.spec import FEATURE_MODES
from plexus_partition.model.cli import ArgumentParser, UsageError, report_error
from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import ModelConfig

PROG = "plexus-predict"


def predict_parser() -> ArgumentParser:
    """``plexus-predict``'s options."""
    p = ArgumentParser(prog=PROG, description="Run a trained model (plexus-train --export FILE, "
                       "or --checkpoint DIR) over a graph of the same feature width and class "
                       "count, on a grid, and write every node's predicted class and logits "
                       "as --save-predictions writes them.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--weights", metavar="FILE.pt", type=Path,
                     help="an export (plexus-train --export, plexus.save_weights)")
    src.add_argument("--checkpoint", metavar="DIR", type=Path,
                     help="a plexus-train --checkpoint directory (its last saved epoch)")
    p.add_argument("--dataset", required=True, metavar="SPEC",
                   help="the graph to predict on, as plexus-train --dataset names it")
    p.add_argument("--root", metavar="DIR", help="directory holding the dataset's files")
    p.add_argument("--features", choices=FEATURE_MODES, default="auto",
                   help="node features as plexus-train --features (default auto); give the "
                        "training run's")
    p.add_argument("--split-seed", type=int, default=0, metavar="S",
                   help="seed of what the dataset's files lack (default 0)")
    p.add_argument("--grid", default="1x1x1", metavar="XxYxZ",
                   help="process grid (default 1x1x1); any grid gives the same outputs")
    p.add_argument("--out", required=True, metavar="DIR", type=Path,
                   help="write DIR/pred.npy, DIR/logits.npy and DIR/outputs.json (rows in the "
                        "original node order; plexus.load_outputs reads them)")
    p.add_argument("--save-embeddings", action="store_true",
                   help="add the last hidden layer's output (DIR/embeddings.npy)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="process-group timeout (default 300)")
    return p


def checkpoint_weights(directory: Path) -> Any:
    """The `plexus.api.inference.Weights` of a plexus-train checkpoint's last saved epoch."""
    from plexus.api.inference import Weights  # noqa: PLC0415 (torch)

    from .checkpoint import load_checkpoint  # noqa: PLC0415

    payload = load_checkpoint(directory)
    state, dataset = payload["state"], payload["dataset"]
    return Weights(ModelConfig(**payload["model"]), int(dataset["num_features"]),
                   int(dataset["num_classes"]), {**state["params"], **state.get("stats", {})})


def _rank(grid: Any, weights: Any, graph: Any, out: str, embeddings: bool) -> str:
    import plexus  # noqa: PLC0415

    return str(plexus.infer(weights, graph, grid, out=out, embeddings=embeddings))


def main(argv: Sequence[str] | None = None) -> int:
    """``plexus-predict``: 0 when the outputs are written, 2 on bad input (one line)."""
    from plexus.api import ExportError, InferenceError, launch, read_export  # noqa: PLC0415
    from plexus.api.outputs import OutputsError  # noqa: PLC0415

    from .checkpoint import CheckpointError  # noqa: PLC0415

    try:
        a = predict_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        grid = GridShape.parse(a.grid)
        weights = read_export(a.weights) if a.weights else checkpoint_weights(a.checkpoint)
        from plexus_datasets import load_dataset  # noqa: PLC0415

        graph = load_dataset(a.dataset, a.root, seed=a.split_seed, features=a.features)
        out = launch(_rank, weights, graph, str(a.out), a.save_embeddings, grid=grid,
                     timeout_s=a.timeout)
    except (UsageError, ExportError, InferenceError, CheckpointError, DatasetError,
            OutputsError, ValueError, OSError) as e:
        return report_error(PROG, e)
    print(f"{PROG}: {weights.config.kind} on {graph.name} ({graph.num_nodes:,} nodes), grid "
          f"{a.grid}: wrote {out}")
    return 0
