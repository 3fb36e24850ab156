"""GAT (PyG's GATConv, self loops added, ``heads`` heads concatenated or averaged).

Per head h, with Z = H·W (Z_j^h the head's columns of node j):
    e_ij = LeakyReLU(a_dst^h·Z_i^h + a_src^h·Z_j^h),  α_ij = softmax_j over i's in-edges (self
    loop included) of e_ij,  H'_i^h = Σ_j α_ij·Z_j^h (+ b after concatenating or averaging).

On the grid a GAT stage is combine-first (attention needs Z): Z rows-by-o, columns-by-d,
replicated over i after AR(Z) over i; Â's block (its structure: M + I) rows-by-i, columns-by-o.
- Scores: s = Z·[A_src | A_dst] per head (A holds a's entries on each head's columns): the
  columns are cut by d, so AR(s) over d; the destination scores move to Â's rows through S
  (the identity's block laid out like Â's), AR over o.
- Edge softmax over each row's in-edges, whose columns are cut by o: AR-MAX and AR-SUM of the
  row statistics over o. No per-edge tensor ever crosses the grid.
- OUT = α·Z per head (a CSR SpMM per head with α as its values), AR(OUT) over o: rows-by-i,
  columns-by-d, replicated over o (the next stage's roles are (i, d, o), as combine-first).
  Averaged heads: the inner width is ``heads`` blocks of the output width, the per-head sum is
  local, then RS over d and AR over o.
- Backward: dZ = αᵀ·dOUT per head; dα_ij = dOUT_i·Z_j per head, a sampled product per head
  (never an edge × feature tensor, never a dense gradient); the softmax's backward needs
  Σ_j α_ij·dα_ij, all-reduced over o. dα is a partial sum over d's columns, and everything after
  it is linear in it, so only node-sized score gradients are all-reduced: over o (the row
  scores) and over d (the node scores).
Attention statistics, scores and their gradients are float32 in every compute precision.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import (EDGE_PASS_BYTES, Flops, KindSpec, ModelKind, Param, StageMemory, StageSizes,
                   dropout_work, edge_mask_temp_bytes, option, param_memory, stage_option)


@dataclass(frozen=True)
class Options:
    """GAT's and GATv2's options (`plexus_partition.model.model.ModelConfig` fields, flags of
    the tools)."""

    heads: int = option(1, "GAT, GATv2: attention heads of the hidden layers, concatenated "
                           "(default {default}; --hidden 64 --heads 4 is GATConv(in, 64, "
                           "heads=4))", metavar="K", check="count")
    out_heads: int = option(1, "GAT, GATv2: heads of the last layer, averaged (default "
                               "{default})", metavar="K", check="count")
    attn_dropout: float = option(0.0, "GAT, GATv2: dropout on the attention coefficients "
                                      "(default {default})", metavar="P", check="rate")
    negative_slope: float = option(0.2, "GAT, GATv2: LeakyReLU's slope in the scores (default "
                                        "{default})", metavar="S", check="finite")


@dataclass(frozen=True)
class StageOptions:
    """A GAT stage's: its heads, concatenated (else averaged), and its attention dropout."""

    heads: int = 1
    concat: bool = True
    attn_dropout: float = 0.0


def heads_of(cfg, layer: int) -> int:
    """Attention heads of GNN layer ``layer``: ``out_heads`` on the last, else ``heads``."""
    return cfg.options.out_heads if layer == cfg.num_layers - 1 else cfg.options.heads


def _stage_options(cfg, layer: int, pos: int, d_in: int, d_out: int) -> StageOptions:
    heads = heads_of(cfg, layer)
    return StageOptions(heads, layer < cfg.num_layers - 1 or heads == 1,
                        cfg.options.attn_dropout)

STAT_BYTES = 4
#: host memory glibc keeps beyond live tensors while the per-edge passes run (freed per-edge
#: tensors held in its heap), fitted to measured peaks (R-MAT 17 and 18, 1x1x1 and 2x2x2, with
#: and without recompute): this many per-edge float32 tensors (none on CUDA)
EDGE_SLACK = 2.0
# Per edge and head, the softmax's passes, LeakyReLU, dropout and the backward's (counted as
# sparse flops: they run at memory speed like an SpMM's).
EDGE_FLOPS = 24


