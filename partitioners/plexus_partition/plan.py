"""Cut a graph into the blocks one rank of an X×Y×Z grid needs (in memory).

For every layer the rank holds the block of Â_k (k = the layer's permuted adjacency) at
(rows cut by the layer's ``a_rows`` axis, columns cut by its ``a_cols`` axis); layers with the same
(k, a_rows, a_cols) share one block. Layer 0's input features are stored cut over depth as well.
Labels and masks are those of the last layer's output rows. Padded rows/columns are zeros, and
padded nodes carry label -1 and no mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import LayerPlan, block, layer_plans, pad_to, padding
from plexus_datasets.graph import Graph, normalized_symmetric

from .permutations import Permutation, make_permutation
from .rowsets import touched_columns, touched_rows

MASKS = ("train", "val", "test")


def block_key(plan: LayerPlan) -> str:
    """Name of the Â block a layer multiplies by; equal names share one block."""
    return f"A{plan.adj}:{plan.a_rows}{plan.a_cols}"


def row_order(perm: Permutation, k: int) -> np.ndarray:
    """Order of Â_k's rows (p1 for Â1, p2 for Â2)."""
    return perm.order(k)


def col_order(perm: Permutation, k: int) -> np.ndarray:
    """Order of Â_k's columns (p2 for Â1, p1 for Â2)."""
    return perm.order(2 if k == 1 else 1)


def output_order(perm: Permutation, plan: LayerPlan) -> np.ndarray:
    """Order of a stage's output rows: Â_k's rows, or for a dense stage its input's."""
    return col_order(perm, plan.adj) if plan.dense else row_order(perm, plan.adj)


def symmetric(graph: Graph, aggregation: str) -> bool:
    """Whether the normalized Â is symmetric (then a block's transpose is another block)."""
    return normalized_symmetric(graph.directed, aggregation)


@dataclass
class RankShard:
    """Everything one rank needs from the graph (numpy/scipy; the engine moves it to torch)."""

    shape: GridShape
    coords: dict[str, int]
    num_stages: int
    orders: tuple[str, ...]
    perm: str
    seed: int
    name: str
    num_nodes: int
    nodes_padded: int
    num_features: int
    features_padded: int
    num_classes: int
    blocks: dict[str, sp.csr_matrix]
    features: np.ndarray  # layer 0's H block, rows further cut over depth (float32)
    input_ids: list[np.ndarray]  # per layer: original node id of each H-block row (-1: padding)
    output_ids: np.ndarray  # original node id of each logits row (-1: padding)
    labels: np.ndarray  # int64, -1 for padding/unlabelled; multi-label: int8 (rows, tasks),
    #                     -1 for padding/missing
    masks: dict[str, np.ndarray]  # "train"/"val"/"test" -> bool over the logits rows
    mask_counts: dict[str, int]  # global number of nodes in each mask
    meta: dict = field(default_factory=dict)

    @property
    def plans(self) -> list[LayerPlan]:
        return layer_plans(self.num_stages, list(self.orders))

    @property
    def num_layers(self) -> int:
        """The old name of `num_stages` (it always counted stages, not GNN layers): deprecated
        in 0.2.0, removed in 0.3.0."""
        return self.num_stages

    @property
    def multilabel(self) -> bool:
        """Whether the labels are a row×task matrix of binary tasks (`Graph.multilabel`)."""
        return self.labels.ndim == 2

    def adj_block(self, layer: int) -> sp.csr_matrix:
        """Â block of ``layer`` on this rank."""
        return self.blocks[block_key(self.plans[layer])]

    def touched_rows(self, layer: int) -> np.ndarray:
        """The rows of ``layer``'s block of Â holding a non-zero (the sparse exchanges' row
        set, `plexus_partition.rowsets`), read off the block's row pointers."""
        return touched_rows(self.adj_block(layer))

    def touched_columns(self, layer: int) -> np.ndarray:
        """The columns of ``layer``'s block of Â holding a non-zero (the input gradient's sparse
        exchange, `plexus_partition.rowsets`)."""
        return touched_columns(self.adj_block(layer))

    def release_values(self) -> None:
        """Free the float arrays (Â values, features) once a model holds its own copies of them
        (e.g. in a lower precision): the features become 0 rows, every block's values one NaN
        broadcast to their length, so the structure (non-zero counts, index arrays, which a
        model may share) stays and a product with a released block shows as NaN."""
        self.features = self.features[:0].copy()
        for blk in self.blocks.values():
            blk.data = np.broadcast_to(np.float32(np.nan), blk.data.shape)


