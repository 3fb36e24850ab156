"""``plexus-train --task link``: link prediction with the model as the encoder, on local workers.

    plexus-train --task link --grid 2x2x1 --dataset cora --edge-split 0.85,0.05,0.1
    plexus-train --task link --dataset ogbl-collab --root data/ --decoder mlp

The graph is a dataset spec with a random edge split (`plexus_datasets.linksplit`), or an
``ogbl-*`` dataset from its raw files and split files (`plexus.api.linkdata`). Every rank trains
its `plexus.api.link.LinkModel`. The first line names the graph, its pairs, the grid and the
model; rank 0 prints an epoch line at every evaluation (the loss, then ROC-AUC and Hits@50 of
validation and test); the summary (`plexus.train.linkreport`) gives the best validation epoch,
the final one, for an ogbl dataset OGB's Evaluator's metric on the test pairs, the wall time,
memory per rank beside the model's and the bytes sent. The outputs: ``--log-json`` (every
epoch's figures and the summary), ``--save-predictions DIR`` (the scores of the validation and test
pairs: ``DIR/{val,test}_{pos,neg}_{pairs,scores}.npy``, and with ``--score-pairs FILE``
those pairs' as ``DIR/given_{pairs,scores}.npy``), ``--export FILE`` (the encoder's PyG
export, and the decoder beside it as FILE.decoder.pt, `plexus.api.link.load_decoder`).
The node task's checkpoints, stores and caches are not this path's: asking for them is one
line and exit status 2. Under torchrun or srun every rank runs this with the same ``--grid``;
before any tensor moves each proves the job's secret and its options to rank 0, as the node
task's ranks do (`plexus_partition.launch.group.prove_job`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from plexus.api.link import link_model
from plexus_partition.model.pairs import DECODER_LAYERS
from plexus.api.linkdata import load_ogbl, ogbl_evaluate
from plexus.api.session import run_grid
from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.linksplit import (DEFAULT_EDGE_SPLIT, LinkSplit, load_pairs,
                                       random_edge_split)
from plexus_datasets.spec import load_dataset
from plexus_partition.model.cli import UsageError
from plexus_partition.launch.env import LaunchError, default_device
from plexus_partition.launch.group import prove_job
from plexus_partition.model.grid import GridShape
from plexus_partition.model.modelopts import model_config

from .checks import check_log_path, check_output_file, check_outputs_dir
from .errors import error_line
from .linkreport import BEST_BY, best_epoch, epoch_line, first_line, link_figures, model_words
from .linkreport import summary_lines
from .peercheck import flat_options

#: Options of the node task that --task link does not take (destinations).
NOT_FOR_LINKS = ("shards", "checkpoint", "resume", "recipe", "save_embeddings", "export_best",
                 "log_csv", "tensorboard", "calibration", "lr_schedule", "clip_grad_norm",
                 "patience")
#: Options of --task link alone (destinations).
LINK_ONLY = ("decoder", "edge_split", "score_pairs")


def check_link_args(args: argparse.Namespace, env: Any) -> GridShape:
    """The grid of a link run; `UsageError` for what the link path does not take."""
    given = sorted(d for d in NOT_FOR_LINKS if d in args.explicit)
    if given:
        raise UsageError(f"--task link does not take --{given[0].replace('_', '-')} (the node "
                         "task's); see docs/link_prediction.md")
    if args.optimizer != "adam":
        raise UsageError("--task link trains with Adam; leave --optimizer out")
    if (args.dataset or "").startswith("ogbl-") and args.edge_split:
        raise UsageError(f"{args.dataset} has its own edge split; leave --edge-split out")
    check_link_outputs(args)
    if args.grid is not None:  # a GridShape, typed by the parser (None: auto)
        shape = args.grid
        if env is not None:
            shape.check_world(env.world_size, "the launcher started")
        return shape
    if env is not None and env.world_size > 1:
        raise UsageError(f"--task link takes --grid XxYxZ with X·Y·Z = {env.world_size}, the "
                         "ranks the launcher started (it has no --grid auto)")
    return GridShape.of("1x1x1")


def refuse_link_options(args: argparse.Namespace) -> None:
    """The node task given an option of --task link's alone: `UsageError` (one line)."""
    given = sorted(d for d in LINK_ONLY if d in args.explicit)
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')} is an option of --task link; add "
                         "--task link, or leave it out for node classification")


def check_link_outputs(args: argparse.Namespace) -> None:
    """Every output of a link run checked before any worker starts, as the node task's
    (`plexus.train.checks`): `UsageError` for one that cannot be written."""
    if args.log_json:
        check_log_path(args.log_json)
    if args.save_predictions:
        check_outputs_dir(args.save_predictions, "--save-predictions")
    if args.export:
        for path in (args.export, f"{args.export}.decoder.pt"):
            check_output_file(path, "--export")
    if args.score_pairs and not args.save_predictions:
        raise UsageError("--score-pairs writes its scores under --save-predictions DIR; give "
                         "both")


def link_options(args: argparse.Namespace, cfg: Any, shape: GridShape) -> dict[str, str]:
    """What every rank of one link job must share (proved to rank 0 by
    `plexus_partition.launch.group.prove_job`): the data, its split, the model, the decoder,
    the training and the grid."""
    from plexus import __version__  # noqa: PLC0415

    out = {"plexus": __version__, "task": "link", "grid": str(shape)}
    for name in ("dataset", "root", "features", "edge_split", "split_seed", "decoder", "seed",
                 "epochs", "lr", "eval_every", "score_pairs"):
        out[name] = repr(getattr(args, name))
    flat_options(cfg, "model", out)
    return out


