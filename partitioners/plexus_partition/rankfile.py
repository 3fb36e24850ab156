"""A rank's file of the store, assembled from the pieces the partitioner's sort wrote, and the
manifest (`plexus_partition.stream`, phases ``ranks`` and ``manifest``). Members are written
in pieces (one copy buffer), the file hashed as it is written."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from plexus_datasets.base.atomic import fsync_dir
from plexus_datasets.base.writebehind import WriteBehind
from plexus_datasets.graph import normalized_symmetric
from plexus_datasets.npyio import load_npy, npy_layout, write_header

from .plan import MASKS, feature_cols, feature_group, rank_input_ids, rank_outputs
from .storeformat import FORMAT, MANIFEST, VERSION, file_sha256, gnn_layers, rank_file_name
from .streamjob import BlockSpec, Job, PartitionError, route_of
from plexus_datasets.base import owned
from plexus_datasets.base import gate

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed: zip entries otherwise carry the wall clock
_COPY_BUF = 1 << 22


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3
    info.external_attr = 0o644 << 16
    return info


def _member(zf: zipfile.ZipFile, name: str, dtype: np.dtype | str, shape: tuple[int, ...],
            pieces: Iterable[np.ndarray]) -> None:
    """One .npy member written from ``pieces`` (C order, concatenated along the first axis)."""
    with zf.open(_zip_info(f"{name}.npy"), "w", force_zip64=True) as dst:
        write_header(dst, np.dtype(dtype), shape)
        for piece in pieces:
            dst.write(memoryview(np.ascontiguousarray(piece, dtype=dtype)).cast("B"))


def _file_data(path: Path, dtype: np.dtype | str | None = None) -> Iterator[np.ndarray]:
    """The data of a (pieces') .npy file in pieces of at most `_COPY_BUF` bytes, read into one
    reused buffer (cast to ``dtype`` when given)."""
    layout = npy_layout(path, PartitionError)
    total = layout.nbytes
    buf = np.empty(max(1, min(total, _COPY_BUF)) // layout.dtype.itemsize or 1, layout.dtype)
    with open(path, "rb") as f:
        f.seek(layout.offset)
        done = 0
        while done < total:
            count = f.readinto(memoryview(buf).cast("B")[:min(buf.nbytes, total - done)])
            if not count:
                raise PartitionError(f"{path}: ends early; the work directory is damaged")
            piece = buf[:count // layout.dtype.itemsize]
            yield piece if dtype is None or piece.dtype == dtype else piece.astype(dtype)
            done += count


def _block_members(zf: zipfile.ZipFile, job: Job, spec: BlockSpec, r: int, c: int,
                   subs: list[list[int]], nnz: int, idx_dtype: str) -> None:
    """The three members of one block: its pieces (the sub-buckets of its row block) in order."""
    lo, hi = r * spec.rs, (r + 1) * spec.rs
    mine = [i for i, (a, _) in enumerate(subs) if lo <= a < hi]
    base = job.block_folder(spec, r, c)
    counts = [load_npy(base / f"{i:05d}.counts.npy", PartitionError, "i") for i in mine]
    indptr = np.zeros(spec.rs + 1, dtype=idx_dtype)
    np.cumsum(np.concatenate(counts) if counts else np.zeros(0, np.int64), out=indptr[1:])
    del counts
    if int(indptr[-1]) != nnz:
        raise PartitionError(f"{base}: holds {int(indptr[-1])} non-zeros, the route counted "
                             f"{nnz}; the work directory is damaged, remove it")
    _member(zf, f"block{spec.index}.indptr", idx_dtype, indptr.shape, [indptr])
    for part, dtype in (("indices", np.dtype(idx_dtype)), ("data", np.dtype(np.float32))):
        _member(zf, f"block{spec.index}.{part}", dtype, (nnz,),
                (piece for i in mine
                 for piece in _file_data(base / f"{i:05d}.{part}.npy", dtype)))


def _feature_pieces(job: Job, group: int, cols: slice, piece_rows: int,
                    chunks: int) -> Iterator[np.ndarray]:
    rows_total = job.group_rows
    width = cols.stop - cols.start
    hi = min(cols.stop, job.num_features)
    for p in range(job.feature_pieces(piece_rows)):
        n_rows = min(piece_rows, rows_total - p * piece_rows)
        dense = np.zeros((n_rows, width), dtype=np.float32)
        folder = job.feature_folder(group, p)
        if hi > cols.start:
            for chunk in range(chunks):
                base = folder / f"{chunk:06d}"
                if not Path(f"{base}.rows.npy").exists():
                    continue
                local = load_npy(f"{base}.rows.npy", PartitionError, "i") - p * piece_rows
                vals = load_npy(f"{base}.vals.npy", PartitionError, "f",
                                (len(local), job.num_features))
                dense[local, :hi - cols.start] = vals[:, cols.start:hi]
        yield dense


def rank_task(job: Job, rank: int, meta: dict, block_nnz: dict,
               idx_dtypes: dict, mask_counts: dict, piece_rows: int, chunks: int) -> dict:
    grid = job.grid
    coords = grid.coords(rank)
    plans = job.plans
    perm = job.permutation(meta)
    input_ids = rank_input_ids(perm, plans, grid, coords, job.npad)
    out_ids, out_labels, out_masks = rank_outputs(perm, plans, grid, coords, job.npad,
                                                  job.node("labels"), job.node("masks"))
    group = feature_group(plans, grid, coords)
    cols = feature_cols(plans, grid, coords, job.fpad)
    block_shapes = {s.key: [s.rs, s.cs] for s in job.blocks}
    header = {"format": FORMAT, "version": VERSION, "shape": dict(job.shape),
              "coords": {a: int(v) for a, v in coords.items()}, "num_stages": job.num_stages,
              "orders": list(job.orders), "perm": meta["kind"], "seed": meta["seed"],
              "name": job.name, "num_nodes": job.n, "nodes_padded": job.npad,
              "num_features": job.num_features, "features_padded": job.fpad,
              "num_classes": job.num_classes, "mask_counts": mask_counts,
              "block_keys": [s.key for s in job.blocks], "block_shapes": block_shapes,
              "meta": {"symmetric": normalized_symmetric(job.directed, job.aggregation),
                       "aggregation": job.aggregation}}
    name = rank_file_name(coords)
    path = job.path("store", name)
    gate.make_folder(path.parent)
    tmp = path.with_name(f".{name}.tmp")
    with gate.open_stream(tmp, "wb") as raw:
        behind = WriteBehind(raw)  # the store is not read back here: keep it out of the cache
        out = _HashingWriter(behind)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
            for spec in job.blocks:
                r, c = coords[spec.a_rows], coords[spec.a_cols]
                _block_members(zf, job, spec, r, c, meta["subs"][str(route_of(spec, meta))],
                               block_nnz[spec.key][r * spec.nc + c],
                               idx_dtypes[spec.key][r * spec.nc + c])
            _member(zf, "features", np.float32, (job.group_rows, cols.stop - cols.start),
                    _feature_pieces(job, group, cols, piece_rows, chunks))
            vectors = [(f"input_ids.{layer}", ids) for layer, ids in enumerate(input_ids)]
            vectors += [("output_ids", out_ids), ("labels", out_labels)]
            vectors += [(f"mask.{m}", out_masks[m]) for m in MASKS]
            text = json.dumps(header, sort_keys=True).encode()
            vectors.append(("header", np.frombuffer(text, dtype=np.uint8)))
            for member, arr in vectors:
                _member(zf, member, arr.dtype, arr.shape, [arr])
        behind.finish()
    owned.replace_file(tmp, path)
    return {"coords": {a: int(v) for a, v in coords.items()}, "file": name,
            "size": out.size, "sha256": out.hash.hexdigest()}


class _HashingWriter:
    """A write-only file that hashes what goes through it. It cannot seek, so zipfile writes
    each member's sizes after its data instead of going back for them, and the file's sha256
    is known without reading it again."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.hash, self.size = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def seek(self, *_: Any) -> int:
        raise OSError("not seekable")

    def flush(self) -> None:
        self.raw.flush()


def verify_rank_files(job: Job, ranks: list) -> None:
    """Check every rank file against the size and sha256 its task recorded (a file swapped,
    truncated or edited after its task finished, by a crash or a hand, never reaches a
    manifest); `PartitionError` naming the first that differs."""
    for entry in ranks:
        path = Path(job.path("store", entry["file"]))
        try:
            st = os.lstat(path)
            same = (stat.S_ISREG(st.st_mode) and st.st_size == entry["size"]
                and file_sha256(path) == entry["sha256"])
        except OSError:
            same = False
        if not same:
            raise PartitionError(f"{path}: differs from what its task wrote (size and sha256); "
                                 "the work directory is damaged and cannot be resumed")


def manifest_step(job: Job, meta: dict, ranks: list, graph_sha256: str, nnz: int,
                  split: dict) -> dict:
    """Serial step: the store's manifest, written once every rank file is verified; ``split``:
    the train/val/test counts and where the split came from (`storemanifest.store_split`)."""
    verify_rank_files(job, ranks)
    manifest = {
        "format": FORMAT, "version": VERSION, "grid": dict(job.shape),
        "num_stages": job.num_stages, "orders": list(job.orders),
        "aggregation": job.aggregation,
        "permutation": {k: meta[k] for k in ("kind", "seed", "locality", "p1_sha256",
                                             "p2_sha256")},
        "seed": meta["seed"], "dataset": job.name, "graph_sha256": graph_sha256,
        "num_nodes": job.n, "nodes_padded": job.npad, "nnz": nnz,
        "num_features": job.num_features, "num_classes": job.num_classes,
        "block_keys": [s.key for s in job.blocks], "ranks": ranks, "split": split,
    }
    if job.model is not None:  # the kind recorded, and the GNN layers its stages make
        manifest.update(model=job.model, gnn_layers=gnn_layers(job.num_stages, job.model))
    with gate.open_stream(job.path("store", MANIFEST), "w") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(job.path("store"))
    return manifest
