"""``plexus-train``'s options: the flags, their help and defaults (the training loop's from
`TrainConfig`, the engine's from `EngineConfig` and `plexus.engine.flags`, the model's from
`plexus_partition.model.modelopts`), and which of them a command line gave (a recipe does not
override those)."""

from __future__ import annotations

import argparse
from typing import Sequence

from plexus.api.recipes import RECIPES
from plexus.api.training import BACKENDS, LR_SCHEDULES, OPTIMIZERS, TrainConfig
from plexus_partition.model.cli import ArgumentParser, given_options
from plexus_partition.model.layout import DEFAULT_PERMUTATION
from plexus_partition.model.ops import KINDS
from plexus_partition.model.topology import COLLECTIVES
from plexus_partition.model.modelopts import ModelOptionsText, add_model_options
from plexus.engine.flags import add_comm_options, add_precision_options
from plexus_datasets.spec import FEATURE_MODES
from plexus_partition import PERMUTATIONS
from plexus_partition.launch.group import DEFAULT_TIMEOUT_S
from plexus.runtime.options import add_device_options

from .cachedir import CACHE_ENV
from .cacheuse import MAX_GB_ENV
from .errors import PROG
from .heartbeat import DEFAULT_HEARTBEAT_S
from .options import typed_options
from .plan import CHECKPOINT_EVERY


class _TrainParser(ArgumentParser):
    """The plexus-train parser: its options come back typed (`plexus.train.options`)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, rest = super().parse_known_args(args, namespace)
        return typed_options(parsed, explicit_options(args)), rest


def build_parser() -> argparse.ArgumentParser:
    """All plexus-train options, parsed into typed values (`plexus.train.options`)."""
    return _add_options(_TrainParser)


def _add_options(parser: type[ArgumentParser]) -> ArgumentParser:
    kinds = ", ".join(f"{name}: {k.pyg_class}" for name, k in KINDS.items())
    p = parser(prog=PROG, description=f"Train a GNN (--model {kinds}) with 3D tensor "
                       "parallelism (Plexus). "
                       "Outside a launcher it starts X·Y·Z local workers; under torchrun or srun "
                       "it joins the job.")
    _job_options(p.add_argument_group("job"))
    _data_options(p.add_argument_group("data"))
    _link_options(p.add_argument_group("link prediction (--task link, docs/link_prediction.md)"))
    add_model_options(p, ModelOptionsText(store_note=", or the store's with --shards"))
    _training_options(p.add_argument_group("training"))
    _output_options(p.add_argument_group("checkpoints and output"))
    _result_options(p.add_argument_group("results and OGB recipes"))
    _engine_options(p.add_argument_group("engine (results never depend on these, except --dtype "
                                         "by rounding)"))
    return p


def _job_options(run: argparse._ArgumentGroup) -> None:
    """Where and how the job runs."""
    run.add_argument("--grid", metavar="XxYxZ|auto",
                     help="process grid, e.g. 2x2x4 (X·Y·Z ranks); 'auto' (the default, or the "
                          "store's grid with --shards) lets the performance model choose for "
                          "--world-size ranks and says what it chose")
    run.add_argument("--world-size", type=int, metavar="G",
                     help="number of ranks for --grid auto (default: the launcher's size; "
                          "outside one, one rank per local GPU, or per CPU core)")
    run.add_argument("--calibration", metavar="FILE",
                     help="this machine's rates for --grid auto (plexus-bench calibrate; "
                          "default: $PLEXUS_CALIBRATION if set, else the built-in GPU rates, "
                          "said as uncalibrated)")
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                     help="process-group timeout: how long a collective may wait (default "
                          f"{DEFAULT_TIMEOUT_S:g})")
    add_device_options(run)  # the run's first line says how many threads each rank uses
    run.add_argument("--force", action="store_true",
                     help="run even when the performance model predicts more memory per rank "
                          "than is available")
    # Tests of failure handling: KIND:RANK:EPOCH makes one rank raise, SIGKILL itself or hang.
    run.add_argument("--inject-fault", metavar="KIND:RANK:EPOCH", help=argparse.SUPPRESS)


def _link_options(link: argparse._ArgumentGroup) -> None:
    """The task, and link prediction's decoder and edge split."""
    link.add_argument("--task", choices=("node", "link"), default="node",
                      help="node classification (the default), or link prediction: the model "
                           "is the encoder, pairs scored by --decoder")
    link.add_argument("--decoder", choices=("dot", "mlp"), default="mlp",
                      help="--task link: the pair decoder, the dot product of the two "
                           "embeddings or OGB's LinkPredictor on their product (the default)")
    link.add_argument("--edge-split", metavar="TRAIN,VAL,TEST", default=None,
                      help="--task link: a random split of the graph's edges (default "
                           "0.85,0.05,0.1; an ogbl-* dataset has its own), seeded by "
                           "--split-seed")
    link.add_argument("--score-pairs", metavar="FILE.npy", default=None,
                      help="--task link with --save-predictions: also score these pairs (a .npy "
                           "of P x 2 node ids, OGB's layout) into DIR/given_{pairs,scores}.npy")


