""".npy arrays read and written in pieces, so that no array of a big graph is ever whole in memory.

- `NpyLayout` / `npy_layout`: where an .npy file's data starts, its dtype and shape, checked
  against the file's size (a truncated file or a header that lies is an error, not a short read);
- `read_rows`: rows ``[lo, hi)`` of an .npy file through a memory map of just that window, copied
  out (the map, and the pages it faulted into this process, go away with the call);
- `NpyWriter`: an .npy file written row block by row block (appended, or at given rows by several
  processes at once), its header rewritten in place when the row count is known at the end
  (numpy pads headers so that the first dimension can grow to 21 digits in place);
- `NpyStream`: the .npy payload of a zip member (an ``.npz``, stored or deflated) read
  sequentially in pieces.

Every check raises ``error`` (a `DatasetError` by default) with one line naming the file.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from plexus_datasets.base import owned
from plexus_datasets.base import gate
from plexus_datasets.base.values import one_line

from .files import open_regular
from .errors import DatasetError, ErrorType


@dataclass(frozen=True)
class NpyLayout:
    """Dtype, shape and data offset of a C-order .npy payload."""

    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int
    fortran: bool = False

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_items(self) -> int:
        """Items per row (the product of the dimensions after the first)."""
        return math.prod(self.shape[1:]) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read_header(f: IO[bytes], where: str, error: ErrorType = DatasetError) -> NpyLayout:
    """The header of the .npy stream ``f`` (positioned at its start); ``offset`` counts from
    there. Object dtypes (pickles) are refused."""
    try:
        version = np.lib.format.read_magic(f)
        reader = {(1, 0): np.lib.format.read_array_header_1_0,
                  (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if reader is None:
            raise ValueError(f".npy format version {version} is not supported")
        shape, fortran, dtype = reader(f)
    except Exception as e:  # noqa: BLE001 - numpy raises ValueError, EOFError, SyntaxError...
        raise error(f"{where}: not a readable .npy header ({type(e).__name__}: "
                    f"{one_line(e)[:200]})") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise error(f"{where}: holds {dtype} values; only plain numbers are read")
    if any(not isinstance(s, int) or s < 0 for s in shape):
        raise error(f"{where}: bad shape {shape}")
    return NpyLayout(dtype, tuple(int(s) for s in shape), f.tell(), bool(fortran))


def npy_layout(path: str | os.PathLike, error: ErrorType = DatasetError) -> NpyLayout:
    """The layout of the .npy file at ``path``; its size must be exactly header plus data."""
    path = Path(path)
    try:
        with open_regular(path, error) as f:  # a FIFO would block the read forever
            layout = read_header(f, str(path), error)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    if layout.fortran and len(layout.shape) > 1:
        raise error(f"{path}: stored in Fortran order; save it in C order (np.save of a "
                    "C-contiguous array) to read it in pieces")
    if size != layout.offset + layout.nbytes:
        what = "truncated" if size < layout.offset + layout.nbytes else "has trailing bytes"
        raise error(f"{path}: {what}: {size} bytes, its header declares shape {layout.shape} of "
                    f"{layout.dtype} ({layout.offset + layout.nbytes} bytes with the header)")
    return layout


def read_rows(path: str | os.PathLike, layout: NpyLayout, lo: int, hi: int) -> np.ndarray:
    """A copy of rows ``[lo, hi)`` of the .npy file at ``path`` (of ``layout``)."""
    lo, hi = max(0, int(lo)), min(int(hi), layout.rows)
    tail = layout.shape[1:]
    if hi <= lo or layout.row_items == 0:
        return np.zeros((max(hi - lo, 0),) + tail, dtype=layout.dtype)
    row_bytes = layout.row_items * layout.dtype.itemsize
    start = layout.offset + lo * row_bytes
    aligned = start - start % mmap.ALLOCATIONGRANULARITY
    with open_regular(path) as f, mmap.mmap(f.fileno(), start - aligned + (hi - lo) * row_bytes,
                                          access=mmap.ACCESS_READ, offset=aligned) as window:
        view = np.frombuffer(window, dtype=layout.dtype, count=(hi - lo) * layout.row_items,
                             offset=start - aligned)
        out = view.reshape((hi - lo,) + tail).copy()
        del view  # the map can only close once no array points into it
    return out


def read_rows_into(path: str | os.PathLike, layout: NpyLayout, lo: int, hi: int,
                   out: np.ndarray) -> None:
    """Read rows ``[lo, hi)`` of the .npy file at ``path`` into ``out`` (C-contiguous, of the
    file's dtype and row shape), with no copy in between."""
    row_bytes = layout.row_items * layout.dtype.itemsize
    view = memoryview(out).cast("B")
    want = (hi - lo) * row_bytes
    with open_regular(path) as f:
        f.seek(layout.offset + lo * row_bytes)
        got = f.readinto(view[:want])
    if got != want:
        raise DatasetError(f"{path}: ends early (truncated)")


def read_concatenated(paths: list, dtype: np.dtype | str,
                      error: ErrorType = DatasetError) -> np.ndarray:
    """The 1-D .npy files ``paths`` (of ``dtype``) end to end in one array, each read straight
    into its place (no per-file array, no concatenation copy)."""
    layouts = [npy_layout(p, error) for p in paths]
    for p, lay in zip(paths, layouts):
        if lay.dtype != np.dtype(dtype) or len(lay.shape) != 1:
            raise error(f"{p}: holds {lay.dtype}{lay.shape}, expected 1-D {np.dtype(dtype)}")
    out = np.empty(sum(lay.rows for lay in layouts), dtype=dtype)
    at = 0
    for p, lay in zip(paths, layouts):
        read_rows_into(p, lay, 0, lay.rows, out[at:at + lay.rows])
        at += lay.rows
    return out


def write_header(f: IO[bytes], dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Write an .npy (1.0) header for a C-order array; returns its length in bytes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": tuple(int(s) for s in shape)})
    f.write(buf.getvalue())
    return len(buf.getvalue())


class NpyWriter:
    """An .npy file written in row blocks.

    ``rows=None``: blocks are appended and the row count is written into the header at
    `close`. ``rows=R``: the file is created at its full size and blocks may be written at any
    row (`write_at`), also by other processes opening it with ``create=False``.
    """

    def __init__(self, path: str | os.PathLike, dtype: np.dtype | str, tail: tuple[int, ...] = (),
                 rows: int | None = None, create: bool = True) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.tail = tuple(int(t) for t in tail)
        self.fixed = rows
        self.rows = 0
        self.row_bytes = math.prod(self.tail) * self.dtype.itemsize
        if create:
            self._f = gate.open_stream(self.path, "wb")
            self.offset = write_header(self._f, self.dtype, (rows or 0,) + self.tail)
            if rows is not None:
                self._f.truncate(self.offset + rows * self.row_bytes)
        else:
            layout = npy_layout(self.path)
            if layout.dtype != self.dtype or layout.shape != (rows,) + self.tail:
                raise DatasetError(f"{self.path}: holds {layout.dtype}{layout.shape}, expected "
                                   f"{self.dtype}{(rows,) + self.tail}")
            self._f = gate.open_stream(self.path, "r+b")
            self.offset = layout.offset

    def append(self, block: np.ndarray) -> None:
        """Write ``block`` (rows x tail) after the rows written so far."""
        self.write_at(self.rows, block)

    def write_at(self, row: int, block: np.ndarray) -> None:
        """Write ``block`` at row ``row``."""
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.tail:
            raise ValueError(f"{self.path}: block of shape {block.shape}, rows of {self.tail}")
        end = row + block.shape[0]
        if self.fixed is not None and end > self.fixed:
            raise ValueError(f"{self.path}: rows {row}..{end} past the {self.fixed} declared")
        os.pwrite(self._f.fileno(), memoryview(block).cast("B"), self.offset + row * self.row_bytes)
        self.rows = max(self.rows, end)

    def close(self) -> int:
        """Finish the file (header with the final row count); returns the row count."""
        if self._f.closed:
            return self.rows
        try:
            if self.fixed is None:
                self._f.seek(0)
                if write_header(self._f, self.dtype, (self.rows,) + self.tail) != self.offset:
                    raise ValueError(f"{self.path}: the .npy header changed length")
                self._f.truncate(self.offset + self.rows * self.row_bytes)
        finally:
            self._f.close()
        return self.fixed if self.fixed is not None else self.rows

    def __enter__(self) -> "NpyWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """``np.save`` without pickles and without numpy's ".npy" suffix rule."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.hasobject:
        raise ValueError(f"{path}: refusing to write an object array (it would need a pickle)")
    try:
        with gate.open_stream(path, "wb") as f:
            write_header(f, arr.dtype, arr.shape)
            # a plain write, not numpy's tofile: a full disk is an OSError with its errno
            # ("No space left on device"), not "N requested and M written"
            f.write(arr.reshape(-1).view(np.uint8).data)
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise


def save_piece(path: Path, arr: np.ndarray) -> None:
    """Save beside and rename: a killed task leaves no file under the final name."""
    gate.make_folder(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    save_npy(tmp, arr)
    owned.replace_file(tmp, path)


def load_npy(path: str | os.PathLike, error: ErrorType = DatasetError,
             dtype_kinds: str = "biuf", shape: tuple[int | None, ...] | None = None,
             mmap: bool = False) -> np.ndarray:
    """A whole .npy file (node-sized arrays only), checked: size matches its header, dtype kind in
    ``dtype_kinds``, and ``shape`` (None: any length on that axis) when given."""
    layout = npy_layout(path, error)
    if layout.dtype.kind not in dtype_kinds:
        raise error(f"{path}: holds {layout.dtype} values, expected "
                    f"{'integers' if dtype_kinds in ('i', 'iu') else 'numbers'}")
    if shape is not None and (len(shape) != len(layout.shape) or any(
            want is not None and want != have for want, have in zip(shape, layout.shape))):
        raise error(f"{path}: shape {layout.shape}, expected "
                    f"{tuple('*' if s is None else s for s in shape)}")
    if mmap:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    return read_rows(path, layout, 0, layout.rows)


class NpyStream:
    """The .npy payload of member ``member`` of the zip file ``path``, read front to back in
    pieces (stored and deflated members alike)."""

    def __init__(self, path: str | os.PathLike, member: str, error: ErrorType = DatasetError) -> None:
        self.where = f"{path}:{member}"
        self.error = error
        try:
            self._zip = zipfile.ZipFile(open_regular(path, error))
            info = self._zip.getinfo(member)
            self._f = self._zip.open(info)
        except KeyError:
            self.close()
            raise error(f"{path}: has no member {member!r}") from None
        except FileNotFoundError:
            self.close()
            raise error(f"{path}: missing") from None
        except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError) as e:
            self.close()
            raise error(f"{path}: not a readable zip archive ({type(e).__name__}: "
                        f"{one_line(e)[:200]})") from None
        try:
            self.layout = read_header(self._f, self.where, error)
        except BaseException:
            self.close()
            raise
        if info.file_size != self.layout.offset + self.layout.nbytes:
            self.close()
            raise error(f"{self.where}: holds {info.file_size} bytes but its header declares "
                        f"shape {self.layout.shape} of {self.layout.dtype}")
        self.remaining = math.prod(self.layout.shape)

    def read(self, count: int) -> np.ndarray:
        """The next ``count`` items (flat, in file order)."""
        count = min(int(count), self.remaining)
        nbytes = count * self.layout.dtype.itemsize
        buf = bytearray(nbytes)
        view, got = memoryview(buf), 0
        try:
            while got < nbytes:
                n = self._f.readinto(view[got:])
                if not n:
                    break
                got += n
        except (OSError, zipfile.BadZipFile, EOFError, RuntimeError, ValueError) as e:
            raise self.error(f"{self.where}: damaged ({type(e).__name__}: "
                             f"{one_line(e)[:200]})") from None
        except Exception as e:  # noqa: BLE001 - zlib.error on a corrupt deflate stream
            raise self.error(f"{self.where}: damaged ({type(e).__name__}: "
                             f"{one_line(e)[:200]})") from None
        if got != nbytes:
            raise self.error(f"{self.where}: ends early (truncated archive)")
        self.remaining -= count
        return np.frombuffer(buf, dtype=self.layout.dtype)

    def chunks(self, count: int, chunk: int) -> Iterator[np.ndarray]:
        """The next ``count`` items in pieces of at most ``chunk``."""
        while count > 0:
            piece = self.read(min(chunk, count))
            count -= piece.size
            yield piece

    def close(self) -> None:
        for name in ("_f", "_zip"):
            obj = getattr(self, name, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - closing a broken archive
                    pass

    def __enter__(self) -> "NpyStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def npy_bytes(arr: np.ndarray) -> bytes:
    """The .npy file of ``arr`` as bytes (for writing small arrays into zip members)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()
