"""On-disk shard store: one verified file per rank, written atomically and streamed.

Layout of a store directory::

    manifest.json            format/version, grid, layers, orders, permutation, seed, sizes,
                             dataset name, sha256 of the source graph, and per rank its file,
                             size and sha256
    rank-x0-y0-z0.npz ...    exactly that rank's `RankShard` (plain .npy members, no pickle)

Writing goes into a hidden temporary directory next to the target and is renamed into place at
the end, so a crash never leaves a directory that looks complete. Â is cut one row group (and
one chunk of rows) at a time; each unique block is written once as parts and then copied into
the files of the ranks that replicate it, so memory stays bounded by a row group, not the graph.
Reading opens only the caller's file, checks its size and sha256 against the manifest, and
checks that the store was cut for the grid, layer count, orders and permutation asked for.
Files are byte-identical for the same inputs and seed (fixed zip timestamps, no clock, no pids).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from plexus.core.atomic import fsync_dir
from plexus.core.grid import GridError, GridShape
from plexus.core.layout import DEFAULT_PERMUTATION, layer_plans, pad_to, padding
from plexus.datasets.graph import Graph, normalize
from plexus.datasets.validate import csr_from_parts, read_npz_member

from .permutations import Permutation, make_permutation
from .plan import MASKS, RankShard, block_key, col_order, padded_ids, row_order, shard_graph
from .stats import inverse, row_chunks

FORMAT = "plexus-shard-store"
VERSION = 1
MANIFEST = "manifest.json"
#: Â rows are cut in chunks of about this many non-zeros while writing
WRITE_CHUNK_NNZ = 1 << 24
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed: zip entries otherwise carry the wall clock
_HASH_BUF = 1 << 20
#: A manifest is a few hundred bytes per rank; anything far larger is not one
MAX_MANIFEST_BYTES = 64 << 20


class ShardStoreError(ValueError):
    """A shard store is missing, corrupt, or was cut for another configuration (one line)."""


# --------------------------------------------------------------------------- small helpers


def rank_file_name(coords: dict[str, int]) -> str:
    """File of the rank at ``coords`` inside a store."""
    return f"rank-x{coords['x']}-y{coords['y']}-z{coords['z']}.npz"


def _hash_array(h: "hashlib._Hash", arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr)
    h.update(f"{arr.dtype.str}{arr.shape};".encode())
    h.update(memoryview(arr).cast("B"))


def graph_hash(graph: Graph) -> str:
    """sha256 of a graph's content (adjacency, features, labels, masks, class count)."""
    h = hashlib.sha256()
    adj = sp.csr_matrix(graph.adj)
    h.update(f"N={graph.num_nodes};C={graph.num_classes};directed={graph.directed};".encode())
    for arr in (adj.indptr, adj.indices, adj.data, graph.features, graph.labels,
                graph.train_mask, graph.val_mask, graph.test_mask):
        _hash_array(h, arr)
    return h.hexdigest()


def array_hash(arr: np.ndarray) -> str:
    """sha256 of one array (dtype, shape and bytes)."""
    h = hashlib.sha256()
    _hash_array(h, arr)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB pieces (memory independent of the file size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_BUF):
            h.update(chunk)
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


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """Refuse a target that exists and is neither a shard store nor an empty directory."""
    out = Path(out_dir)
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise ShardStoreError(f"{out}: exists and is not a directory; refusing to replace it")
        if not is_store(out) and any(out.iterdir()):
            raise ShardStoreError(f"{out}: exists and is not a shard store (no valid {MANIFEST});"
                                  " refusing to overwrite it")
    if out.parent.exists() and not out.parent.is_dir():
        raise ShardStoreError(f"{out.parent}: not a directory, cannot hold the store")
    return out


# --------------------------------------------------------------------------- writing


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3
    info.external_attr = 0o644 << 16
    return info


def _index_dtype(limit: int) -> np.dtype:
    return np.dtype(np.int32) if limit < np.iinfo(np.int32).max else np.dtype(np.int64)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)


