"""What the options of a ``plexus-train`` run say about the problem before the model is built:
the grid (None: auto), layers, order, dataset and permutation, and with ``--shards`` the
store's manifest, which fixes them (flags may repeat them but not contradict them). Bad input is
a `UsageError` naming the flag."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import ORDERS
from plexus_partition.model.modelopts import model_config, resolve_layers, resolve_order
from plexus_partition.model.ops import KINDS

from .errors import UsageError
from .plan import GraphSizes


@dataclass
class ProblemShape:
    """What the options say about the problem before the model is built."""

    grid: GridShape | None
    layers: int | None
    order: str | None
    dataset: str
    perm: str | None = None  # a store's permutation (--shards)
    note: str = ""  # what a store decided that no flag said (printed before the run)


def from_store(args: argparse.Namespace, shape: ProblemShape) -> ProblemShape:
    """With --shards the store's manifest fixes the grid, layers, orders, permutation and dataset;
    flags may repeat them but not contradict them."""
    from plexus_partition import read_manifest, store_aggregation  # noqa: PLC0415

    if args.dataset or args.root:
        raise UsageError("--shards DIR already fixes the dataset; drop --dataset/--root")
    manifest = read_manifest(args.shards)
    store_grid = GridShape.of(manifest["grid"])
    if shape.grid is not None and shape.grid != store_grid:
        raise UsageError(f"--grid {shape.grid} but {args.shards} was cut for grid {store_grid}")
    notes = [store_kind(args, manifest)]
    held, decl = store_aggregation(manifest), KINDS[args.model]
    if decl.aggregation != held:
        raise UsageError(f"{args.shards} holds Â normalized for the {held} aggregation, --model "
                         f"{args.model} needs {decl.aggregation}: cut a store for it with "
                         f"plexus-partition --model {args.model}, or train a model "
                         f"of the {held} aggregation from this one")
    # the manifest counts stages: a layer of some kinds is several (GIN's: agg, then dense)
    stages, per = int(manifest["num_stages"]), len(decl.stage_ops)
    if stages % per:
        raise UsageError(f"{args.shards} was cut for {stages} stages, not a whole number of "
                         f"--model {args.model} layers ({per} stages each); cut it for {per} "
                         "stages per layer")
    layers = stages // per
    what = f"{layers} {args.model} layer{'s' if layers > 1 else ''}" + (
        f" ({stages} stages)" if per > 1 else "")
    if shape.layers is not None and shape.layers != layers:
        raise UsageError(f"--layers {shape.layers} but {args.shards} was cut for {what}: drop "
                         f"--layers, or cut a store with plexus-partition --model {args.model} "
                         f"--layers {shape.layers}")
    if shape.layers is None and layers != resolve_layers(None):  # said, never silent
        notes.append(f"{args.shards} was cut for {what}: training {layers} "
                     f"layer{'s' if layers > 1 else ''} (--layers defaults to "
                     f"{resolve_layers(None)} without a store)")
    perm = manifest["permutation"]["kind"]
    if args.perm is not None and args.perm != perm:
        raise UsageError(f"--perm {args.perm} but {args.shards} was cut with permutation {perm}")
    store_orders = ",".join(manifest["orders"])
    # each layer's order is its first stage's ("dense" where the kind's first stage reads no
    # graph, an MLP's: any order gives it)
    order = shape.order or ",".join(o if o in ORDERS else ORDERS[0]
                                    for o in manifest["orders"][::per])
    store_model = model_config(args, num_layers=layers, order=order)
    sizes = GraphSizes.of_manifest(manifest)
    resolved = ",".join(store_model.orders(sizes.num_features, sizes.num_classes))
    if resolved != store_orders and shape.order is None:  # stages of another kind's layers
        raise UsageError(f"{args.shards} was cut for the stages {store_orders}, which are not "
                         f"--model {args.model} layers ({resolved}): cut a store with "
                         f"plexus-partition --model {args.model}")
    if resolved != store_orders:
        raise UsageError(f"--order {order} gives layer orders {resolved} but {args.shards} was "
                         f"cut for {store_orders}")
    return ProblemShape(store_grid, layers, order, str(manifest.get("dataset", args.shards)), perm,
                  "; ".join(n for n in notes if n))


def store_kind(args: argparse.Namespace, manifest: dict) -> str:
    """Take the model kind a store records (`plexus_partition.store_model`) where --model
    was not given, refuse another one given; returns the note saying which kind was taken ('':
    the store records none, or the one asked for)."""
    from plexus_partition import store_model  # noqa: PLC0415

    recorded = store_model(manifest)
    if recorded is None or recorded == args.model:
        return ""
    if "model" in getattr(args, "explicit", set()) or args.recipe:
        raise UsageError(f"--model {args.model} but {args.shards} was cut for the {recorded} "
                         f"model: drop --model, or cut a store with plexus-partition --model "
                         f"{args.model}")
    args.model = recorded
    return f"{args.shards} was cut for the {recorded} model: training --model {recorded}"


def problem_shape(args: argparse.Namespace) -> ProblemShape:
    """The grid (None: auto), layers, order, dataset and permutation the options ask for, with a
    --shards store's taken from its manifest."""
    # args.grid: a GridShape, or None (auto; a store's grid with --shards)
    shape = ProblemShape(args.grid, args.layers, args.order, args.dataset or "cora")
    if args.shards:
        shape = from_store(args, shape)
    shape.layers = resolve_layers(shape.layers)
    shape.order = resolve_order(shape.order)  # checked with the model (`model_config`)
    return shape
