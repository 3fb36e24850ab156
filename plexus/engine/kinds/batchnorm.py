"""BatchNorm's torch code after a stage (its spec, the statistics' layout and precision:
`plexus_partition.model.ops.batchnorm`). It runs in the one stage class
(`plexus.engine.stage.Stage3D`), the running statistics its buffers."""

from __future__ import annotations

from torch.nn.functional import batch_norm

from plexus_partition.model.ops.batchnorm import EPS, MOMENTUM

from .base import KindLayer


class BatchNorm(KindLayer):
    name = "batchnorm"

    def stage(self, g, x, step):
        """y = (x − mean) / sqrt(var + eps) · γ + β over the real rows (float32, cast back);
        training: the batch statistics, AR(Σx) and AR(Σx²) over r, and (unless ``g.update_stats``
        is off: a recomputed pass) the running ones updated as BatchNorm1d (unbiased variance);
        evaluation: the running statistics."""
        dtype, x = x.dtype, x.float()  # float32 statistics (a no-op on float32)
        r, c, n = g.plan.out_rows, g.comm, g.num_nodes
        if g.training:
            real = g.cached("real", lambda: (g.output_ids >= 0).unsqueeze(1))

            def column_sum(v, name: str):
                with c.labelled(f"AR(Σ{name})", f"AR(dΣ{name})"):
                    total = c.all_reduce((v * real).sum(0), r)  # AR(Σx) over r
                    return c.all_reduce_grad(total, r)        # bwd: AR(dΣx) over r

            mean = column_sum(x, "x") / n
            xc = x - mean
            var = column_sum(xc * xc, "x²") / n
            if g.update_stats:  # buffers: in-place updates of detached values, no graph
                g.stats["mean"].mul_(1 - MOMENTUM).add_(MOMENTUM * mean.detach())
                unbiased = var.detach() * (n / max(n - 1, 1))
                g.stats["var"].mul_(1 - MOMENTUM).add_(MOMENTUM * unbiased)
        else:
            xc, var = x - g.stats["mean"], g.stats["var"]
        with c.labelled(backward="AR(dγ)"):
            gamma = c.all_reduce_grad(g.param("gamma"), r)    # bwd: AR(dγ) over r
        with c.labelled(backward="AR(dβ)"):
            beta = c.all_reduce_grad(g.param("beta"), r)      # bwd: AR(dβ) over r
        return (xc * (var + EPS).rsqrt() * gamma + beta).to(dtype)

    def serial(self, m, p, OUT, step=None):
        """``torch.nn.functional.batch_norm`` with the model's running statistics (updated when
        training), momentum 0.1, eps 1e-5."""
        s = p.index
        return batch_norm(OUT, m.stat("mean", s), m.stat("var", s), m.param("gamma", s),
                          m.param("beta", s), m.training, MOMENTUM, EPS)
