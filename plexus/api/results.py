"""Results of every node in the original node order: logits, predicted classes, and the last
hidden layer's output (embeddings), each a distributed block on every rank (`output_blocks`)
and gathered on rank 0 for small graphs (`gather_outputs`).

Every function is a collective (call it on every rank): it runs the model once without dropout.
Gathering returns numpy arrays on rank 0 (CPU torch tensors with ``as_tensor=True``), None on
the other ranks. Each block is sent once, by the ranks at coordinate 0 of the axes it is
replicated over, so rank 0 receives every node's row exactly once: memory O(N·width) on rank
0, which a large graph does not have (papers100M's logits alone are 76 GB). Gathering more than
`gather_limit` bytes raises `GatherTooLargeError` before anything moves;
`plexus.api.outputs.save_outputs` writes every rank's own rows into memory-mapped files instead
and has no such limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np
import torch
import torch.distributed as dist

from plexus_partition.model.layout import block
from plexus.core.units import format_bytes
from plexus_datasets.validate import available_bytes

from .model import GraphModel

#: What a result is: a numpy array, or a CPU tensor on request (``as_tensor=True``)
Array = Union[np.ndarray, torch.Tensor]

#: By default rank 0 may gather up to this fraction of its host's available memory.
GATHER_FRACTION = 0.5


class GatherTooLargeError(MemoryError):
    """The outputs asked for do not fit on one rank (a one-line message naming the size and the
    per-rank writer)."""


@dataclass(frozen=True)
class NodeBlock:
    """This rank's block of one per-node output: ``values`` (rows: the original nodes
    ``row_ids``, -1 for padding; columns ``col_start`` on, those past ``width`` are padding).
    ``speaks(coords)`` says which ranks hold the copy that counts: together they hold every row
    and column exactly once."""

    values: torch.Tensor
    row_ids: torch.Tensor
    col_start: int
    width: int
    speaks: Callable[[dict[str, int]], bool]

    @property
    def dtype(self) -> np.dtype:
        return torch.empty(0, dtype=self.values.dtype).numpy().dtype

    def real(self) -> tuple[np.ndarray, np.ndarray]:
        """(original ids, values) of this block's real rows and columns, as numpy."""
        ids = self.row_ids.cpu().numpy()
        values = self.values.detach().cpu().numpy()
        keep = ids >= 0
        cols = max(0, min(values.shape[1], self.width - self.col_start))
        return ids[keep], values[keep, :cols]


