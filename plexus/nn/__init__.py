"""Write your own GNN layer for the 3D engine, PyG-style: `Layer` (declare parameters, write
``forward(g, x, step)`` with the graph operations of ``g``), `Network` (a stack of layers on
the grid: shards the graph and the parameters, runs them, loss and accuracy over the whole
graph).

The graph operations (`StageGraph`, the ``g`` a layer receives) are the engine's own
differentiable building blocks with the 3D layouts handled: ``linear`` (the 3D weight layout),
``aggregate`` (SpMM and its all-reduce), ``to_rows`` (a node's own features where its
aggregation lands), ``head_sums`` and ``attention`` (GAT-style scores), ``sddmm`` (per-edge dot
products), ``edge_softmax`` (over each node's in-edges across the grid),
``aggregate_weighted`` (Σ α·Z per head, with attention dropout), ``dropout`` (masks keyed by
global ids: the same on every grid), ``add_bias``; `BatchNorm` normalizes over all nodes.
`serial_dropout` and `serial_edge_dropout` draw the same masks for a serial version of a layer.
examples/custom_layer.py writes two layers this way and checks them against their serial
versions.
"""

from __future__ import annotations

from plexus.engine.graph3d import StageGraph

from .network import BatchNorm, Layer, Network, serial_dropout, serial_edge_dropout

__all__ = ["BatchNorm", "Layer", "Network", "StageGraph", "serial_dropout",
           "serial_edge_dropout"]
