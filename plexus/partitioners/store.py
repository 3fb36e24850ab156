"""On-disk shard store: one verified file per rank, written atomically and streamed.

Layout of a store directory::

    manifest.json            format/version, grid, layers, orders, permutation, seed, sizes,
                             dataset name, sha256 of the source graph, and per rank its file,
                             size and sha256
    rank-x0-y0-z0.npz ...    exactly that rank's `RankShard` (plain .npy members, no pickle)

Writing (`plexus.partitioners.stream`, the out-of-core partitioner; `write_store` runs it on an
in-memory graph) goes into a hidden work directory next to the target and is renamed into place
at the end, so a crash never leaves a directory that looks complete. Reading
(``read_shard(store_dir, rank)``) opens only the caller's file, checks its size and sha256
against the manifest, takes the grid, layer count, orders and permutation from the manifest and,
where the caller names them too, checks that the store was cut for those.
Files are byte-identical for the same inputs and seed (fixed zip timestamps, no clock, no pids).
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus.core import owned
from plexus.core.atomic import UnsafeTargetError, replace_directory, replaceable_directory
from plexus.core.grid import GridError, GridShape
from plexus.core.layout import DEFAULT_PERMUTATION, layer_plans, pad_to, padding
from plexus.core.ops import KINDS
from plexus.core.values import is_count, one_line
from plexus.datasets.diskgraph import MemoryGraph
from plexus.datasets.graph import AGGREGATIONS, Graph, incoming
from plexus.datasets.validate import csr_from_parts, read_npz_member
from plexus.datasets.work import Runner

from .permutations import Permutation
from .plan import MASKS, RankShard, block_key, labels_fit
# the format's names stay importable from here, the store's module, for its readers
from .storeformat import (FORMAT, MANIFEST, MAX_MANIFEST_BYTES, VERSION,  # noqa: F401
                          file_sha256, gnn_layers, rank_file_name)
from .stream import Settings, partition_source
from .streamjob import PartitionError
from .workdir import stage_work_dir


class ShardStoreError(ValueError):
    """A shard store is missing, corrupt, or was cut for another configuration (one line)."""


# --------------------------------------------------------------------------- small helpers


def _hash_array(h: "hashlib._Hash", arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr)
    h.update(f"{arr.dtype.str}{arr.shape};".encode())
    h.update(memoryview(arr).cast("B"))


def graph_hash(graph: Graph) -> str:
    """sha256 of a graph's content: its incoming adjacency M (M[i, j] for an edge j -> i, as
    `plexus.datasets.graph.incoming` builds it) in canonical CSR form, features, labels, masks
    and class count. The out-of-core partitioner computes the same hash from pieces of M
    (`plexus.datasets.canonical.structure_sha256`)."""
    h = hashlib.sha256()
    m = incoming(graph.adj, graph.directed)
    idx = np.int32 if max(graph.num_nodes, m.nnz) < 2**31 else np.int64
    h.update(f"N={graph.num_nodes};C={graph.num_classes};directed={graph.directed};".encode())
    for arr in (m.indptr.astype(idx), m.indices.astype(idx), np.ones(m.nnz, np.float32),
                graph.features, graph.labels, graph.train_mask, graph.val_mask, graph.test_mask):
        _hash_array(h, arr)
    return h.hexdigest()


def array_hash(arr: np.ndarray) -> str:
    """sha256 of one array (dtype, shape and bytes)."""
    h = hashlib.sha256()
    _hash_array(h, arr)
    return h.hexdigest()


def _normalize_orders(num_layers: int, orders: Sequence[str] | str) -> tuple[str, ...]:
    return tuple(p.order for p in layer_plans(num_layers, orders))


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a shard-store manifest."""
    try:
        manifest = Path(path) / MANIFEST
        if not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return False
        with open(manifest, encoding="utf-8") as f:
            return json.load(f).get("format") == FORMAT
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def is_own_store(path: str | os.PathLike, exact: bool = True) -> bool:
    """Whether ``path`` is a shard store this user's Plexus wrote, exactly as written: its
    seal (`plexus.core.owned`, under this user's key) lists every file there, the manifest by
    sha256. A folder that merely holds a store-format manifest (or a store with a file added)
    is not. Not ``exact``: its files may have been damaged since (it may be replaced, never
    reused)."""
    return owned.is_sealed(path, FORMAT, exact=exact)


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Refuse a target that exists and is neither an empty directory nor a shard store this
    user wrote with nothing added (`is_own_store`, not exact: a damaged one is replaced),
    naming why in one line."""
    path = Path(out_dir)
    if path.is_dir() and not path.is_symlink() and any(path.iterdir()):
        why = owned.seal_problem(path, FORMAT, exact=False)
        if why is not None:
            raise ShardStoreError(f"{why}; not a shard store this user's Plexus wrote, refusing "
                                  "to replace it (give another --out, or remove it yourself "
                                  "if it is yours)")
    out = replaceable_directory(path, lambda p: is_own_store(p, exact=False),
                                "a shard store this user's Plexus wrote", ShardStoreError)
    if out.parent.exists() and not out.parent.is_dir():
        raise ShardStoreError(f"{out.parent}: not a directory, cannot hold the store")
    return out


# --------------------------------------------------------------------------- writing


def write_store(graph: Graph, out_dir: str | os.PathLike, shape: GridShape | Mapping[str, int],
                num_layers: int,
                orders: Sequence[str] | str = "agg", perm: str | Permutation = DEFAULT_PERMUTATION,
                seed: int = 0, *, adj_hat: sp.csr_matrix | None = None,
                aggregation: str | None = None, chunk_nnz: int | None = None,
                model: str | None = None) -> dict:
    """Partition the in-memory ``graph`` for a grid ``shape`` and write one shard file per rank
    to ``out_dir``; returns the manifest.

    This is the out-of-core partitioner (`plexus.partitioners.stream`) run in this process on
    the graph as it is in memory, with one chunk (``chunk_nnz``: a smaller chunk and bucket size,
    for tests); the store is the same, byte for byte, as `partition_to_store` writes from the
    graph on disk. ``perm`` is a permutation kind or a built `Permutation`. ``adj_hat`` is
    accepted for compatibility and not used: Â is built while streaming, exactly as
    `plexus.datasets.normalize` builds it. An existing store at ``out_dir`` (or an empty
    directory) is replaced only once the new one is complete; anything else there is refused
    with `ShardStoreError`. ``model``: the kind the store records it was cut for (its Â is then
    the kind's; ``num_layers`` counts stages, whole layers of the kind's); ``aggregation``
    without one: a store of that Â and the orders only (default GCN's).
    """
    del adj_hat
    out = check_out_dir(out_dir)
    try:
        shape = GridShape.of(shape)
    except GridError as e:
        raise ShardStoreError(str(e)) from None
    source = MemoryGraph(graph)
    size = max(1, source.num_edges * 2 + graph.num_nodes)
    settings = Settings(chunk_edges=chunk_nnz or size, bucket_entries=chunk_nnz or size,
                        feature_bytes=max(1, 4 * graph.num_nodes * graph.num_features))
    work = stage_work_dir(out, None)
    try:
        with Runner(work, progress=False) as runner:
            return partition_source(source, out, shape, num_layers, orders, perm, seed,
                                    store_aggregation_of(model, aggregation), runner, work,
                                    settings, replace_store_dir, model)
    except PartitionError as e:
        raise ShardStoreError(str(e)) from None
    finally:
        owned.remove_tree(work, quiet=True)


def replace_store_dir(new: Path, out: Path) -> None:
    """Move the finished store ``new`` to ``out``; an old store there is moved aside, then
    removed (a crash in between leaves one of the two, never a mix)."""
    try:
        replace_directory(new, out, check_out_dir, seal=FORMAT, describes=(MANIFEST,))
    except UnsafeTargetError as e:
        raise ShardStoreError(str(e)) from None


# --------------------------------------------------------------------------- reading


def read_manifest(store_dir: str | os.PathLike) -> dict:
    """The manifest of a store; `ShardStoreError` when it is missing or not a store's."""
    path = Path(store_dir) / MANIFEST
    try:
        if not path.is_file():
            raise FileNotFoundError(path)
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ShardStoreError(f"{path}: {path.stat().st_size} bytes, more than a manifest "
                                  f"has ({MAX_MANIFEST_BYTES}); the store is damaged")
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ShardStoreError(f"{path}: missing; {store_dir} is not a shard store") from None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: absurdly nested JSON
        raise ShardStoreError(f"{path}: unreadable manifest ({type(e).__name__}: "
                              f"{one_line(e)[:200]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShardStoreError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise ShardStoreError(f"{path}: format version {manifest.get('version')}, this reader "
                              f"supports {VERSION}; re-run plexus-partition")
    _upgrade_manifest(manifest)
    _check_manifest_fields(manifest, path)
    return manifest


def _upgrade_manifest(manifest: dict) -> None:
    """A manifest written before the store recorded stages and GNN layers apart named its stage
    count ``num_layers``: read it as ``num_stages``. One that records no model kind records no
    GNN layers either: the ``gnn_layers`` stores of that time wrote came from a guess of the
    kind from the aggregation (GIN's for "sum", wrong for GraphConv), so it is dropped and the
    kind that trains says how many layers the stages make."""
    if "num_stages" not in manifest and "num_layers" in manifest:
        manifest["num_stages"] = manifest.pop("num_layers")
    if "model" not in manifest:
        manifest.pop("gnn_layers", None)


# Every field a reader relies on, with its JSON type.
_MANIFEST_FIELDS = {"grid": dict, "num_stages": int, "orders": list, "permutation": dict,
                    "seed": int, "dataset": str, "graph_sha256": str, "num_nodes": int,
                    "nodes_padded": int, "nnz": int, "num_features": int, "num_classes": int,
                    "block_keys": list, "ranks": list}


#: What a store whose manifest names no aggregation holds (written before the manifest recorded
#: it): GCN's normalized Â, the only one those partitioners cut.
LEGACY_AGGREGATION = "gcn"


def store_aggregation(manifest: dict) -> str:
    """The aggregation a store's Â is normalized for ("gcn", "mean" or "sum"; see
    `plexus.datasets.graph.AGGREGATIONS`): the manifest's, or GCN's for an older store."""
    return str(manifest.get("aggregation", LEGACY_AGGREGATION))


def store_model(manifest: dict) -> str | None:
    """The model kind a store was cut for (`plexus.core.ops.KINDS`), None where it records none
    (a store of Â and orders only: `plexus.train.cache`'s, and those written before kinds were
    recorded)."""
    model = manifest.get("model")
    return None if model is None else str(model)


def store_aggregation_of(model: str | None, aggregation: str | None) -> str:
    """The Â a store is cut for: the ``model`` kind's (declared in `plexus.core.ops`), else
    ``aggregation``, else GCN's; `ShardStoreError` when both are given and disagree."""
    if model is not None and model in KINDS:
        wanted = KINDS[model].aggregation
        if aggregation is not None and aggregation != wanted:
            raise ShardStoreError(f"the {model} model aggregates with {wanted}'s Â, not "
                                  f"{aggregation}'s; give one of the two")
        return wanted
    return aggregation or LEGACY_AGGREGATION


def _check_manifest_fields(manifest: dict, path: Path) -> None:
    """`ShardStoreError` naming the first missing or mistyped field of a manifest."""
    def bad(what: str) -> ShardStoreError:
        return ShardStoreError(f"{path}: {what}; the manifest is damaged, re-run "
                               "plexus-partition")

    for key, kind in _MANIFEST_FIELDS.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or (kind is int and not is_count(value)):
            raise bad(f"field {key!r} missing or not a {'non-negative ' if kind is int else ''}"
                      f"{kind.__name__}")
    if manifest.get("aggregation", LEGACY_AGGREGATION) not in AGGREGATIONS:
        raise bad(f"aggregation {manifest.get('aggregation')!r:.40} is not one of "
                  f"{', '.join(AGGREGATIONS)}")
    model = manifest.get("model")
    if model is not None:
        if model not in KINDS or KINDS[model].aggregation != store_aggregation(manifest):
            raise bad(f"model {model!r:.40} is not a kind of {store_aggregation(manifest)}'s Â "
                      f"({', '.join(k for k in KINDS)})")
        layers = manifest.get("gnn_layers")
        if not is_count(layers) or layers != gnn_layers(manifest["num_stages"], model):
            raise bad(f"gnn_layers {layers!r:.40} does not match {manifest['num_stages']} "
                      f"stages of {model}")
    grid, perm = manifest["grid"], manifest["permutation"]
    if not all(is_count(grid.get(a)) and grid[a] >= 1 for a in ("x", "y", "z")) \
            or not isinstance(perm.get("kind"), str) or not is_count(perm.get("seed")):
        raise bad("bad grid or permutation")
    if not all(isinstance(o, str) for o in manifest["orders"] + manifest["block_keys"]):
        raise bad("orders and block_keys must be lists of strings")
    for entry in manifest["ranks"]:
        coords = entry.get("coords") if isinstance(entry, dict) else None
        if not (isinstance(coords, dict) and all(is_count(coords.get(a)) for a in "xyz")
                and isinstance(entry.get("file"), str) and is_count(entry.get("size"))
                and isinstance(entry.get("sha256"), str)):
            raise bad("a 'ranks' entry lacks coords {x, y, z}, file, size or sha256")


def _check_request(manifest: dict, path: Path, coords: dict[str, int],
                   shape: Mapping[str, int] | None, num_layers: int | None,
                   orders: Sequence[str] | str | None, perm: str | None,
                   seed: int | None) -> dict:
    """The manifest's entry of the rank at ``coords``, after checking every value the caller
    gave (None: take the manifest's) against what the store was cut for."""
    try:
        grid = GridShape.of(manifest["grid"])
        if shape is not None and grid != GridShape.of(shape):
            raise ShardStoreError(f"{path}: store was cut for grid {grid}, asked for "
                                  f"{GridShape.of(shape)}")
        if num_layers is not None and manifest["num_stages"] != num_layers:
            raise ShardStoreError(f"{path}: store was cut for {manifest['num_stages']} layers, "
                                  f"asked for {num_layers}")
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


def _load_members(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
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
               num_layers: int | None = None, orders: Sequence[str] | str | None = None,
               perm: str | None = None, seed: int | None = None,
               verify: bool = True) -> RankShard:
    """Load the `RankShard` of one rank from a store written by `write_store` (or
    ``plexus-partition``): ``read_shard(store_dir, rank)``.

    ``rank`` is the global rank number, whose coordinates come from the manifest's grid by the
    grid's rank order (`plexus.core.grid.GridShape.coords`), or the coordinates themselves
    (``{"x": 1, "y": 0, "z": 1}``). Everything else the store was cut for (grid, layer count,
    orders, permutation and its seed) is read from the manifest; the keyword arguments are
    checks: when given, ``shape``, ``num_layers``, ``orders`` ("agg", "combine" or "dense" per
    stage, or one for all), ``perm`` and ``seed`` must be what the store was cut for.

    Only this rank's file is read. It must match the manifest's size and sha256 (``verify``);
    a rank outside the grid, a check that fails or a damaged file is a one-line
    `ShardStoreError` naming the file and what differs.
    """
    store = Path(store_dir)
    manifest = read_manifest(store)
    coords = _rank_coords(manifest, store / MANIFEST, rank)
    entry = _check_request(manifest, store / MANIFEST, coords, shape, num_layers, orders,
                           perm, seed)
    name = str(entry.get("file", ""))
    if not name or Path(name).name != name:
        raise ShardStoreError(f"{store / MANIFEST}: bad file name {name!r} for rank {coords}")
    path = store / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ShardStoreError(f"{path}: shard file missing") from None
    if size != entry["size"]:
        what = "truncated" if size < entry["size"] else "wrong size"
        raise ShardStoreError(f"{path}: {what}: {size} bytes, manifest says {entry.get('size')}")
    if verify and file_sha256(path) != entry.get("sha256"):
        raise ShardStoreError(f"{path}: sha256 mismatch with the manifest; the file is corrupt")
    members = _load_members(path)
    shard = _shard_from_members(path, members, manifest)
    _check_shard(shard, path, manifest, coords)
    return shard


def _shard_from_members(path: Path, m: dict[str, np.ndarray], manifest: dict) -> RankShard:
    try:
        header = json.loads(m["header"].tobytes().decode("utf-8"))
        if not isinstance(header, dict) or header.get("format") != FORMAT \
                or header["shape"] != manifest["grid"]:
            raise ShardStoreError(f"{path}: header does not match the manifest")
        blocks = {}
        for i, key in enumerate(header["block_keys"]):
            rows, cols = header["block_shapes"][key]
            blocks[key] = csr_from_parts(m[f"block{i}.data"], m[f"block{i}.indices"],
                                         m[f"block{i}.indptr"], [rows, cols], str(path),
                                         f"block {key}", ShardStoreError)
        num_layers = header["num_layers"]
        if not is_count(num_layers) or num_layers != manifest["num_stages"]:
            raise ShardStoreError(f"{path}: header says {num_layers!r:.100} layers, the manifest "
                                  f"{manifest['num_stages']}")
        return RankShard(
            shape=GridShape.of(header["shape"]), coords=header["coords"], num_layers=num_layers,
            orders=tuple(header["orders"]), perm=header["perm"], seed=header["seed"],
            name=header["name"], num_nodes=header["num_nodes"],
            nodes_padded=header["nodes_padded"], num_features=header["num_features"],
            features_padded=header["features_padded"], num_classes=header["num_classes"],
            blocks=blocks, features=m["features"],
            input_ids=[m[f"input_ids.{layer}"] for layer in range(num_layers)],
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
        plans = layer_plans(s.num_layers, list(s.orders))
        widths = [s.num_features] + [1] * (s.num_layers - 1) + [s.num_classes]
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
        if not _vector(ids, npad // shape[plan.in_rows], "iu") or \
                (ids.size and (ids.min() < -1 or ids.max() >= n)):
            raise bad(f"input_ids.{layer} do not fit the grid and {n} nodes")
    rows = len(s.input_ids[0]) // shape[plans[0].depth]
    if not (isinstance(s.features, np.ndarray) and s.features.dtype == np.float32
            and s.features.shape == (rows, fpad // shape[plans[0].in_cols])
            and np.isfinite(s.features).all()):
        raise bad("its features are not a finite float32 block of the grid's shape")
    out = npad // shape[plans[-1].out_rows]
    if not _vector(s.output_ids, out, "iu") or \
            (out and (s.output_ids.min() < -1 or s.output_ids.max() >= n)):
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
