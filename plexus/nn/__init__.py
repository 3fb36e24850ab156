"""Write your own GNN layer for the 3D engine, PyG-style: `Layer` (declare parameters, write
``forward(g, x, step)`` with the graph operations of ``g``), `Network` (a stack of layers on
the grid: shards the graph and the parameters, runs them, loss and accuracy over the whole
graph).

The graph operations (`LayerGraph`, the ``g`` a layer receives) are the engine's own
differentiable building blocks (`StageGraph`) with the 3D layouts handled, on tensors that carry
their layout (`LaidTensor`, see `plexus.nn.layouts`): an operation on operands of the wrong
layout, a layer whose ``order`` contradicts what it does, or a parameter used without ``g``
raises a one-line `LayoutError` naming the operation, the layouts and the fix, on every grid
(1x1x1 too). The operations: ``linear`` (the 3D weight layout),
``aggregate`` (SpMM and its all-reduce), ``to_rows`` (a node's own features where its
aggregation lands), ``head_sums`` and ``attention`` (GAT-style scores), ``sddmm`` (per-edge dot
products), ``edge_softmax`` (over each node's in-edges across the grid),
``aggregate_weighted`` (Σ α·Z per head, with attention dropout), ``edge_values`` and
``edge_weights`` (Â's values and the graph's own weights per edge; ``aggregate(x, values)``
sums with any per-edge values), ``dropout`` (masks keyed by
global ids: the same on every grid), ``add_bias``, ``replicate`` (a learnable scalar:
``g.replicate(self.t)``), ``row_norm``/``normalize_rows`` (row 2-norms over cut columns),
``to_nodes`` (another propagation hop in the same layer), ``output`` (an earlier layer's output,
e.g. GCNII's H⁰, declared with ``Layer.reads_output``); ``linear`` takes an ``identity`` term
(X·(W + c·I)); `BatchNorm` normalizes over all nodes. Parameters carry their layout in
``forward`` (weight, vector, scalar): one used without its operation, or a reduction or reshape
over cut rows or columns, is a `LayoutError` on every grid.
`serial_dropout` and `serial_edge_dropout` draw the same masks for a serial version of a layer.
`check_layer` runs a layer on several grids against 1x1x1 and prints PASS/FAIL with the
largest differences (``plexus-bench check --layer module:Class`` does the same).
examples/custom_layer.py writes two layers this way and checks them against their serial
versions; examples/gcnii.py and examples/appnp.py write PyG's GCN2Conv and APPNP.
"""

from __future__ import annotations

from plexus.engine.graph3d import StageGraph

from .check import LayerCheck, check_layer
from .graph import LayerGraph
from .layouts import LaidTensor, LayoutError
from .network import BatchNorm, Layer, Network, serial_dropout, serial_edge_dropout

__all__ = ["BatchNorm", "LaidTensor", "Layer", "LayerCheck", "LayerGraph", "LayoutError",
           "Network", "StageGraph", "check_layer", "serial_dropout", "serial_edge_dropout"]