def _cut_row_group(adj_hat: sp.csr_matrix, ids: np.ndarray, col_pos: np.ndarray, rs: int,
                   cs: int, nc: int, chunk_nnz: int) -> Iterator[tuple[int, sp.csr_matrix]]:
    """The ``nc`` column blocks (rs x cs CSR, sorted) of the rows ``ids`` of Â, one at a time.

    Rows are read in chunks of about ``chunk_nnz`` non-zeros; each chunk is sorted by (column
    block, row, column) and split, so only the row group's entries (as int32/float32 triples)
    and one chunk's work arrays are in memory at once.
    """
    row_t, col_t = _index_dtype(rs), _index_dtype(cs)
    pieces: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(nc)]
    local_ptr = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.diff(adj_hat.indptr)[ids], out=local_ptr[1:])
    for lo, hi in row_chunks(local_ptr, chunk_nnz):
        sub = adj_hat[ids[lo:hi]]
        pos = col_pos[sub.indices]
        cb = pos // cs
        row = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(sub.indptr))
        order = np.argsort((cb * rs + row) * cs + (pos - cb * cs))  # keys are unique
        bounds = np.searchsorted(cb[order], np.arange(nc + 1))
        for c in range(nc):
            sel = order[bounds[c]:bounds[c + 1]]
            pieces[c].append((row[sel].astype(row_t), (pos[sel] - c * cs).astype(col_t),
                              sub.data[sel].astype(np.float32, copy=False)))
        del sub, pos, cb, row, order
    for c in range(nc):
        got, pieces[c] = pieces[c], []
        if not got:
            got = [(np.zeros(0, row_t), np.zeros(0, col_t), np.zeros(0, np.float32))]
        rows, cols, data = (np.concatenate([p[k] for p in got]) for k in range(3))
        del got
        idx_t = _index_dtype(max(rs, cs, len(cols)))  # what scipy would pick
        indptr = np.zeros(rs + 1, dtype=idx_t)
        np.cumsum(np.bincount(rows, minlength=rs), out=indptr[1:])
        del rows
        yield c, sp.csr_matrix((data, cols.astype(idx_t, copy=False), indptr), shape=(rs, cs))


def _write_block_parts(adj_hat: sp.csr_matrix, perm: Permutation, shape: dict[str, int],
                       plans, npad: int, parts: Path, chunk_nnz: int) -> list[str]:
    """Cut every distinct Â block of the grid and save it as three .npy parts.

    Parts are named ``{key index}-{row block}-{col block}.{indptr,indices,data}.npy``; Â_k is
    cut one row group at a time (`_cut_row_group`).
    """
    keys: list[str] = []
    for plan in plans:
        key = block_key(plan)
        if key in keys or plan.dense:
            continue
        keys.append(key)
        nr, nc = shape[plan.a_rows], shape[plan.a_cols]
        rs, cs = npad // nr, npad // nc
        rows_all = padded_ids(row_order(perm, plan.adj), npad)
        col_pos = inverse(col_order(perm, plan.adj))
        for r in range(nr):
            ids = rows_all[r * rs:(r + 1) * rs]
            ids = ids[ids >= 0]  # padding is a suffix of the order
            for c, blk in _cut_row_group(adj_hat, ids, col_pos, rs, cs, nc, chunk_nnz):
                stem = parts / f"{len(keys) - 1}-{r}-{c}"
                for part in ("indptr", "indices", "data"):
                    _save_npy(stem.with_suffix(f".{part}.npy"), getattr(blk, part))
                del blk
    return keys


def _shard_header(shard: RankShard, keys: Sequence[str],
                  block_shapes: dict[str, list[int]]) -> dict:
    shape = {a: int(v) for a, v in shard.shape.items()}
    coords = {a: int(v) for a, v in shard.coords.items()}
    return {"format": FORMAT, "version": VERSION, "shape": shape, "coords": coords,
            "num_layers": int(shard.num_layers), "orders": list(shard.orders),
            "perm": shard.perm, "seed": int(shard.seed), "name": shard.name,
            "num_nodes": int(shard.num_nodes), "nodes_padded": int(shard.nodes_padded),
            "num_features": int(shard.num_features),
            "features_padded": int(shard.features_padded), "num_classes": int(shard.num_classes),
            "mask_counts": {k: int(v) for k, v in shard.mask_counts.items()},
            "block_keys": list(keys), "block_shapes": block_shapes, "meta": shard.meta}


def _vector_members(shard: RankShard) -> Iterator[tuple[str, np.ndarray]]:
    yield "features", shard.features
    for layer, ids in enumerate(shard.input_ids):
        yield f"input_ids.{layer}", ids
    yield "output_ids", shard.output_ids
    yield "labels", shard.labels
    for name in MASKS:
        yield f"mask.{name}", shard.masks[name]


def _write_rank_file(path: Path, shard: RankShard, keys: Sequence[str],
                     block_parts: dict[str, Path], block_shapes: dict[str, list[int]]) -> None:
    """One rank's .npz: its blocks (copied from the parts), its vectors, and a JSON header."""
    with open(path, "wb") as raw:
        with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as zf:
            for i, key in enumerate(keys):
                for part in ("indptr", "indices", "data"):
                    info = _zip_info(f"block{i}.{part}.npy")
                    with open(block_parts[key].with_suffix(f".{part}.npy"), "rb") as src, \
                            zf.open(info, "w", force_zip64=True) as dst:
                        shutil.copyfileobj(src, dst, _HASH_BUF)
            members = list(_vector_members(shard))
            header = json.dumps(_shard_header(shard, keys, block_shapes), sort_keys=True)
            members.append(("header", np.frombuffer(header.encode(), dtype=np.uint8)))
            for name, arr in members:
                with zf.open(_zip_info(f"{name}.npy"), "w", force_zip64=True) as dst:
                    np.lib.format.write_array(dst, np.ascontiguousarray(arr), allow_pickle=False)
        raw.flush()  # after the zip's central directory
        os.fsync(raw.fileno())