def load_split(args: argparse.Namespace) -> tuple[LinkSplit, str]:
    """The run's pairs (an ogbl dataset's, or a random edge split of the dataset spec) and
    where they came from, in words."""
    if (args.dataset or "").startswith("ogbl-"):
        return load_ogbl(args.dataset, args.root), "the dataset's own split"
    graph = load_dataset(args.dataset or "cora", args.root, seed=args.split_seed or 0,
                         features=args.features)
    fractions, seed = args.edge_split or DEFAULT_EDGE_SPLIT, args.split_seed or 0
    return (random_edge_split(graph, fractions, seed=seed),
            f"random edge split {fractions}, --split-seed {seed}")


def _rank(grid, split: LinkSplit, cfg, opts: dict) -> dict | None:
    """Every rank: proves the job's secret and its run to rank 0, builds, trains, scores; rank 0
    prints and writes the pairs' scores, and returns the run's log (its epochs and summary)."""
    prove_job(opts["options"], f"the job at {os.environ.get('MASTER_ADDR', '?')}:"
                               f"{os.environ.get('MASTER_PORT', '?')}")
    model = link_model(split, grid, cfg, decoder=opts["decoder"], seed=opts["seed"],
                       decoder_layers=DECODER_LAYERS)
    quiet, every = opts["quiet"], opts["eval_every"]
    me = grid.rank == 0
    started = time.perf_counter()

    def speak(row: dict) -> None:
        if me and not quiet and any(k.startswith("val_") or k.startswith("test_") for k in row):
            print(epoch_line(row), flush=True)

    history = model.fit(opts["epochs"], lr=opts["lr"], eval_every=every, on_epoch=speak)
    train_time = time.perf_counter() - started
    scored = {f"{s}_{kind}": (pairs, model.scores(pairs))
              for s in ("val", "test") for kind, pairs in
              (("pos", split.pos[s]), ("neg", split.neg[s])) if pairs.shape[1]}
    if opts["given"] is not None:
        scored["given"] = (opts["given"], model.scores(opts["given"]))
    summary = {k: v for k, v in history[-1].items() if k != "epoch"}
    summary["epochs"] = len(history)
    best_by = BEST_BY["ogbl" if split.name.startswith("ogbl-") else "random"]
    summary.update(best_by=best_by, best=best_epoch(history, best_by), final=history[-1],
                   train_time_s=train_time, model=model_words(cfg, opts["decoder"],
                                                              DECODER_LAYERS),
                   dataset=split.name, grid=str(grid.shape), world_size=grid.world_size,
                   **link_figures(model, cfg, split, DECODER_LAYERS))
    if split.name.startswith("ogbl-") and "test_pos" in scored:
        summary["ogb"] = ogbl_evaluate(split.name, scored["test_pos"][1], scored["test_neg"][1])
    if opts["export"]:
        model.save_weights(opts["export"])
        model.save_decoder(str(opts["export"]) + ".decoder.pt")
    if not me:
        return None
    if opts["save_predictions"]:
        out = Path(opts["save_predictions"])
        for key, (pairs, scores) in scored.items():
            for what, value in (("pairs", pairs), ("scores", scores)):
                with atomic_file(out / f"{key}_{what}.npy") as f:
                    np.save(f, value)
    return {"task": "link", "dataset": split.name, "decoder": opts["decoder"],
            "grid": str(grid.shape), "epochs": history, "summary": summary}


def link_main(args: argparse.Namespace, env: Any) -> int:
    """``plexus-train --task link``; the exit status (bad input raises: the caller says it in
    one line, exit status 2)."""
    t0 = time.perf_counter()
    shape = check_link_args(args, env)
    split, origin = load_split(args)
    given = load_pairs(args.score_pairs, split.num_nodes) if args.score_pairs else None
    cfg = model_config(args)
    if not args.quiet and (env is None or env.rank == 0):
        print(first_line(split, origin, cfg, args.decoder, DECODER_LAYERS, shape.world_size,
                         str(shape), default_device(args.device).type), flush=True)
    opts = {"options": link_options(args, cfg, shape), "decoder": args.decoder,
            "seed": args.seed, "epochs": args.epochs, "lr": args.lr,
            "eval_every": args.eval_every or args.epochs, "quiet": args.quiet,
            "export": args.export, "save_predictions": args.save_predictions, "given": given}
    try:
        log = run_grid(_rank, split, cfg, opts, grid=shape, timeout_s=args.timeout)
    except LaunchError:  # under torchrun/srun: a peer refused, said by the caller (exit 2)
        raise
    except Exception as e:  # noqa: BLE001 — a worker's failure, said in one line
        print(error_line(e), file=sys.stderr, flush=True)
        return 1
    if log is None:  # a rank other than 0 of torchrun/srun's job: rank 0 reports
        return 0
    summary = log["summary"]
    summary["wall_time_s"] = time.perf_counter() - t0  # from this command's options on
    if args.log_json:
        with atomic_file(args.log_json, "w") as f:
            json.dump(log, f, indent=1)
    print("\n".join(summary_lines(summary)), flush=True)  # --quiet too, as the node task's
    return 0