def labels_fit(labels: object, rows: int, num_classes: int) -> bool:
    """Whether ``labels`` are a shard's labels for ``rows`` logits rows: int64 class ids in
    [-1, classes) per row, or an int8 row×task matrix of 0, 1 and -1 (multi-label)."""
    if not isinstance(labels, np.ndarray):
        return False
    if labels.ndim == 2:
        return (labels.shape == (rows, num_classes) and labels.dtype == np.int8
                and (not labels.size or (labels.min() >= -1 and labels.max() <= 1)))
    return (labels.shape == (rows,) and labels.dtype.kind == "i"
            and (not rows or (labels.min() >= -1 and labels.max() < num_classes)))


def padded_ids(order: np.ndarray, nodes_padded: int) -> np.ndarray:
    """The order followed by -1 for every padded position."""
    out = np.full(nodes_padded, -1, dtype=np.int64)
    out[: len(order)] = order
    return out


def extract_block(adj_hat: sp.csr_matrix, row_ids: np.ndarray, col_ids: np.ndarray) -> sp.csr_matrix:
    """Â[row_ids][:, col_ids] for id lists with -1 padding (padded rows/cols are empty)."""
    n = adj_hat.shape[0]
    # 32-bit positions where the sizes fit: the temporaries are as long as the block's nnz
    index = np.int32 if max(n, len(row_ids), len(col_ids)) < 2**31 else np.int64
    real_rows = row_ids >= 0
    sub = adj_hat[row_ids[real_rows]]
    # position of each original node among the block's columns (-1: not in the block)
    col_pos = np.full(n, -1, dtype=index)
    real_cols = col_ids >= 0
    col_pos[col_ids[real_cols]] = np.nonzero(real_cols)[0]
    rows = np.repeat(np.nonzero(real_rows)[0].astype(index), np.diff(sub.indptr))
    cols = col_pos[sub.indices]
    keep = cols >= 0
    data = sub.data[keep]
    del sub
    rows, cols = rows[keep], cols[keep]
    del keep
    out = sp.csr_matrix((data, (rows, cols)), shape=(len(row_ids), len(col_ids)),
                        dtype=np.float32)
    out.sort_indices()
    return out


def shard_graph(graph: Graph, shape: GridShape | Mapping[str, int], coords: Mapping[str, int],
                num_stages: int, orders: Sequence[str] | str = "agg",
                perm: str | Permutation = "none", seed: int = 0,
                adj_hat: sp.csr_matrix | None = None, aggregation: str = "gcn") -> RankShard:
    """The shard of the rank at ``coords`` (a dict over "x", "y", "z") of a grid ``shape``.

    ``orders`` has one entry per stage ("agg", "combine" or "dense": a dense stage needs no
    block of Â). ``adj_hat`` (the adjacency normalized for ``aggregation``, see
    `plexus_datasets.normalize`) and ``perm`` (a built `Permutation`) can be passed in to reuse
    them across ranks.
    """
    shape = GridShape.of(shape)
    plans = layer_plans(num_stages, orders)
    world = shape.world_size
    if adj_hat is None:
        adj_hat = graph.normalized(aggregation)
    if not isinstance(perm, Permutation):
        perm = make_permutation(adj_hat, perm, seed, world)
    n = graph.num_nodes
    npad = pad_to(n, world)
    widths = [graph.num_features] + [1] * (num_stages - 1) + [graph.num_classes]
    fpad = padding(shape, plans, n, widths).widths_padded[0]

    def rows_of(axis: str) -> slice:
        return block(npad, shape[axis], coords[axis])

    blocks: dict[str, sp.csr_matrix] = {}
    for plan in plans:
        key = block_key(plan)
        if key not in blocks and not plan.dense:
            r = padded_ids(row_order(perm, plan.adj), npad)[rows_of(plan.a_rows)]
            c = padded_ids(col_order(perm, plan.adj), npad)[rows_of(plan.a_cols)]
            blocks[key] = extract_block(adj_hat, r, c)

    input_ids = rank_input_ids(perm, plans, shape, coords, npad)
    ids0 = input_ids[0][feature_rows(plans, shape, coords, npad)]
    cols = feature_cols(plans, shape, coords, fpad)
    feats = np.zeros((len(ids0), cols.stop - cols.start), dtype=np.float32)
    real = ids0 >= 0
    hi = min(cols.stop, graph.num_features)
    if hi > cols.start:
        feats[real, : hi - cols.start] = graph.features[ids0[real], cols.start:hi]

    masks_all = (graph.train_mask, graph.val_mask, graph.test_mask)
    out_ids, labels, masks = rank_outputs(perm, plans, shape, coords, npad, graph.labels,
                                          pack_masks(masks_all))
    counts = {name: int(m.sum()) for name, m in zip(MASKS, masks_all)}
    return RankShard(shape, dict(coords), num_stages, tuple(p.order for p in plans),
                     perm.kind, perm.seed, graph.name, n, npad, graph.num_features, fpad,
                     graph.num_classes, blocks, feats, input_ids, out_ids, labels, masks, counts,
                     meta={"symmetric": symmetric(graph, aggregation),
                           "aggregation": aggregation})


