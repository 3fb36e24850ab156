"""Results on rank 0 in the original node order: logits, predicted classes, and the last hidden
layer's output (embeddings), gathered from their distributed blocks.

Every function is a collective (call it on every rank): it runs the model once without dropout
and returns numpy arrays on rank 0, None on the other ranks. Each block is sent once, by the
ranks at coordinate 0 of the axes it is replicated over, so rank 0 receives every node's row
exactly once (memory O(N·width) on rank 0 only).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from plexus.core.layout import block

from .model import GraphModel


def gather_rows(model: GraphModel, local: torch.Tensor, row_ids: torch.Tensor, col_start: int,
                width: int, speaks: Callable[[dict[str, int]], bool]) -> np.ndarray | None:
    """Assemble an N×``width`` array on rank 0 from every rank's ``local`` block, whose rows are
    the original nodes ``row_ids`` (-1: padding) and whose columns start at ``col_start``
    (columns past ``width`` are padding). ``speaks(coords)`` says which ranks send: together
    they must hold every row and column once. Blocks have the same shape on every rank."""
    grid = model.grid
    shape = grid.shape
    senders = [r for r in range(grid.world_size) if speaks(shape.coords(r))]
    local = local.detach().contiguous()
    meta = torch.cat([torch.tensor([col_start], dtype=torch.int64, device=local.device),
                      row_ids.to(torch.int64)])
    if grid.rank != 0:
        if grid.rank in senders:
            dist.send(meta, dst=0)
            dist.send(local, dst=0)
        return None
    dtype = torch.empty(0, dtype=local.dtype).numpy().dtype
    out = np.zeros((model.num_nodes, width), dtype=dtype)
    meta_buf, buf = torch.empty_like(meta), torch.empty_like(local)  # the caller's stay intact
    for src in senders:
        if src != 0:
            dist.recv(meta_buf, src=src)
            dist.recv(buf, src=src)
        m, block_values = (meta, local) if src == 0 else (meta_buf, buf)
        ids = m[1:].cpu().numpy()
        start = int(m[0])
        values = block_values.cpu().numpy()
        real = ids >= 0
        cols = max(0, min(values.shape[1], width - start))
        out[ids[real], start:start + cols] = values[real, :cols]
    return out


def _logits_and_embedding(model: GraphModel, embeddings: bool
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits without dropout and, if asked, the input of the last layer (the last hidden
    layer's output, after its activation)."""
    net = model.net
    if embeddings and net.cfg.num_layers < 2:
        raise ValueError("a 1-layer model has no hidden layer: no embeddings to gather")
    seen: list[torch.Tensor] = []
    last = net.layers[net.cfg.last_layer_stage]  # its input is the last hidden layer's output
    # float32 whatever the engine's compute precision (numpy has no bfloat16)
    hook = (last.register_forward_pre_hook(lambda _m, args: seen.append(args[0].float()))
            if embeddings else None)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model()
    finally:
        model.train(was_training)
        if hook is not None:
            hook.remove()
    return logits, (seen[0] if seen else None)


def _gather_logits(model: GraphModel, logits: torch.Tensor) -> np.ndarray | None:
    net = model.net
    last = net.plans[-1]
    return gather_rows(model, logits, model.node_ids, net.class_start, model.num_classes,
                       lambda c: c[last.out_replicated] == 0)


def _gather_predictions(model: GraphModel, logits: torch.Tensor) -> np.ndarray | None:
    last = model.net.plans[-1]
    pred = model.predict(logits).reshape(-1, 1)
    out = gather_rows(model, pred, model.node_ids, 0, 1,
                      lambda c: c[last.out_replicated] == 0 and c[last.out_cols] == 0)
    return None if out is None else out[:, 0]


def _gather_embedding(model: GraphModel, hidden: torch.Tensor) -> np.ndarray | None:
    net, grid = model.net, model.grid
    l = net.cfg.last_layer_stage
    plan = net.plans[l]
    cols = block(net.pad.widths_padded[l], grid.shape[plan.in_cols], grid.coords[plan.in_cols])
    return gather_rows(model, hidden, net.input_ids[l], cols.start, net.widths[l],
                       lambda c: c[plan.depth] == 0)


def gather_outputs(model: GraphModel, logits: bool = True, predictions: bool = True,
                   embeddings: bool = False) -> dict[str, np.ndarray] | None:
    """One forward pass without dropout; on rank 0 a dict with "pred" (int64, N), "logits"
    (float32, N×C) and "embeddings" (float32, N×hidden: the last hidden layer's output) as
    asked, rows in the original node order; None on other ranks. Collective."""
    out, hidden = _logits_and_embedding(model, embeddings)
    result = {}
    if predictions:
        result["pred"] = _gather_predictions(model, out)
    if logits:
        result["logits"] = _gather_logits(model, out)
    if embeddings:
        result["embeddings"] = _gather_embedding(model, hidden)  # type: ignore[arg-type]
    return result if model.grid.rank == 0 else None


def gather_logits(model: GraphModel) -> np.ndarray | None:
    """The N×C logits on rank 0 (original node order), None elsewhere. Collective."""
    out = gather_outputs(model, logits=True, predictions=False)
    return None if out is None else out["logits"]


def gather_predictions(model: GraphModel) -> np.ndarray | None:
    """The predicted class of every node on rank 0 (original node order), None elsewhere.
    Collective."""
    out = gather_outputs(model, logits=False, predictions=True)
    return None if out is None else out["pred"]


def gather_embeddings(model: GraphModel) -> np.ndarray | None:
    """The last hidden layer's output (after its activation) of every node on rank 0 (original
    node order), None elsewhere. Collective."""
    out = gather_outputs(model, logits=False, predictions=False, embeddings=True)
    return None if out is None else out["embeddings"]
