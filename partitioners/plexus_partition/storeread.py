"""One rank's shard read from a store: only its file, checked against the manifest (size,
sha256, what the caller asked for) and against the grid's layout before the engine indexes it."""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import IO, Mapping, Sequence

import numpy as np

from plexus_partition.model.grid import GridError, GridShape
from plexus_partition.model.layout import layer_plans, pad_to, padding
from plexus_datasets.base.gate import UnsafeTargetError, open_trusted
from plexus_datasets.base.values import is_count, one_line
from plexus_datasets.files import stream_sha256
from plexus_datasets.validate import csr_from_parts, read_npz_member

from .plan import MASKS, RankShard, block_key, labels_fit
from .storeformat import FORMAT, MANIFEST
from .storemanifest import ShardStoreError, read_manifest


def _normalize_orders(num_stages: int, orders: Sequence[str] | str) -> tuple[str, ...]:
    return tuple(p.order for p in layer_plans(num_stages, orders))



def _check_request(manifest: dict, path: Path, coords: dict[str, int],
                   shape: Mapping[str, int] | None, num_stages: int | None,
                   orders: Sequence[str] | str | None, perm: str | None,
                   seed: int | None) -> dict:
    """The manifest's entry of the rank at ``coords``, after checking every value the caller
    gave (None: take the manifest's) against what the store was cut for."""
    try:
        grid = GridShape.of(manifest["grid"])
        if shape is not None and grid != GridShape.of(shape):
            raise ShardStoreError(f"{path}: store was cut for grid {grid}, asked for "
                                  f"{GridShape.of(shape)}")
        if num_stages is not None and manifest["num_stages"] != num_stages:
            raise ShardStoreError(f"{path}: store was cut for {manifest['num_stages']} stages, "
                                  f"asked for {num_stages}")
        if orders is not None:
            want = _normalize_orders(manifest["num_stages"], orders)
            if tuple(manifest["orders"]) != want:
                raise ShardStoreError(f"{path}: store was cut for layer orders "
                                      f"{','.join(manifest['orders'])}, asked for "
                                      f"{','.join(want)}")
        have = manifest["permutation"]
        if perm is not None and have["kind"] != perm:
            raise ShardStoreError(f"{path}: store uses permutation {have['kind']!r}, "
                                  f"asked for {perm!r}")
        if seed is not None and have["seed"] != seed:
            raise ShardStoreError(f"{path}: store uses permutation seed {have['seed']}, "
                                  f"asked for {seed}")
        if any(not 0 <= int(coords[a]) < grid[a] for a in ("x", "y", "z")):
            raise ShardStoreError(f"{path}: coordinates {coords} lie outside grid {grid}")
        entry = [e for e in manifest["ranks"] if e["coords"] == {a: int(coords[a]) for a in "xyz"}]
    except (KeyError, TypeError, AttributeError, GridError) as e:
        raise ShardStoreError(f"{path}: malformed manifest (missing or bad field {e})") from None
    except ValueError as e:  # layer_plans: orders that are no layer orders, or the wrong count
        if isinstance(e, ShardStoreError):
            raise
        raise ShardStoreError(f"{path}: cannot compare layer orders {orders!r:.100} with the "
                              f"store's ({e})") from None
    if len(entry) != 1:
        raise ShardStoreError(f"{path}: manifest lists no single file for rank {coords}")
    return entry[0]


def _rank_coords(manifest: dict, path: Path, rank: int | Mapping[str, int]) -> dict[str, int]:
    """The coordinates of ``rank`` (a global rank number, or already coordinates) on the
    manifest's grid, by the grid's one rule (`GridShape.coords`)."""
    if isinstance(rank, Mapping):
        try:
            return {a: int(rank[a]) for a in "xyz"}
        except (KeyError, TypeError, ValueError):
            raise ShardStoreError(f"{path}: rank {dict(rank)!r:.100} is neither a rank number "
                                  "nor coordinates {x, y, z}") from None
    try:
        number = operator.index(rank) if not isinstance(rank, bool) else None
    except TypeError:
        number = None
    if number is None:
        raise ShardStoreError(f"{path}: rank must be a rank number or coordinates "
                              f"{{x, y, z}}, got {rank!r:.100}")
    try:
        grid = GridShape.of(manifest["grid"])
    except GridError as e:
        raise ShardStoreError(f"{path}: malformed manifest ({e})") from None
    if not 0 <= number < grid.world_size:
        raise ShardStoreError(f"{path}: rank {number} is outside the store's grid {grid} "
                              f"(ranks 0 to {grid.world_size - 1})")
    return grid.coords(number)