def write_store(graph: Graph, out_dir: str | os.PathLike, shape: GridShape | Mapping[str, int],
                num_layers: int,
                orders: Sequence[str] | str = "agg", perm: str | Permutation = DEFAULT_PERMUTATION,
                seed: int = 0, *, adj_hat: sp.csr_matrix | None = None,
                aggregation: str = "gcn", chunk_nnz: int = WRITE_CHUNK_NNZ) -> dict:
    """Partition ``graph`` for a grid ``shape`` and write one shard file per rank to ``out_dir``.

    ``perm`` is a permutation kind or a built `Permutation`; ``adj_hat`` (Â normalized for
    ``aggregation``, `plexus.datasets.normalize`) can be passed to reuse it. An existing store at ``out_dir`` (or an empty directory) is
    replaced only once the new one is complete; anything else there is refused with
    `ShardStoreError`. Returns the manifest.
    """
    out = check_out_dir(out_dir)
    try:
        shape = GridShape.of(shape)
    except GridError as e:
        raise ShardStoreError(str(e)) from None
    plans = layer_plans(num_layers, orders)
    world = shape.world_size
    if adj_hat is None:
        adj_hat = normalize(graph.adj, graph.directed, aggregation)
    adj_hat = sp.csr_matrix(adj_hat)
    if not isinstance(perm, Permutation):
        perm = make_permutation(adj_hat, perm, seed, world)
    n = graph.num_nodes
    if adj_hat.shape != (n, n) or len(perm.p1) != n or len(perm.p2) != n:
        raise ShardStoreError(f"adjacency {adj_hat.shape} / permutation of {len(perm.p1)} nodes "
                              f"do not match the graph's {n} nodes")
    npad = pad_to(n, world)
    # the vectors of a shard come from shard_graph on an edgeless copy (cheap), blocks from parts
    no_edges = sp.csr_matrix((n, n), dtype=np.float32)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the store is read by every rank's process
        parts = tmp / ".parts"
        parts.mkdir()
        keys = _write_block_parts(adj_hat, perm, shape, plans, npad, parts, chunk_nnz)
        ranks = []
        for coords in map(shape.coords, range(world)):
            shard = shard_graph(graph, shape, coords, num_layers, orders, perm, seed,
                                adj_hat=no_edges, aggregation=aggregation)
            block_parts, block_shapes = {}, {}
            for plan in plans:
                key = block_key(plan)
                if key in block_parts or plan.dense:
                    continue
                r, c = coords[plan.a_rows], coords[plan.a_cols]
                block_parts[key] = parts / f"{keys.index(key)}-{r}-{c}"
                block_shapes[key] = [npad // shape[plan.a_rows], npad // shape[plan.a_cols]]
            name = rank_file_name(coords)
            _write_rank_file(tmp / name, shard, keys, block_parts, block_shapes)
            ranks.append({"coords": coords, "file": name, "size": (tmp / name).stat().st_size,
                          "sha256": file_sha256(tmp / name)})
        shutil.rmtree(parts)
        manifest = {
            "format": FORMAT, "version": VERSION, "grid": shape.as_dict(),
            "num_layers": num_layers,
            "orders": [p.order for p in plans], "aggregation": aggregation,
            "permutation": {"kind": perm.kind, "seed": perm.seed, "locality": perm.locality,
                            "p1_sha256": array_hash(perm.p1), "p2_sha256": array_hash(perm.p2)},
            "seed": perm.seed, "dataset": graph.name, "graph_sha256": graph_hash(graph),
            "num_nodes": n, "nodes_padded": npad, "nnz": int(adj_hat.nnz),
            "num_features": graph.num_features, "num_classes": graph.num_classes,
            "block_keys": keys, "ranks": ranks,
        }
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _replace_dir(new: Path, out: Path) -> None:
    """Move the finished ``new`` to ``out``; an old store there is moved aside, then removed."""
    check_out_dir(out)  # the target may have changed while we were writing
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
    os.rename(new, out)
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


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
                              f"{' '.join(str(e).split())[:200]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShardStoreError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise ShardStoreError(f"{path}: format version {manifest.get('version')}, this reader "
                              f"supports {VERSION}; re-run plexus-partition")
    _check_manifest_fields(manifest, path)
    return manifest