def _data_options(data: argparse._ArgumentGroup) -> None:
    """The graph, its store and the cache of stores."""
    data.add_argument("--dataset", metavar="SPEC",
                      help="dataset spec: cora (embedded; the default), citeseer, pubmed, "
                           "ogbn-arxiv, ogbn-products, ogbn-papers100M, npz:PATH, mtx:PATH, "
                           "edgelist:PATH, planetoid:DIR, rmat:scale=S,...")
    data.add_argument("--root", metavar="DIR", help="directory holding the dataset's files")
    data.add_argument("--split-seed", type=int, default=None, metavar="S",
                      help="seed of what the dataset's files lack (a random 60/20/20 split, "
                           "stand-in features or labels) and of synthetic graphs, apart from "
                           "the weights' --seed (default: --seed); official splits never change")
    data.add_argument("--features", choices=FEATURE_MODES, default="auto",
                      help="node features: auto (the default: each format's convention, "
                           "row-normalized for Planetoid's cora/citeseer/pubmed as Kipf & "
                           "Welling, the files' values for npz, mtx, OGB, R-MAT...), raw, or row "
                           "(unit L1 norm per node); said in the run's first line")
    data.add_argument("--shards", metavar="DIR",
                      help="read this rank's shard from a plexus-partition store instead of "
                           "loading and cutting the dataset; its manifest fixes the dataset, "
                           "grid, layers, orders and permutation")
    data.add_argument("--cache", metavar="DIR",
                      help="where --dataset runs keep the shard stores they partition the graph "
                           "into once (reused while the graph's files, grid, layers, orders, "
                           f"permutation, seed and aggregation match; default ${CACHE_ENV}, "
                           "else ~/.cache/plexus/stores); a 1x1x1 run uses it only when given")
    data.add_argument("--cache-max-gb", type=float, metavar="G",
                      help="cap the cache at G GiB: once a run has its store, the least "
                           "recently used stores that no run holds are removed (default "
                           f"${MAX_GB_ENV}, else no cap)")
    data.add_argument("--cache-list", action="store_true",
                      help="list the cache's stores and converted graphs (size, last use, in "
                           "use) and exit")
    data.add_argument("--cache-clean", action="store_true",
                      help="remove what the cache holds that no run is using (with "
                           "--cache-max-gb: only the least recently used, down to the cap) "
                           "and exit")
    data.add_argument("--no-cache", action="store_true",
                      help="every rank loads the whole dataset and cuts its own shard (no "
                           "store on disk)")
    data.add_argument("--perm", choices=PERMUTATIONS, default=None,
                      help=f"load-balancing node permutation (default {DEFAULT_PERMUTATION}, or the "
                           "store's with --shards); results do not depend on it")


