"""The 3D tensor-parallel engine: one rank's share of a GNN on an X×Y×Z process grid.

`grid` (the process grid on torch.distributed), `comm` (differentiable collectives along one
axis, recorded in the `ledger` and timed by `timing`), `spmm` and `gemm` (per-rank kernels),
`graph3d` (the stage toolkit: a stage's graph operations, which every kind's torch code in
`kinds` and users' layers are written with; `kinds`: each built-in kind's layer, its torch-free
spec in `plexus_partition.model.ops`), `stage` (the one stage running a kind on it, where each
parameter's shard sits, BatchNorm's stage), `model` (the stages, the loss of `loss`, conversion
between shards and full tensors), `seeding` and `masks` (grid-independent weights and dropout
masks), `trainer` (the full-batch loop), `serial` (the plain PyTorch reference every
distributed result is tested against), `pygmodel` (the same model as PyG's layers: described for
exports, built by `plexus.load_pyg` and the reference stacks), `config` and `build` (one rank's
model from its shard), `flags` (the engine's command-line options). See docs/design.md for the
layouts.
"""
