"""Every operator and model kind, declared once (no torch).

An operator (`base.Operator`) declares a stage kind: its parameters with their shapes, init and
PyG names, the collectives it issues with their sizes, its flops and its memory. A model kind
(`base.ModelKind`) says how one GNN layer expands into stages. The engine's torch code of each
operator is in `plexus.engine.ops` under the same name; adding a kind means one module here, its
torch module there, a line in each registry and its tests (ARCHITECTURE.md, "Where to add").
"""

from __future__ import annotations

from . import batchnorm, dense, gat, gcn, gin, sage
from .base import NORMS, Flops, ModelKind, Operator, Param, StageMemory, StageSizes, split_name

OPERATORS: dict[str, Operator] = {op.name: op for op in (
    gcn.GCN(), sage.SAGE(), gin.GIN(), dense.Dense(), gat.GAT(), batchnorm.BatchNorm())}

KINDS: dict[str, ModelKind] = {k.name: k for k in (
    gcn.KIND, sage.KIND, gin.KIND, dense.KIND, gat.KIND)}

NORM_OP = "batchnorm"  # the operator after a stage whose plan has ``norm``

__all__ = ["OPERATORS", "KINDS", "NORMS", "NORM_OP", "Flops", "ModelKind", "Operator", "Param",
           "StageMemory", "StageSizes", "split_name"]
