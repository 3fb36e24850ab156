"""The words of a ``plexus-train --task link`` run, as the node task has them
(`plexus.train.runlog`): the first line (the graph, its pairs and where they came from, the
grid, the encoder and the decoder) and the summary (the best validation epoch, the final one,
OGB's metric, the wall time, memory per rank beside the model's prediction, and the bytes every
rank sent). `link_figures` measures on the ranks what the summary reports."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist

from plexus_datasets.graph import gcn_nnz
from plexus_datasets.linksplit import LinkSplit
from plexus_partition.model.model import ModelConfig
from plexus.core.units import format_bytes, format_seconds
from plexus.perfmodel.linkcost import link_cost, link_memory
from plexus.perfmodel.spec import ModelSpec
from plexus.runtime.memstats import peak_rss_bytes

from .errors import PROG
from .report import reduce_ledger
from .runlog import format_memory, plural

#: The metric that picks the best validation epoch: an ogbl dataset's Hits@50 (OGB's examples
#: select on Hits), a random split's ROC-AUC (PyG's link-prediction example's).
BEST_BY = {"ogbl": "val_hits@50", "random": "val_auc"}


def model_words(cfg: ModelConfig, decoder: str, decoder_layers: int) -> str:
    """``gcn 2x16 encoder, mlp decoder (3 layers)``."""
    dec = f"{decoder} decoder" + (f" ({plural(decoder_layers, 'layer')})" if decoder == "mlp"
                                  else "")
    return f"{cfg.kind} {cfg.num_layers}x{cfg.hidden} encoder, {dec}"


def first_line(split: LinkSplit, origin: str, cfg: ModelConfig, decoder: str,
               decoder_layers: int, world: int, grid: str, device: str) -> str:
    """The run's first line; ``origin`` says where the pairs came from."""
    g = split.graph
    pairs = ", ".join(f"{s} {split.pos[s].shape[1]:,}" for s in ("train", "val", "test"))
    return (f"{PROG}: {split.name} link prediction (N={g.num_nodes}, F={g.num_features}; "
            f"positive pairs {pairs}: {origin}) on grid {grid} ({plural(world, 'rank')}, "
            f"{device}), {model_words(cfg, decoder, decoder_layers)}")


def best_epoch(history: Sequence[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The evaluated epoch with the highest ``key`` (the first of equals), or None."""
    scored = [row for row in history if key in row]
    return max(scored, key=lambda row: row[key]) if scored else None


def link_figures(model: Any, cfg: ModelConfig, split: LinkSplit, decoder_layers: int) -> dict:
    """What every rank measured (collective): the bytes all ranks sent per axis and the most
    one rank sent, every rank's peak RSS, and the memory model's training peak for the rank
    that holds the most (`plexus.perfmodel.linkcost`: the encoder with the pair buffers)."""
    grid = model.encoder.grid
    total, most = reduce_ledger(model.task.encoder.comm.ledger, grid.device)
    mine = torch.tensor([peak_rss_bytes()], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    task, shape = model.task, dict(grid.shape.items())
    eg = split.encoder_graph(task.decoder.channels)
    spec = ModelSpec(eg.num_nodes, gcn_nnz(eg), eg.num_features, task.decoder.channels, cfg)
    hidden = task.decoder.lins[0].out_features if task.decoder.lins else 0
    orders = [p.order for p in task.encoder.plans]
    cost = link_cost(spec, shape, orders, split.pos["train"].shape[1], task.decoder.kind,
                     hidden, decoder_layers, budget=task.budget)
    predicted = link_memory(spec, shape, orders, cost).total
    return {"comm_bytes": total, "comm_bytes_max_rank": most,
            "memory": {"peak_rss_bytes": [int(t) for t in torch.cat(every).tolist()],
                       "predicted_bytes": float(predicted)}}


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The summary of a link run's summary dict (its ``--log-json`` summary)."""
    lines = [f"summary: {s['model']} on {s['dataset']}, grid {s['grid']} "
             f"({plural(s['world_size'], 'rank')}), {plural(s['epochs'], 'epoch')}"]
    best = s.get("best")
    if best is not None:
        lines.append(f"  best validation (by {s['best_by'].replace('_', ' ')}): epoch "
                     f"{best['epoch']}  {_metrics(best)}")
    final = s.get("final", {})
    lines.append(f"  final epoch {final.get('epoch')}: loss {final.get('loss', 0.0):.4f}  "
                 f"{_metrics(final)}".rstrip())
    if s.get("ogb") is not None:
        ogb = s["ogb"]
        lines.append(f"  OGB evaluator ({ogb['name']}): test {ogb['metric']} {ogb['value']:.4f}")
    if s.get("wall_time_s") is not None:
        lines.append(f"  wall time: {format_seconds(s['wall_time_s'])} (training and its "
                     f"evaluations {format_seconds(s['train_time_s'])} on rank 0)")
    lines += format_memory(s.get("memory") or {})
    if s.get("comm_bytes") is not None:
        lines.append(f"  communication: {format_bytes(sum(s['comm_bytes'].values()))} sent, "
                     "all ranks")
    return lines


def epoch_line(row: dict[str, Any]) -> str:
    """``epoch   10  loss 0.4815  val auc 0.9012 hits@50 0.5521  test auc ...``."""
    return f"epoch {row['epoch']:4d}  loss {row['loss']:.4f}  {_metrics(row)}".rstrip()


def _metrics(row: dict[str, Any]) -> str:
    return "  ".join(f"{split} " + " ".join(f"{k[len(split) + 1:]} {row[k]:.4f}"
                                            for k in row if k.startswith(f"{split}_"))
                     for split in ("val", "test") if any(k.startswith(f"{split}_") for k in row))
