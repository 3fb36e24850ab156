"""BatchNorm after a stage (PyG stacks' BatchNorm1d): y = (x − mean)/√(var + eps)·γ + β with
statistics over all real nodes.

The output block is rows-by-r (the stage's output-rows axis), columns-by-c, replicated over the
third axis: the column sums Σx and Σ(x−mean)² over the real rows are all-reduced over r, so
every rank normalizes with the statistics of all N nodes; their gradients are all-reduced over
r again in backward. γ, β and the running statistics (momentum 0.1, unbiased variance) are cut
like a bias. Statistics and normalization are float32 whatever the compute precision (a
bfloat16 variance of a sum over all nodes loses most of its digits): the all-reduces carry 4
bytes per element (the stage issues them exactly, `KindSpec.statistics`; the dry run records
them so and the ledger test pins it). The torch code is its layer, `plexus.engine.kinds.batchnorm`,
run in the one stage class (`plexus.engine.stage.Stage3D`), the running statistics its buffers.
"""

from __future__ import annotations

from .base import (Flops, KindSpec, MASTER_BYTES, Param, StageMemory, StageSizes,
                   param_memory)

STAT_BYTES = 4  # float32 statistics in every compute precision
MOMENTUM, EPS = 0.1, 1e-5  # torch.nn.BatchNorm1d's defaults


class BatchNorm(KindSpec):
    name = "batchnorm"
    graph = False
    has_bias = False
    follows = True
    statistics = True

    def params(self, plan, d_in, d_out):
        return [Param("gamma", (d_out,), "vector", "ones", pyg="weight"),
                Param("beta", (d_out,), "vector", "zeros", pyg="bias"),
                Param("mean", (d_out,), "vector", "zeros", pyg="running_mean", buffer=True),
                Param("var", (d_out,), "vector", "ones", pyg="running_var", buffer=True)]

    def pyg_extras(self, plan, d_in, d_out, model_bias):
        return []  # num_batches_tracked: the exporter writes the epoch count

    def flops(self, z: StageSizes) -> Flops:
        return Flops()  # elementwise: a few passes over the output, not priced

    def memory(self, z: StageSizes) -> StageMemory:
        """Saved for backward: x − mean and the normalized x, float32 (two copies of the
        output). In forward, beside the stage's input (still referenced by its caller) and
        output x (and x's float32 copy in a lower precision): x − mean and its masked square,
        then x − mean, x̂, x̂·γ and x̂·γ + β; in backward about three float32 gradients of the
        output's size. Parameters: γ and β; the running statistics."""
        fb, p = z.dtype_bytes, z.plan
        out = z.n / z.size(p.out_rows) * z.D2 / z.size(p.out_cols)
        vec = z.D2 / z.size(p.out_cols)
        caller = z.caller_input * fb
        x = out * fb + (out * STAT_BYTES if fb != STAT_BYTES else 0.0)
        kept = 2 * out * STAT_BYTES
        forward = [caller + x + 3 * out * STAT_BYTES, caller + x + 4 * out * STAT_BYTES]
        backward = [(kept, 3 * out * STAT_BYTES)]
        weights, optimizer = param_memory(z, 0.0, 0.0, 2 * vec)
        return StageMemory(kept, forward, backward, out, weights + 2 * vec * MASTER_BYTES,
                           optimizer)