def _training_options(train: argparse._ArgumentGroup) -> None:
    """The training loop; every default is `TrainConfig`'s."""
    d = TrainConfig()
    train.add_argument("--epochs", type=int, default=d.epochs,
                       help=f"training epochs, full batch (default {d.epochs})")
    train.add_argument("--lr", type=float, default=d.lr,
                       help=f"learning rate (default {d.lr}; the start of a --lr-schedule)")
    train.add_argument("--weight-decay", type=float, default=d.weight_decay,
                       help=f"L2 weight decay (default {d.weight_decay:g})")
    train.add_argument("--weight-decay-on", choices=("all", "first"), default=d.weight_decay_scope,
                       help="decay every parameter (default) or the first layer's only "
                            "(Kipf & Welling)")
    train.add_argument("--seed", type=int, default=d.seed,
                       help=f"seed of weights, dropout masks and the permutation, and of the "
                            f"dataset's stand-ins unless --split-seed (default "
                            f"{d.seed})")
    train.add_argument("--eval-every", type=int, default=d.eval_every, metavar="N",
                       help=f"evaluate every N epochs (default {d.eval_every}; 0: only at the "
                            "end)")
    train.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer,
                       help=f"torch.optim's Adam, AdamW (decoupled weight decay) or SGD "
                            f"(default {d.optimizer})")
    train.add_argument("--momentum", type=float, default=d.momentum,
                       help=f"SGD's momentum (default {d.momentum})")
    train.add_argument("--clip-grad-norm", type=float, default=d.clip_grad_norm, metavar="MAX",
                       help="scale the gradient down to this 2-norm when above it (the norm of "
                            "the whole model's gradient: the same on every grid)")
    train.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=d.lr_schedule,
                       help="cosine (to --lr-min over --epochs), step (times --lr-gamma every "
                            "--lr-step epochs), plateau (times --lr-gamma after --lr-patience "
                            f"evaluations without a better validation metric; default "
                            f"{d.lr_schedule})")
    train.add_argument("--lr-step", type=int, default=d.lr_step, metavar="N",
                       help=f"step schedule's period in epochs (default {d.lr_step})")
    train.add_argument("--lr-gamma", type=float, default=d.lr_gamma,
                       help=f"step and plateau schedules' factor (default {d.lr_gamma})")
    train.add_argument("--lr-patience", type=int, default=d.lr_patience, metavar="N",
                       help=f"plateau schedule's patience in evaluations (default "
                            f"{d.lr_patience})")
    train.add_argument("--lr-min", type=float, default=d.lr_min,
                       help=f"cosine schedule's last rate, plateau's floor (default {d.lr_min})")
    train.add_argument("--patience", type=int, default=d.patience, metavar="N",
                       help="early stopping: stop after N epochs without a better validation "
                            "metric; the best epoch's metrics are reported (and its weights "
                            "exported with --export-best)")


def _output_options(out: argparse._ArgumentGroup) -> None:
    """Checkpoints and logs."""
    out.add_argument("--checkpoint", metavar="DIR",
                     help="save DIR/checkpoint.pt (grid-independent) every --checkpoint-every "
                          "epochs and at the end")
    out.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                     help=f"epochs between checkpoints (default {CHECKPOINT_EVERY})")
    out.add_argument("--resume", nargs="?", const=True, default=False, metavar="auto",
                     help="continue from DIR/checkpoint.pt of --checkpoint (any grid); "
                          "'--resume auto' continues if that file exists and starts afresh if "
                          "not (a requeued batch job needs no shell guard)")
    out.add_argument("--log-json", metavar="FILE",
                     help="JSON lines: one object per epoch, then a summary object")
    out.add_argument("--log-csv", metavar="FILE",
                     help="CSV, one row per epoch (loss, accuracies, step and evaluation time), "
                          "flushed every epoch: tail -f FILE follows the run")
    out.add_argument("--tensorboard", metavar="DIR",
                     help="TensorBoard scalars in DIR: loss, accuracies, epoch time, time per "
                          "timer (needs the tensorboard package; without it, one note)")
    out.add_argument("--quiet", action="store_true",
                     help="print only the summary, and a heartbeat line (epoch, rate, ETA) "
                          "every --heartbeat seconds")
    out.add_argument("--verbose", action="store_true",
                     help="the summary in full: the time per rank of every timer, the bytes per "
                          "axis and of each collective (the --log-json summary always has "
                          "them)")
    out.add_argument("--heartbeat", type=float, default=DEFAULT_HEARTBEAT_S, metavar="SECONDS",
                     help="with --quiet: the least time between heartbeat lines, each at the "
                          "first epoch's end after it (default %(default)g; 0: none)")


