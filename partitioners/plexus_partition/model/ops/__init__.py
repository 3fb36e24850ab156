"""Every operator and model kind, declared once (no torch): each kind's spec.

An operator (`base.KindSpec`) declares a stage kind: its parameters with their shapes, init and
PyG names, its flops and its memory (the collectives it issues are recorded from a dry run of
its torch code, `plexus.engine.dryrun`). Its torch code, written on the stage toolkit
(``stage``), and its serial reference (``serial``) are its layer in the engine,
`plexus.engine.kinds`. A model kind (`base.ModelKind`) says how one GNN layer expands into
stages. Adding a kind: one module here, listed in `MODULES`, its layer module in
`plexus.engine.kinds` and its tests (ARCHITECTURE.md, "Where to add").
"""

from __future__ import annotations

from . import appnp, batchnorm, dense, gat, gatv2, gcn, gcn2, gin, graphconv, sage
from .base import (ACTIVATION_MODULES, ACTIVATIONS, DEFAULT_ACTIVATION, NORMS, Flops,
                   KindSpec, ModelKind, Param, StageMemory, StageSizes, split_name)

#: The registry: each module declares its operators (`KindSpec` subclasses) and its model
#: kind (``KIND``), in the order --model lists them.
MODULES = (gcn, sage, gin, dense, gat, gatv2, appnp, gcn2, graphconv, batchnorm)

OPERATORS: dict[str, KindSpec] = {op.name: op for op in (
    v() for m in MODULES for v in vars(m).values()
    if isinstance(v, type) and issubclass(v, KindSpec) and v.__module__ == m.__name__
    and v.name)}

KINDS: dict[str, ModelKind] = {m.KIND.name: m.KIND for m in MODULES if hasattr(m, "KIND")}

NORM_OP = "batchnorm"  # the operator after a stage whose plan has ``norm``

__all__ = ["OPERATORS", "KINDS", "NORMS", "NORM_OP", "ACTIVATION_MODULES", "ACTIVATIONS",
           "DEFAULT_ACTIVATION", "Flops", "KindSpec", "ModelKind", "Param",
           "StageMemory", "StageSizes", "split_name"]


def __getattr__(name: str) -> object:
    """``Operator``, the spec's old name, with a `DeprecationWarning` (deprecated in 0.2.0,
    removed in 0.3.0)."""
    if name == "Operator":
        import warnings
        warnings.warn("plexus_partition.model.ops.Operator is KindSpec now (the torch code is "
                      "plexus.engine.kinds'): import it by that name (removed in 0.3.0)",
                      DeprecationWarning,
                      stacklevel=2)
        return KindSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