def _forward(model: GraphModel, embeddings: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
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
    return logits.float(), (seen[0] if seen else None)


def output_blocks(model: GraphModel, logits: bool = True, predictions: bool = True,
                  embeddings: bool = False) -> dict[str, NodeBlock]:
    """One forward pass without dropout; this rank's blocks of "pred" (int64, one column; for a
    multi-label task int8 0/1 per task, cut like the logits),
    "logits" (float32, C columns) and "embeddings" (float32, the last hidden layer's width), as
    asked. Collective (the predicted class needs the whole row of logits)."""
    out, hidden = _forward(model, embeddings)
    net, grid = model.net, model.grid
    last = net.plans[-1]
    blocks: dict[str, NodeBlock] = {}
    if predictions and model.multilabel:  # int8 0/1 per task, cut like the logits
        blocks["pred"] = NodeBlock(model.predict(out), model.node_ids, net.class_start,
                                   model.num_classes, lambda c: c[last.out_replicated] == 0)
    elif predictions:
        pred = model.predict(out).reshape(-1, 1)
        blocks["pred"] = NodeBlock(pred, model.node_ids, 0, 1,
                                   lambda c: c[last.out_replicated] == 0 and c[last.out_cols] == 0)
    if logits:
        blocks["logits"] = NodeBlock(out, model.node_ids, net.class_start, model.num_classes,
                                     lambda c: c[last.out_replicated] == 0)
    if embeddings:
        assert hidden is not None
        s = net.cfg.last_layer_stage
        plan = net.plans[s]
        cols = block(net.pad.widths_padded[s], grid.shape[plan.in_cols], grid.coords[plan.in_cols])
        blocks["embeddings"] = NodeBlock(hidden, net.input_ids[s], cols.start, net.widths[s],
                                         lambda c: c[plan.depth] == 0)
    return blocks


def output_bytes(model: GraphModel, logits: bool = True, predictions: bool = True,
                 embeddings: bool = False) -> int:
    """Bytes of the whole arrays asked for (every node's row), without running anything."""
    n = model.num_nodes
    total = (n * model.num_classes if model.multilabel else 8 * n) if predictions else 0
    total += 4 * n * model.num_classes if logits else 0
    total += 4 * n * model.net.widths[model.net.cfg.last_layer_stage] if embeddings else 0
    return total


def gather_limit(model: GraphModel) -> float:
    """The default bound on what one gather may bring to rank 0: `GATHER_FRACTION` of rank 0's
    available host memory, the same figure on every rank (collective)."""
    mine = torch.tensor([available_bytes() if model.grid.rank == 0 else 0.0],
                        dtype=torch.float64, device=model.grid.device)
    dist.broadcast(mine, src=0)
    return GATHER_FRACTION * float(mine)


def check_gather(model: GraphModel, names: list[str], needed: int,
                 max_bytes: float | None) -> None:
    """Raise `GatherTooLargeError` (on every rank alike) when gathering ``needed`` bytes exceeds
    ``max_bytes`` (None: `gather_limit`)."""
    limit = gather_limit(model) if max_bytes is None else float(max_bytes)
    if needed <= limit:
        return
    why = "" if max_bytes is not None else f" ({GATHER_FRACTION:g} of rank 0's available memory)"
    raise GatherTooLargeError(
        f"gathering {' and '.join(names)} of {model.num_nodes:,} nodes on rank 0 needs "
        f"{format_bytes(needed)}, more than the limit of {format_bytes(limit)}{why}; write every "
        "rank's own rows instead with plexus.save_outputs(model, DIRECTORY) (plexus-train "
        "--save-predictions DIRECTORY)")


def gather_rows(model: GraphModel, blk: NodeBlock) -> np.ndarray | None:
    """Assemble the N×``width`` array of ``blk`` on rank 0 from every rank's block (None on the
    other ranks). Blocks have the same shape on every rank."""
    grid = model.grid
    shape = grid.shape
    senders = [r for r in range(grid.world_size) if blk.speaks(shape.coords(r))]
    local = blk.values.detach().contiguous()
    meta = torch.cat([torch.tensor([blk.col_start], dtype=torch.int64, device=local.device),
                      blk.row_ids.to(torch.int64)])
    if grid.rank != 0:
        if grid.rank in senders:
            dist.send(meta, dst=0)
            dist.send(local, dst=0)
        return None
    out = np.zeros((model.num_nodes, blk.width), dtype=blk.dtype)
    meta_buf, buf = torch.empty_like(meta), torch.empty_like(local)  # the caller's stay intact
    for src in senders:
        if src != 0:
            dist.recv(meta_buf, src=grid.process_rank(src))
            dist.recv(buf, src=grid.process_rank(src))
        m, values = (meta, local) if src == 0 else (meta_buf, buf)
        got = NodeBlock(values, m[1:], int(m[0]), blk.width, blk.speaks)
        ids, rows = got.real()
        out[ids, got.col_start:got.col_start + rows.shape[1]] = rows
    return out


def gather_outputs(model: GraphModel, logits: bool = True, predictions: bool = True,
                   embeddings: bool = False, max_bytes: float | None = None,
                   as_tensor: bool = False) -> dict[str, Array] | None:
    """One forward pass without dropout; on rank 0 a dict with "pred" (int64, N), "logits"
    (float32, N×C) and "embeddings" (float32, N×hidden: the last hidden layer's output) as
    asked, rows in the original node order; None on other ranks. Collective. The arrays are
    numpy, or with ``as_tensor`` CPU torch tensors (sharing the same memory, no copy).

    Raises `GatherTooLargeError` on every rank, before the forward pass, when the arrays would
    take more than ``max_bytes`` on rank 0 (default: `gather_limit`)."""
    names = [n for n, asked in (("pred", predictions), ("logits", logits),
                                ("embeddings", embeddings)) if asked]
    check_gather(model, names, output_bytes(model, logits, predictions, embeddings), max_bytes)
    blocks = output_blocks(model, logits, predictions, embeddings)
    result = {name: gather_rows(model, blk) for name, blk in blocks.items()}
    if model.grid.rank != 0:
        return None
    if "pred" in result:
        result["pred"] = result["pred"][:, 0]  # type: ignore[index]
    if as_tensor:
        return {name: torch.from_numpy(np.ascontiguousarray(arr))  # type: ignore[arg-type]
                for name, arr in result.items()}
    return result  # type: ignore[return-value]


def gather_logits(model: GraphModel, max_bytes: float | None = None, as_tensor: bool = False
                  ) -> Array | None:
    """The N×C logits on rank 0 (original node order), None elsewhere; numpy, or a CPU tensor
    with ``as_tensor``. Collective."""
    out = gather_outputs(model, logits=True, predictions=False, max_bytes=max_bytes,
                         as_tensor=as_tensor)
    return None if out is None else out["logits"]


def gather_predictions(model: GraphModel, max_bytes: float | None = None,
                       as_tensor: bool = False) -> Array | None:
    """The predicted class of every node on rank 0 (original node order), None elsewhere;
    numpy, or a CPU tensor with ``as_tensor``. Collective."""
    out = gather_outputs(model, logits=False, predictions=True, max_bytes=max_bytes,
                         as_tensor=as_tensor)
    return None if out is None else out["pred"]


def gather_embeddings(model: GraphModel, max_bytes: float | None = None,
                      as_tensor: bool = False) -> Array | None:
    """The last hidden layer's output (after its activation) of every node on rank 0 (original
    node order), None elsewhere; numpy, or a CPU tensor with ``as_tensor``. Collective."""
    out = gather_outputs(model, logits=False, predictions=False, embeddings=True,
                         max_bytes=max_bytes, as_tensor=as_tensor)
    return None if out is None else out["embeddings"]