def _result_options(res: argparse._ArgumentGroup) -> None:
    """Per-node outputs, weights and the OGB recipes."""
    res.add_argument("--save-predictions", metavar="DIR",
                     help="write the final model's predicted class of every node (DIR/pred.npy, "
                          "original node order) and its logits (DIR/logits.npy); every rank "
                          "writes its own rows (plexus.api.load_outputs reads them)")
    res.add_argument("--save-embeddings", action="store_true",
                     help="add the last hidden layer's output (DIR/embeddings.npy) to "
                          "--save-predictions")
    res.add_argument("--export", metavar="FILE.pt",
                     help="write the unsharded weights under the parameter names of the matching "
                          "PyG model (a ModuleList 'convs' of the kind's PyG layer) with the model "
                          "configuration; loads with torch.load(weights_only=True)")
    res.add_argument("--export-best", action="store_true",
                     help="--export the weights of the best-validation epoch instead of the "
                          "final ones")
    res.add_argument("--symmetrize", action="store_true",
                     help="make the graph undirected (every edge both ways) before training, as "
                          "OGB's arxiv example does")
    res.add_argument("--recipe", choices=sorted(RECIPES), metavar="NAME",
                     help="settings of the official OGB examples (sources: "
                          "ogb/examples/nodeproppred/arxiv/gnn.py and products/gnn.py): "
                          "ogbn-arxiv-gcn (3 layers, hidden 256, BatchNorm, dropout 0.5 on hidden "
                          "layers, lr 0.01, no weight decay, 500 epochs, --symmetrize), "
                          "ogbn-products-gcn and ogbn-products-sage (the same without BatchNorm, "
                          "300 epochs), ogbn-arxiv-gat (the OGB leaderboard's GAT, DGL's "
                          "ogbn-arxiv/gat.py: 3 layers, 3 heads of 250, BatchNorm, dropout 0.75, "
                          "lr 0.002, 2000 epochs, --symmetrize); and of the Plexus paper "
                          "(hpcgroup/plexus examples/train.py): ogbn-papers100M-gcn (3 layers, hidden 128, no "
                          "bias, no dropout, learnable input features, lr 0.003, no weight "
                          "decay, 10 epochs); it also picks the dataset; flags given explicitly "
                          "win")


def _engine_options(eng: argparse._ArgumentGroup) -> None:
    """How the engine runs (results never depend on these, except --dtype by rounding)."""
    eng.add_argument("--spmm", choices=BACKENDS, default="torch",
                     help="SpMM backend (default torch; scipy: CPU only)")
    eng.add_argument("--agg-chunks", type=int, default=1, metavar="K",
                     help="cut each aggregation into K row chunks (default 1)")
    eng.add_argument("--overlap", action="store_true",
                     help="overlap each chunk's all-reduce with the next chunk's SpMM")
    eng.add_argument("--tune-gemms", action="store_true",
                     help="time the GEMM formulations once per call site and keep the fastest "
                          "(runs then differ in the last bits; default: a fixed rule by shape)")
    eng.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True,
                     help="large CPU tensors on transparent huge pages: far fewer page faults "
                          "(default on)")
    eng.add_argument("--no-timers", dest="timers", action="store_false",
                     help="do not time kernels and collectives (no timing breakdown)")
    add_precision_options(eng)
    add_comm_options(eng)
    eng.add_argument("--gpus-per-node", type=int, metavar="K",
                     help="ranks sit on nodes of K, numbered node by node (rank r on node "
                          "r // K): the ledger counts bytes inside a node (intra) and across "
                          "nodes (inter), and --collectives may split an axis by node; on CPU "
                          "ranks a virtual placement (default: the launcher's LOCAL_WORLD_SIZE "
                          "under torchrun/srun, else one node)")
    eng.add_argument("--placement", default="auto", metavar="auto|launcher|XxYxZ",
                     help="which block of the grid each node holds: XxYxZ ranks of x, y, z "
                          "(their product --gpus-per-node); launcher: consecutive ranks, z "
                          "first; auto (default): the block the performance model prices "
                          "fastest where --calibration has link classes, else the launcher's")
    eng.add_argument("--collectives", choices=COLLECTIVES, default="auto",
                     help="flat: every collective a ring over its axis; hierarchical: the "
                          "sums and gathers of an axis with several ranks on each of several "
                          "nodes in two levels (within the node, then across the nodes on 1/k "
                          "of the data); auto (default): hierarchical where an axis splits so")
    eng.add_argument("--keep-input", choices=("auto", "on", "off"), default="auto",
                     help="layer 0's fixed input features gathered once at set-up and kept "
                          "(on), or gathered in every forward (off); auto: kept when they do "
                          "not learn and fit the memory budget of a pass (default auto)")




def explicit_options(argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options given on the command line (a recipe does not override
    them): the tools' one rule (`given_options`), on the untyped parser (the typed one asks
    this as it parses)."""
    return given_options(_add_options(ArgumentParser), None if argv is None else list(argv))

