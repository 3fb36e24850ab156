"""Every node's outputs written where they are: each rank writes its own rows into memory-mapped
``.npy`` files, so no rank ever holds a whole output (papers100M's logits are 76 GB).

An outputs directory holds one array per output, rows in the original node order::

    outputs.json      format, version, node count, the arrays and their files, and what the
                      caller adds (the epoch, the dataset)
    pred.npy          int64 (N,): the predicted class of every node (multi-label: int8 (N, T),
                      1 where a task's logit is positive)
    logits.npy        float32 (N, C)
    embeddings.npy    float32 (N, hidden): the last hidden layer's output

Writing is atomic: rank 0 creates the files in a hidden temporary directory beside the target,
every rank writes its rows through a window of at most `WINDOW_BYTES` of the file at a time
(so a rank's memory never grows with the file) and syncs them, and after every rank has
finished rank 0 renames the directory into place. A rank that dies leaves the temporary
directory (named ``.NAME.partial-*``), never a target that looks complete; a rank that fails
makes every rank raise. The directory must be on a file system every rank sees: on one node
any, across nodes a parallel file system that keeps concurrent writes to one file coherent
(Lustre, GPFS).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from plexus_datasets.base.atomic import (UnsafeTargetError, fsync_dir, output_directory,
                                replace_directory)
from plexus_datasets.files import open_regular
from plexus_datasets.npyio import npy_layout
from plexus_datasets.validate import check_alloc

from .model import GraphModel
from .results import NodeBlock, output_blocks
from plexus_datasets.base import owned
from plexus_datasets.base import gate

MARKER = "outputs.json"
FORMAT = "plexus-outputs"
VERSION = 1
FILES = {"pred": "pred.npy", "logits": "logits.npy", "embeddings": "embeddings.npy"}
#: The most of an output file one rank maps at once while writing its rows
WINDOW_BYTES = 64 << 20
#: outputs.json is a few hundred bytes plus what a caller adds; far more is not one
MAX_MARKER_BYTES = 16 << 20


class OutputsError(ValueError):
    """An outputs directory that cannot be written or read (a one-line message)."""


def is_outputs_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory `save_outputs` wrote: its outputs.json (a small regular
    file) records this format and version and the arrays it holds, and the directory holds
    exactly that file and those arrays' files (regular files, no symlinks), nothing else. A
    user's directory that happens to hold a file called outputs.json is not one."""
    root = Path(path)
    try:
        entries = set(os.listdir(root))
        fd = os.open(root / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
                return False
            meta = json.loads(os.read(fd, MAX_MARKER_BYTES + 1).decode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, ValueError, RecursionError):
        return False
    if (not isinstance(meta, dict) or meta.get("format") != FORMAT
            or meta.get("version") != VERSION or not isinstance(meta.get("arrays"), dict)
            or not meta["arrays"]):
        return False
    arrays = meta["arrays"]
    if any(name not in FILES or not isinstance(info, dict) or info.get("file") != FILES[name]
           for name, info in arrays.items()):
        return False
    if entries - {owned.SEAL} != {MARKER, *(FILES[name] for name in arrays)}:
        return False
    try:
        return all(stat.S_ISREG(os.lstat(root / name).st_mode) for name in entries)
    except OSError:
        return False


def check_outputs_target(path: str | os.PathLike) -> Path:
    """The directory an outputs write replaces (absent, empty, or an earlier outputs directory
    this user wrote, exactly as written: `is_outputs_directory`, and sealed by this user's
    Plexus with exactly those files, `plexus_datasets.base.owned`); `OutputsError` for anything else
    (`plexus_datasets.base.atomic.output_directory`), or a folder of the system."""
    try:
        gate.run_folder(Path(path).expanduser())  # a run's own folder: never /usr/share/x
        return output_directory(Path(path).expanduser(), _own_outputs)
    except UnsafeTargetError as e:
        raise OutputsError(str(e)) from None


def _own_outputs(path: Path) -> bool:
    return is_outputs_directory(path) and owned.is_sealed(path, FORMAT)  # exactly as written


def _agree(failure: str | None) -> None:
    """Collective: raise `OutputsError` on every rank when any rank failed (the first failure's
    message, named by rank)."""
    failures: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(failures, failure)
    for rank, message in enumerate(failures):
        if message is not None:
            raise OutputsError(message if rank == dist.get_rank() else
                               f"rank {rank} failed writing outputs: {message}")


def _create_files(target: Path, shapes: dict[str, tuple[tuple[int, ...], np.dtype]]) -> Path:
    """Rank 0: a temporary directory beside ``target`` with every array's file at full size
    (sparse: nothing written yet)."""
    tmp = gate.temp_folder(target.parent, f".{target.name}.partial-")
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; others read outputs as they read any file
        for name, (shape, dtype) in shapes.items():
            np.lib.format.open_memmap(tmp / FILES[name], mode="w+", dtype=dtype, shape=shape)
    except BaseException:  # a full disk: no .NAME.partial-* left behind
        owned.remove_tree(tmp, quiet=True)
        raise
    return tmp


def write_rows(path: Path, blk: NodeBlock, window_bytes: int = WINDOW_BYTES) -> None:
    """Write this rank's real rows of ``blk`` into the .npy file ``path`` (created at full size),
    through windows of at most ``window_bytes``, then sync them to disk."""
    whole = np.load(path, mmap_mode="r")  # header only: offset, shape, dtype (maps, reads nothing)
    offset, shape, dtype = whole.offset, whole.shape, whole.dtype
    del whole
    ids, values = blk.real()
    order = np.argsort(ids, kind="stable")
    ids, values = ids[order], values[order]
    if len(shape) == 1:
        values = values[:, 0]
    row_bytes = dtype.itemsize * (shape[1] if len(shape) > 1 else 1)
    span = max(1, window_bytes // row_bytes)  # rows of the file per window
    start, c0 = 0, blk.col_start
    while start < len(ids):
        lo = int(ids[start])
        stop = int(np.searchsorted(ids, lo + span))
        hi = int(ids[stop - 1]) + 1
        window = np.memmap(path, dtype=dtype, mode="r+", offset=offset + lo * row_bytes,
                           shape=(hi - lo, *shape[1:]))
        if len(shape) == 1:
            window[ids[start:stop] - lo] = values[start:stop]
        else:
            window[ids[start:stop] - lo, c0:c0 + values.shape[1]] = values[start:stop]
        window.flush()
        del window
        start = stop
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_outputs(model: GraphModel, directory: str | os.PathLike, *, logits: bool = True,
                 predictions: bool = True, embeddings: bool = False,
                 extra: dict[str, Any] | None = None) -> Path:
    """Collective: one forward pass without dropout, then every rank writes its own rows of the
    outputs asked for into ``directory`` (see the module docstring; ``extra``: plain values
    recorded in its outputs.json). Returns the directory on every rank.

    ``directory`` may be absent, empty, or an earlier outputs directory (replaced only once the
    new one is complete); anything else raises `OutputsError` before anything is written.
    """
    if not (logits or predictions or embeddings):
        raise ValueError("save_outputs: ask for at least one of predictions, logits, embeddings")
    return write_outputs(model, output_blocks(model, logits, predictions, embeddings),
                         directory, extra)


def write_outputs(model: GraphModel, blocks: dict[str, NodeBlock],
                  directory: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Collective: `save_outputs` for blocks `plexus.api.results.output_blocks` computed."""
    target = Path(directory).expanduser()
    rank0 = dist.get_rank() == 0
    shapes = {name: ((model.num_nodes,) if name == "pred" and not model.multilabel
                     else (model.num_nodes, blk.width),
                     blk.dtype) for name, blk in blocks.items()}
    tmp_box: list[Any] = [None]
    failure = None
    if rank0:
        try:
            target = check_outputs_target(target)
            tmp_box[0] = str(_create_files(target, shapes))
        except (OSError, OutputsError) as e:
            failure = f"{target}: {e.strerror or e}" if isinstance(e, OSError) else str(e)
    _agree(failure)
    dist.broadcast_object_list(tmp_box, src=0)
    tmp = Path(tmp_box[0])
    try:
        failure = None
        try:
            coords = model.grid.coords
            for name, blk in blocks.items():
                if blk.speaks(coords):
                    write_rows(tmp / FILES[name], blk)
        except OSError as e:
            failure = f"{tmp}: {e.strerror or e}"
        _agree(failure)
        if rank0:
            try:
                publish_outputs(tmp, target, model.num_nodes, shapes, extra or {})
            except (OSError, OutputsError) as e:
                failure = f"{target}: {e.strerror or e}" if isinstance(e, OSError) else str(e)
        _agree(failure)
    except BaseException:
        if rank0:
            owned.remove_tree(tmp, quiet=True)
        raise
    return target


def publish_outputs(tmp: Path, target: Path, num_nodes: int,
                    shapes: dict[str, tuple[tuple[int, ...], np.dtype]],
                    extra: dict[str, Any]) -> None:
    """Rank 0, once every rank has written and synced its rows into the files of ``tmp``: the
    marker file, then the rename onto ``target`` (`OutputsError` when ``target`` is no longer
    replaceable)."""
    meta = {"format": FORMAT, "version": VERSION, "num_nodes": int(num_nodes),
            "arrays": {name: {"file": FILES[name], "dtype": np.dtype(dt).str,
                              "shape": [int(s) for s in shape]}
                       for name, (shape, dt) in shapes.items()},
            **extra}
    with gate.open_stream(tmp / MARKER, "w") as f:
        f.write(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    try:
        replace_directory(tmp, target, check_outputs_target, seal=FORMAT, describes=(MARKER,))
    except UnsafeTargetError as e:  # the target changed while the ranks wrote
        raise OutputsError(str(e)) from None


def load_outputs(directory: str | os.PathLike, mmap: bool = True, as_tensor: bool = False
                 ) -> dict[str, Any]:
    """The arrays of an outputs directory by name ("pred", "logits", "embeddings"), memory-mapped
    read-only unless ``mmap`` is False, plus what its outputs.json records besides them ("epoch",
    "num_nodes", ...). With ``as_tensor`` the arrays are CPU torch tensors on the same memory (a
    mapped one copy-on-write: pages are read as touched, and writing to a tensor never changes
    the file). Raises `OutputsError` for a directory that is not a complete outputs
    directory."""
    root = Path(directory).expanduser()
    try:
        with open_regular(root / MARKER, OutputsError, "r") as f:  # a FIFO would block
            text = f.read(MAX_MARKER_BYTES + 1)
        if len(text) > MAX_MARKER_BYTES:
            raise OutputsError(f"{root / MARKER}: more than {MAX_MARKER_BYTES} bytes; not an "
                               f"{MARKER} Plexus wrote")
        meta = json.loads(text)
    except FileNotFoundError:
        raise OutputsError(f"{root}: no {MARKER}; not a (complete) outputs directory") from None
    except OutputsError:
        raise
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nesting thousands deep
        raise OutputsError(f"{root / MARKER}: unreadable ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise OutputsError(f"{root / MARKER}: not a {FORMAT} version {VERSION} file")
    arrays = meta.get("arrays", {})
    if not isinstance(arrays, dict):
        raise OutputsError(f"{root / MARKER}: 'arrays' must map names to files, got a "
                           f"{type(arrays).__name__}")
    out: dict[str, Any] = {k: v for k, v in meta.items() if k not in ("format", "version", "arrays")}
    for name, info in arrays.items():
        if name not in FILES or not isinstance(info, dict) or info.get("file") != FILES[name]:
            raise OutputsError(f"{root / MARKER}: unknown array entry {name!r:.60}")
        path = root / FILES[name]
        layout = npy_layout(path, OutputsError)  # a regular file, exactly its header's size
        if list(layout.shape) != info.get("shape") or layout.dtype.str != info.get("dtype"):
            raise OutputsError(f"{path}: {layout.dtype}{layout.shape}, {MARKER} says "
                               f"{info.get('dtype')!r:.30} of shape {info.get('shape')!r:.60}")
        if not mmap:  # read whole: only what memory holds
            check_alloc(float(layout.nbytes), str(path), "reading it whole (mmap=False)",
                        OutputsError)
        try:
            # torch needs a writable array: a private (copy-on-write) map for tensors
            mode = ("c" if as_tensor else "r") if mmap else None
            arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise OutputsError(f"{path}: unreadable ({e})") from None
        out[name] = torch.from_numpy(arr) if as_tensor else arr
    return out
