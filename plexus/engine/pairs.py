"""Pair scores for link prediction, where the embeddings live: the negatives each step draws, the
decoders (a dot product; OGB's ``LinkPredictor``, an MLP on h_u ⊙ h_v), and the pair operator on
the grid.

The encoder's output H (N × d) is cut like a node model's logits: rows over the last stage's
``out_rows`` axis R, columns over its ``out_cols`` axis C, replicated over the third. For a batch
of P pairs with E distinct end nodes, every rank takes the rows of those ends it holds (zero
rows for the others) and sums the E × d/|C| block over R: each rank of R then holds the ends'
rows of its column block, and no rank more than the batch's ends. The dot decoder sums
h_u ⊙ h_v over the block's columns and all-reduces the P partial sums over C; the MLP gathers the
P × d/|C| blocks of h_u ⊙ h_v over C into the full P × d products and runs on every rank alike.
Every rank then holds the batch's scores (the loss and the metrics need no further collective),
and the backward needs none: the scores are the same on every rank, so the gradient of a
rank's block is its own part of theirs (`plexus_partition.model.pairs` declares the
collectives and their sizes; the ledger records them as the loss's, or the evaluation's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from plexus.core.maskhash import GOLDEN, M32
from plexus_partition.model.pairs import DECODERS, DECODER_LAYER

from .comm import Comm
from .masks import dropout, fmix, key

NEGATIVE_STREAM = 0x11E6  # the negatives' extra key part (the masks' streams differ)


def negative_pairs(seed: int, step: int, num_nodes: int, count: int, start: int = 0,
                   device: torch.device | None = None) -> torch.Tensor:
    """Negatives ``start`` .. ``start + count - 1`` of step ``step`` (2 × count, int64): pair i
    is (fmix(i ⊕ k_src) mod N, fmix(i·φ ⊕ k_dst) mod N) with keys mixed from (seed, step): uniform
    over the N² ordered pairs (to a bias below N/2³²), the same on every grid and in the serial
    model, and any slice of them drawn on its own (batches)."""
    k_src = key(seed, step, NEGATIVE_STREAM)
    k_dst = key(k_src, 1)
    i = torch.arange(start, start + count, dtype=torch.int64, device=device)
    src = fmix((i & M32) ^ k_src) % num_nodes
    dst = fmix((i * GOLDEN & M32) ^ k_dst) % num_nodes
    return torch.stack([src, dst])


def linear_init(layer: nn.Linear, gen: torch.Generator) -> None:
    """``layer``'s weight and bias uniform in ±1/√fan_in (torch's ``Linear`` default), drawn
    from ``gen``: the same numbers on every rank."""
    bound = 1.0 / layer.in_features ** 0.5
    with torch.no_grad():
        for t in (layer.weight, layer.bias):
            t.copy_((torch.rand(t.shape, generator=gen) * 2 - 1) * bound)


class LinkDecoder(nn.Module):
    """A pair's logit from h_u ⊙ h_v: "dot" sums it; "mlp" is OGB's ``LinkPredictor`` (its
    ``lins``: ``layers`` Linear layers, ReLU and dropout between them, one output) without its
    final sigmoid, so its state dict loads into that module. The MLP's parameters are drawn from
    ``seed`` + 2 (`linear_init`, layer by layer), replicated on every rank; its dropout masks
    are the engine's hash of (seed, step, layer, the pair's index in its step, column)."""

    def __init__(self, kind: str, channels: int, hidden: int = 64, layers: int = 3,
                 dropout: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        if kind not in DECODERS:
            raise ValueError(f"unknown decoder {kind!r}; use one of {', '.join(DECODERS)}")
        if kind == "mlp" and layers < 1:
            raise ValueError(f"an MLP decoder has at least one layer, got {layers}")
        self.kind, self.channels, self.p, self.seed = kind, int(channels), float(dropout), seed
        widths = [channels] + [hidden] * (layers - 1) + [1] if kind == "mlp" else []
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        gen = torch.Generator().manual_seed(seed + 2)
        for lin in self.lins:
            linear_init(lin, gen)

    @property
    def partial_sums(self) -> bool:
        """Whether a pair's logit is a sum over columns (a column block's part sums over C)."""
        return self.kind == "dot"

    def forward(self, x: torch.Tensor, pair_ids: torch.Tensor | None = None,
                step: int = 0) -> torch.Tensor:
        """The logits (P,) of products ``x`` (P × d); ``pair_ids``: each pair's index in its
        step (the dropout masks' rows; training only)."""
        if self.kind == "dot":
            return x.sum(dim=1)
        for i, lin in enumerate(self.lins[:-1]):
            x = F.relu(lin(x))
            if self.training and self.p > 0:
                x = dropout(x, self.seed, step, DECODER_LAYER + i, pair_ids, 0, self.p)
        return self.lins[-1](x).squeeze(1)


def serial_products(H: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """h_u ⊙ h_v for the pairs (2 × P) of a full embedding matrix."""
    return H[pairs[0]] * H[pairs[1]]


class _GatherColumns(torch.autograd.Function):
    """The column blocks of every rank of ``axis`` side by side (an all-gather of the
    transposed blocks); backward: this rank's columns of the gradient (every rank computes the
    same function of the gathered matrix)."""

    @staticmethod
    def forward(ctx, x, comm: Comm, axis: str):  # noqa: D102
        ctx.width, ctx.at = x.shape[1], comm.grid.coords[axis]
        return comm.raw_all_gather(x.t().contiguous(), axis).t()

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        w = ctx.width
        return grad[:, ctx.at * w:(ctx.at + 1) * w], None, None


class GridPairs:
    """The pair operator on one rank of the grid, for a model whose output block has rows
    ``out_ids`` (original node ids, -1 padding) cut over ``rows_axis`` and ``width`` columns
    starting at ``col_start`` (``channels`` real in all) cut over ``cols_axis``."""

    def __init__(self, comm: Comm, out_ids: torch.Tensor, rows_axis: str, cols_axis: str,
                 col_start: int, width: int, channels: int) -> None:
        self.comm, self.rows_axis, self.cols_axis = comm, rows_axis, cols_axis
        ids = out_ids.to(torch.int64)
        self.sorted_ids, self.order = torch.sort(ids)
        self.width, self.channels = width, channels
        self.real = max(0, min(width, channels - col_start))  # real columns of this block

    @classmethod
    def of_model(cls, model) -> "GridPairs":
        """The operator on a `plexus.engine.model.GridModel`'s output block."""
        last, grid = model.plans[-1], model.comm.grid
        width = model.pad.widths_padded[-1] // grid.shape[last.out_cols]
        ids = torch.from_numpy(model.out_ids[-1]).to(grid.device)
        return cls(model.comm, ids, last.out_rows, last.out_cols, model.class_start, width,
                   model.num_classes)

    def ends(self, H: torch.Tensor, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The E distinct end nodes' rows of this rank's column block (E × width, summed over
        the row axis: every rank of it gets them) and each pair end's index among them (2 × P)."""
        ends, inverse = torch.unique(pairs.reshape(-1), return_inverse=True)
        at = torch.searchsorted(self.sorted_ids, ends).clamp_(max=max(len(self.sorted_ids) - 1, 0))
        here = (self.sorted_ids[at] == ends if len(self.sorted_ids) else
            torch.zeros_like(ends, dtype=torch.bool))
        rows = (H.index_select(0, self.order[at]) if len(self.sorted_ids) else
            H.new_zeros((len(ends), H.shape[1])))
        rows = rows * here[:, None].to(rows.dtype)
        return self.comm.all_reduce(rows, self.rows_axis), inverse.reshape(2, -1)

    def logits(self, H: torch.Tensor, pairs: torch.Tensor, decoder: LinkDecoder,
               pair_ids: torch.Tensor | None = None, step: int = 0) -> torch.Tensor:
        """The decoder's logits (P,) of ``pairs`` (2 × P original ids), the same on every rank."""
        rows, at = self.ends(H, pairs)
        x = rows[at[0]] * rows[at[1]]
        if decoder.partial_sums:
            return self.comm.all_reduce(x[:, :self.real].sum(dim=1), self.cols_axis)
        if self.comm.grid.size(self.cols_axis) > 1:
            x = _GatherColumns.apply(x, self.comm, self.cols_axis)
        return decoder(x[:, :self.channels], pair_ids, step)


def pair_loss(pos: torch.Tensor, neg: torch.Tensor, num_pos: int, num_neg: int) -> torch.Tensor:
    """The part of a step's loss of these positive and negative logits: Σ softplus(−pos)/num_pos
    + Σ softplus(neg)/num_neg, binary cross-entropy with logits (OGB's examples'
    −log σ(pos) − log(1 − σ(neg)), each averaged over its pairs)."""
    return F.softplus(-pos).sum() / max(num_pos, 1) + F.softplus(neg).sum() / max(num_neg, 1)