class GAT(KindSpec):
    name = "gat"

    def stage_order(self, conv_order: str) -> str:
        return "combine"

    def heads(self, plan) -> int:
        return stage_option(plan, "heads", 1)

    def concat(self, plan) -> bool:
        """Whether the stage concatenates its heads (else averages them)."""
        return stage_option(plan, "concat", True)

    def head_blocks(self, plan) -> int:
        return 1 if self.concat(plan) else self.heads(plan)

    def head_width(self, plan, d_out: int) -> int:
        """Each head's width: the output width over the heads when concatenated."""
        return d_out // self.heads(plan) if self.concat(plan) else d_out

    def params(self, plan, d_in, d_out):
        inner = self.inner_width(plan, d_out)
        att = dict(layout="inner", init="glorot_heads", transform="heads", heads=self.heads(plan))
        return [Param("W", (d_in, inner), "weight", "glorot", stream=0, pyg="lin.weight",
                      transform="T"),
                Param("att_src", (inner,), pyg="att_src", **att),
                Param("att_dst", (inner,), pyg="att_dst", **att),
                *self.bias_param(plan, d_out)]

    # ---- compute ----------------------------------------------------------------------------
    def flops(self, z: StageSizes) -> Flops:
        """GEMMs: H·W (forward, dW, dH) and the scores Z·A (forward, dZ, dA). Sparse: the
        α-weighted SpMM, its transpose and the SDDMM of dα, each 2·nnz·width; the per-edge
        softmax work; S's SpMM of the row scores."""
        n, H = z.n, self.heads(z.plan)
        width = z.Di / z.d
        nnz = z.nnz_block
        gemm = 2.0 * (n / z.o) * (z.D / z.i) * width * (3 if z.needs_dh else 2)
        gemm += 2.0 * (n / z.o) * width * 2 * H * 3
        other = EDGE_FLOPS * nnz * H + 2 * 2.0 * (n / (z.i * z.o)) * H
        return Flops.products([(nnz, width)] * 3, gemm, other)

    # ---- memory -----------------------------------------------------------------------------
    def memory(self, z: StageSizes) -> StageMemory:
        """What the stage above holds: kept for backward the dropped H (dW), W (dH),
        Z (the scores' and the SDDMM's operand), α per edge and head (float32) and the
        attention-dropout mask (one byte per edge and head); in forward Z and its all-reduced
        copy, the per-edge scores and the output; in backward dOUT, dZ, dα (one float32 per edge
        and head) and the sampled product's values. Resident: the block's row ids, its
        transpose's column ids and the permutation between them (32-bit), and S."""
        p, n, fb, H = z.plan, z.n, z.dtype_bytes, self.heads(z.plan)
        o, i, d = z.o, z.i, z.d
        h_in, E = z.h_in, z.nnz_block
        drop = h_in if z.drops_input else 0.0
        caller = z.caller_input  # stage 0 reads the stored or kept features
        width = z.Di / d
        zz, out_local = n / o * width, n / i * width
        out = n / i * z.D2 / d
        w_blk, flat = z.D / i * width, z.size(p.w_flat)
        gathered = w_blk if flat > 1 else 0.0
        vectors = 2 * width + (z.D2 / z.size(p.out_cols) if p.bias else 0.0)
        weights, optimizer = param_memory(z, w_blk / flat, gathered, vectors)
        edges = E * H
        drops_edges = stage_option(p, "attn_dropout", 0.0) > 0
        mask = edges if drops_edges else 0.0  # the attention-dropout mask: a byte per edge, head
        # kept: the dropped H (dW), Z (scores, SDDMM), W (dH), α and the dropout mask
        kept_b = ((drop if drop else h_in) + zz + (gathered if z.needs_dh else 0.0)) * fb
        kept_b += edges * STAT_BYTES + mask
        z_all = zz * (2 if i > 1 else 1)
        mean_sum = 0.0 if self.concat(p) else n / i * z.D2
        # the temporaries of a pass over all the edges; on CPUs the host memory the allocator
        # holds beyond live tensors, and the attention-dropout hash's int64 words
        cpu = z.device != "cuda"
        host = EDGE_SLACK * edges * STAT_BYTES if cpu and z.allocator_slack else 0.0
        slack = edges * EDGE_PASS_BYTES + host
        hashing = E * edge_mask_temp_bytes(H) if cpu and drops_edges else 0.0
        # forward: Z with its all-reduced copy, then the per-edge scores and α; then the output
        # (and the averaged heads' sum) beside Z, the attention-dropout mask drawn (the
        # softmax's passes are over by then) or the products' passes over the edges
        forward = [(caller + drop + z_all) * fb + 2 * edges * STAT_BYTES + dropout_work(z)
                   + slack,
                   (caller + drop + zz + out_local + mean_sum) * fb + edges * STAT_BYTES + mask
                   + max(hashing, edges * EDGE_PASS_BYTES) + host]
        # backward: dOUT, dZ (its products per head, each with one head's dropped α as values
        # and their transpose's copy) and dα, the sampled product reading float32 copies of
        # dOUT and Z in a lower precision; then, dOUT freed, the softmax's and LeakyReLU's
        # passes over the edges beside dZ and dα
        upcast = (out_local + zz) * STAT_BYTES if fb != STAT_BYTES else 0.0
        backward = [(kept_b, (out_local + zz) * fb + edges * STAT_BYTES + 2 * E * STAT_BYTES
                     + upcast + host),
                    (kept_b, zz * fb + edges * STAT_BYTES + slack)]
        if z.needs_dh:
            backward.append((0.0, (zz + h_in) * fb + dropout_work(z)))
        resident = E * 3 * 4 + 2 * n / (i * o) * 4
        return StageMemory(kept_b, forward, backward, out, weights, optimizer, resident)


def pyg_kwargs(cfg, layer: int, d_in: int, d_out: int) -> dict:
    """GATConv's arguments besides its widths and bias for GNN layer ``layer`` (GATv2Conv's
    too)."""
    return {"heads": heads_of(cfg, layer), "concat": layer < cfg.num_layers - 1,
            "negative_slope": cfg.options.negative_slope, "dropout": cfg.options.attn_dropout,
            "add_self_loops": True}


KIND = ModelKind("gat", ("gat",), "gcn", "GATConv", ("convs.{l}.",),
                 "GATConv: attention over in-neighbours and the node itself, heads "
                 "concatenated on hidden layers and averaged on the last",
                 attention=True, options=Options, stage_options=_stage_options,
                 hidden_width=lambda cfg: cfg.hidden * cfg.options.heads,
                 summary=lambda cfg: f"heads {cfg.options.heads}/{cfg.options.out_heads}",
                 pyg_kwargs=pyg_kwargs)