# Every field a reader relies on, with its JSON type.
_MANIFEST_FIELDS = {"grid": dict, "num_layers": int, "orders": list, "permutation": dict,
                    "seed": int, "dataset": str, "graph_sha256": str, "num_nodes": int,
                    "nodes_padded": int, "nnz": int, "num_features": int, "num_classes": int,
                    "block_keys": list, "ranks": list}


def _is_count(value: object) -> bool:
    """A non-negative JSON integer (``true`` is not one, although Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_manifest_fields(manifest: dict, path: Path) -> None:
    """`ShardStoreError` naming the first missing or mistyped field of a manifest."""
    def bad(what: str) -> ShardStoreError:
        return ShardStoreError(f"{path}: {what}; the manifest is damaged, re-run "
                               "plexus-partition")

    for key, kind in _MANIFEST_FIELDS.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or (kind is int and not _is_count(value)):
            raise bad(f"field {key!r} missing or not a {'non-negative ' if kind is int else ''}"
                      f"{kind.__name__}")
    grid, perm = manifest["grid"], manifest["permutation"]
    if not all(_is_count(grid.get(a)) and grid[a] >= 1 for a in ("x", "y", "z")) \
            or not isinstance(perm.get("kind"), str) or not _is_count(perm.get("seed")):
        raise bad("bad grid or permutation")
    if not all(isinstance(o, str) for o in manifest["orders"] + manifest["block_keys"]):
        raise bad("orders and block_keys must be lists of strings")
    for entry in manifest["ranks"]:
        coords = entry.get("coords") if isinstance(entry, dict) else None
        if not (isinstance(coords, dict) and all(_is_count(coords.get(a)) for a in "xyz")
                and isinstance(entry.get("file"), str) and _is_count(entry.get("size"))
                and isinstance(entry.get("sha256"), str)):
            raise bad("a 'ranks' entry lacks coords {x, y, z}, file, size or sha256")


def _check_request(manifest: dict, path: Path, shape: Mapping[str, int], coords: dict[str, int],
                   num_layers: int, orders: tuple[str, ...], perm: str | None,
                   seed: int | None) -> dict:
    try:
        grid, want = GridShape.of(manifest["grid"]), GridShape.of(shape)
        if grid != want:
            raise ShardStoreError(f"{path}: store was cut for grid {grid}, asked for {want}")
        if manifest["num_layers"] != num_layers:
            raise ShardStoreError(f"{path}: store was cut for {manifest['num_layers']} layers, "
                                  f"asked for {num_layers}")
        if tuple(manifest["orders"]) != orders:
            raise ShardStoreError(f"{path}: store was cut for layer orders "
                                  f"{','.join(manifest['orders'])}, asked for {','.join(orders)}")
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
    if len(entry) != 1:
        raise ShardStoreError(f"{path}: manifest lists no single file for rank {coords}")
    return entry[0]


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
                              f"{' '.join(str(e).split())[:200]})") from None


def read_shard(store_dir: str | os.PathLike, shape: Mapping[str, int], coords: dict[str, int],
               num_layers: int, orders: Sequence[str] | str = "agg", perm: str | None = None,
               seed: int | None = None, verify: bool = True) -> RankShard:
    """Load the `RankShard` of the rank at ``coords`` from a store written by `write_store`.

    Only this rank's file is read. It must match the manifest's size and sha256 (``verify``),
    and the store must have been cut for ``shape``, ``num_layers`` and ``orders`` (and ``perm``
    and ``seed`` when given); otherwise `ShardStoreError` says which file and what differs.
    """
    store = Path(store_dir)
    manifest = read_manifest(store)
    orders_t = _normalize_orders(num_layers, orders)
    entry = _check_request(manifest, store / MANIFEST, shape, coords, num_layers, orders_t,
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
    _check_shard(shard, path, manifest, {a: int(coords[a]) for a in "xyz"})
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
        if not _is_count(num_layers) or num_layers != manifest["num_layers"]:
            raise ShardStoreError(f"{path}: header says {num_layers!r:.100} layers, the manifest "
                                  f"{manifest['num_layers']}")
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
                              f"{' '.join(str(e).split())[:200]})") from None


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
    if not _vector(s.labels, out, "i") or \
            (out and (s.labels.min() < -1 or s.labels.max() >= s.num_classes)):
        raise bad(f"labels are not {out} ids in [-1, {s.num_classes - 1}]")
    if not all(_vector(s.masks[k], out, "b") for k in MASKS):
        raise bad(f"masks are not {out} booleans each")
    if not (isinstance(s.mask_counts, dict) and set(s.mask_counts) == set(MASKS)
            and all(_is_count(v) and v <= n for v in s.mask_counts.values())
            and isinstance(s.meta, dict)):
        raise bad("mask counts or meta are malformed")