def _load_members(f: IO[bytes], path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(f, allow_pickle=False) as npz:
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise ValueError("not an .npz archive")
            return {name: read_npz_member(npz, name, str(path), ShardStoreError)
                    for name in npz.files}
    except ShardStoreError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile also raises NotImplementedError, RuntimeError,
        # zlib.error for unsupported or corrupt archives
        raise ShardStoreError(f"{path}: not a readable shard file ({type(e).__name__}: "
                              f"{one_line(e)[:200]})") from None


def read_shard(store_dir: str | os.PathLike, rank: int | Mapping[str, int], *,
               shape: GridShape | Mapping[str, int] | str | None = None,
               num_stages: int | None = None, orders: Sequence[str] | str | None = None,
               perm: str | None = None, seed: int | None = None,
               verify: bool = True) -> RankShard:
    """Load the `RankShard` of one rank from a store written by `write_store` (or
    ``plexus-partition``): ``read_shard(store_dir, rank)``.

    ``rank`` is the global rank number, whose coordinates come from the manifest's grid by the
    grid's rank order (`plexus_partition.model.grid.GridShape.coords`), or the coordinates
    themselves (``{"x": 1, "y": 0, "z": 1}``). Everything else the store was cut for (grid, layer
    count, orders, permutation and its seed) is read from the manifest; the keyword arguments are
    checks: when given, ``shape``, ``num_stages``, ``orders`` ("agg", "combine" or "dense" per
    stage, or one for all), ``perm`` and ``seed`` must be what the store was cut for.

    Only this rank's file is read, as this user's own state (the manifest too:
    `plexus_datasets.base.gate.open_trusted` refuses a file another user could have chosen or
    may rewrite), from the descriptor it checked. It must match the manifest's size and sha256
    (``verify``); a rank outside the grid, a check that fails or a damaged file is a one-line
    `ShardStoreError` naming the file and what differs.
    """
    store = Path(store_dir)
    manifest = read_manifest(store)
    coords = _rank_coords(manifest, store / MANIFEST, rank)
    entry = _check_request(manifest, store / MANIFEST, coords, shape, num_stages, orders,
                           perm, seed)
    name = str(entry.get("file", ""))
    if not name or Path(name).name != name:
        raise ShardStoreError(f"{store / MANIFEST}: bad file name {name!r} for rank {coords}")
    path = store / name
    try:
        f = open_trusted(path)  # the gate; then sized, hashed and read from this descriptor
    except FileNotFoundError:
        raise ShardStoreError(f"{path}: shard file missing") from None
    except UnsafeTargetError as e:
        raise ShardStoreError(f"shard store {e}") from None
    except OSError as e:
        raise ShardStoreError(f"{path}: cannot open the shard file ({e.strerror or e})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size != entry["size"]:
            what = "truncated" if size < entry["size"] else "wrong size"
            raise ShardStoreError(f"{path}: {what}: {size} bytes, manifest says "
                                  f"{entry.get('size')}")
        if verify:
            if stream_sha256(f) != entry.get("sha256"):
                raise ShardStoreError(f"{path}: sha256 mismatch with the manifest; the file is "
                                      "corrupt")
            f.seek(0)
        members = _load_members(f, path)
    shard = _shard_from_members(path, members, manifest)
    _check_shard(shard, path, manifest, coords)
    return shard


def _shard_from_members(path: Path, m: dict[str, np.ndarray], manifest: dict) -> RankShard:
    try:
        header = json.loads(m["header"].tobytes().decode("utf-8"))
        if (not isinstance(header, dict) or header.get("format") != FORMAT
                or header["shape"] != manifest["grid"]):
            raise ShardStoreError(f"{path}: header does not match the manifest")
        blocks = {}
        for i, key in enumerate(header["block_keys"]):
            rows, cols = header["block_shapes"][key]
            blocks[key] = csr_from_parts(m[f"block{i}.data"], m[f"block{i}.indices"],
                                         m[f"block{i}.indptr"], [rows, cols], str(path),
                                         f"block {key}", ShardStoreError)
        # a rank file written before the one dialect counts its stages as "num_layers"
        num_stages = header["num_stages"] if "num_stages" in header else header.get("num_layers")
        if not is_count(num_stages) or num_stages != manifest["num_stages"]:
            raise ShardStoreError(f"{path}: header says {num_stages!r:.100} stages, the manifest "
                                  f"{manifest['num_stages']}")
        return RankShard(
            shape=GridShape.of(header["shape"]), coords=header["coords"], num_stages=num_stages,
            orders=tuple(header["orders"]), perm=header["perm"], seed=header["seed"],
            name=header["name"], num_nodes=header["num_nodes"],
            nodes_padded=header["nodes_padded"], num_features=header["num_features"],
            features_padded=header["features_padded"], num_classes=header["num_classes"],
            blocks=blocks, features=m["features"],
            input_ids=[m[f"input_ids.{layer}"] for layer in range(num_stages)],
            output_ids=m["output_ids"], labels=m["labels"],
            masks={name: m[f"mask.{name}"] for name in MASKS},
            mask_counts=header["mask_counts"], meta=header["meta"])
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        if isinstance(e, ShardStoreError):  # GridError, DatasetError are ValueErrors too
            raise
        raise ShardStoreError(f"{path}: malformed shard file ({type(e).__name__}: "
                              f"{one_line(e)[:200]})") from None


def _vector(arr: object, length: int, kinds: str) -> bool:
    return (isinstance(arr, np.ndarray) and arr.shape == (length,)
            and arr.dtype.kind in kinds)


def _check_shard(s: RankShard, path: Path, manifest: dict, coords: dict[str, int]) -> None:
    """Every field of a shard read from ``path`` against the manifest and the grid's layout.

    The sha256 in the manifest only proves that a file is the one the manifest names; these
    checks catch a file that is another rank's (files swapped along with their manifest
    entries) or whose content does not fit the configuration, before the engine indexes it.
    """
    def bad(what: str) -> ShardStoreError:
        return ShardStoreError(f"{path}: {what}; the store is damaged or its files were "
                               "swapped, re-run plexus-partition")

    if not isinstance(s.coords, dict) or {a: s.coords.get(a) for a in "xyz"} != coords:
        raise bad(f"holds the shard of rank {s.coords!r:.100}, not of rank {coords}")
    same = {"num_nodes": manifest["num_nodes"], "nodes_padded": manifest["nodes_padded"],
            "num_features": manifest["num_features"], "num_classes": manifest["num_classes"],
            "seed": manifest["permutation"]["seed"], "perm": manifest["permutation"]["kind"],
            "name": manifest["dataset"], "orders": tuple(manifest["orders"])}
    for name, want in same.items():
        have = getattr(s, name)
        if have != want or type(have) is not type(want):
            raise bad(f"{name} is {have!r:.100}, the manifest says {want!r:.100}")
    shape, n, npad = s.shape, s.num_nodes, s.nodes_padded
    try:
        plans = layer_plans(s.num_stages, list(s.orders))
        widths = [s.num_features] + [1] * (s.num_stages - 1) + [s.num_classes]
        fpad = padding(shape, plans, n, widths).widths_padded[0]
    except (ValueError, KeyError, TypeError) as e:
        raise bad(f"unusable layer orders ({e})") from None
    if npad != pad_to(n, shape.world_size) or s.features_padded != fpad:
        raise bad(f"padded sizes {npad}, {s.features_padded} do not fit the grid")
    expect_blocks = {}
    for plan in (p for p in plans if not p.dense):
        expect_blocks.setdefault(block_key(plan),
                                 (npad // shape[plan.a_rows], npad // shape[plan.a_cols]))
    if {k: b.shape for k, b in s.blocks.items()} != expect_blocks:
        raise bad("its adjacency blocks do not have the grid's block shapes")
    for key, blk in s.blocks.items():
        if blk.dtype != np.float32 or not np.isfinite(blk.data).all():
            raise bad(f"block {key} is not finite float32")
    for layer, (plan, ids) in enumerate(zip(plans, s.input_ids)):
        if (not _vector(ids, npad // shape[plan.in_rows], "iu") or
                (ids.size and (ids.min() < -1 or ids.max() >= n))):
            raise bad(f"input_ids.{layer} do not fit the grid and {n} nodes")
    rows = len(s.input_ids[0]) // shape[plans[0].depth]
    if not (isinstance(s.features, np.ndarray) and s.features.dtype == np.float32
            and s.features.shape == (rows, fpad // shape[plans[0].in_cols])
            and np.isfinite(s.features).all()):
        raise bad("its features are not a finite float32 block of the grid's shape")
    out = npad // shape[plans[-1].out_rows]
    if (not _vector(s.output_ids, out, "iu") or
            (out and (s.output_ids.min() < -1 or s.output_ids.max() >= n))):
        raise bad(f"output_ids do not fit the grid and {n} nodes")
    if not labels_fit(s.labels, out, s.num_classes):
        raise bad(f"labels are neither {out} ids in [-1, {s.num_classes - 1}] nor an int8 "
                  f"{out}x{s.num_classes} matrix of 0, 1 and -1")
    if not all(_vector(s.masks[k], out, "b") for k in MASKS):
        raise bad(f"masks are not {out} booleans each")
    if not (isinstance(s.mask_counts, dict) and set(s.mask_counts) == set(MASKS)
            and all(is_count(v) and v <= n for v in s.mask_counts.values())
            and isinstance(s.meta, dict)):
        raise bad("mask counts or meta are malformed")