def padded_block(order: np.ndarray, npad: int, parts: int, index: int) -> np.ndarray:
    """Block ``index`` of ``parts`` of `padded_ids` (order, npad), without building the rest."""
    cut = block(npad, parts, index)
    out = np.full(cut.stop - cut.start, -1, dtype=np.int64)
    take = order[cut.start:min(cut.stop, len(order))]
    out[:len(take)] = take
    return out


def rank_input_ids(perm: Permutation, plans: Sequence[LayerPlan], shape: Mapping[str, int],
                   coords: Mapping[str, int], npad: int) -> list[np.ndarray]:
    """Per stage: the original node id of each row of the rank's H block (-1: padding)."""
    return [padded_block(col_order(perm, p.adj), npad, shape[p.in_rows], coords[p.in_rows])
            for p in plans]


def feature_group(plans: Sequence[LayerPlan], shape: Mapping[str, int],
                  coords: Mapping[str, int]) -> int:
    """Which of the |in_rows|·|depth| equal runs of layer 0's input order holds the rank's
    feature rows: its H block (cut by in_rows) is cut once more over depth."""
    first = plans[0]
    return coords[first.in_rows] * shape[first.depth] + coords[first.depth]


def feature_rows(plans: Sequence[LayerPlan], shape: Mapping[str, int],
                 coords: Mapping[str, int], npad: int) -> slice:
    """The rank's feature rows within its layer-0 H block."""
    first = plans[0]
    return block(npad // shape[first.in_rows], shape[first.depth], coords[first.depth])


def feature_cols(plans: Sequence[LayerPlan], shape: Mapping[str, int],
                 coords: Mapping[str, int], fpad: int) -> slice:
    """The rank's feature columns (padded width ``fpad``)."""
    first = plans[0]
    return block(fpad, shape[first.in_cols], coords[first.in_cols])


def rank_outputs(perm: Permutation, plans: Sequence[LayerPlan], shape: Mapping[str, int],
                 coords: Mapping[str, int], npad: int, labels: np.ndarray,
                 mask_bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """(output ids, labels, masks) of the rank's logits rows: the last stage's output rows.
    ``mask_bits`` holds every node's masks as bits (`pack_masks`). Multi-label ``labels`` (an
    int8 node×task matrix) give the rows' label rows, -1 for padding."""
    last = plans[-1]
    out_ids = padded_block(output_order(perm, last), npad, shape[last.out_rows],
                           coords[last.out_rows])
    real = out_ids >= 0
    out_labels = np.full((len(out_ids),) + labels.shape[1:], -1,
                         dtype=labels.dtype if labels.ndim == 2 else np.int64)
    out_labels[real] = labels[out_ids[real]]
    bits = np.zeros(len(out_ids), dtype=np.uint8)
    bits[real] = mask_bits[out_ids[real]]
    out_masks = {name: (bits >> np.uint8(i)) & np.uint8(1) == 1 for i, name in enumerate(MASKS)}
    return out_ids, out_labels, out_masks


def pack_masks(masks: Sequence[np.ndarray]) -> np.ndarray:
    """The train/val/test masks as bits 0, 1, 2 of one byte per node."""
    bits = np.zeros(len(masks[0]), dtype=np.uint8)
    for i, mask in enumerate(masks):
        bits |= mask.astype(np.uint8) << np.uint8(i)
    return bits
