"""Graphs stored as a Matrix Market ``.mtx`` adjacency (the SuiteSparse Matrix Collection format).

Only the structure is read: every stored nonzero (i, j) is an edge, weights are ignored, and the
graph is symmetrized (so a symmetric file's stored triangle is enough). Features, labels and the
split are seeded stand-ins (see `synthetic`).

The header is parsed here and its sizes checked against memory before the body is read; the
body goes through pandas' C parser, as edge lists do. (scipy.io.mmread's compiled reader
trusts its input: a stray NUL byte inside a number made it segfault.)
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import IO

import numpy as np

from plexus_datasets.base.values import one_line

from .errors import DatasetError
from .graph import Graph, edges_to_csr
from .synthetic import DEFAULT_FEATURES, complete_graph
from .validate import check_alloc, check_graph_size

_BANNER = re.compile(r"%%matrixmarket\s+matrix\s+(coordinate|array)\s+"
                     r"(real|integer|complex|pattern)\s+(general|symmetric|skew-symmetric|"
                     r"hermitian)\s*", re.IGNORECASE)
_SIZES = re.compile(r"\s*([0-9]{1,19})\s+([0-9]{1,19})(?:\s+([0-9]{1,19}))?\s*")
_VALUES = {"pattern": 0, "real": 1, "integer": 1, "complex": 2}


def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_header(f: IO[bytes], path: Path) -> tuple[str, str, int, int, int]:
    """(format, field, rows, cols, entries) from the banner and size line; ``f`` is left at the
    first line of the body."""
    banner = f.readline(1024).decode("ascii", errors="replace")
    m = _BANNER.fullmatch(banner.strip())
    if not m:
        raise DatasetError(f"{path}: not a valid Matrix Market file (first line "
                           f"{banner.strip()[:60]!r} is not '%%MatrixMarket matrix coordinate|"
                           "array real|integer|complex|pattern general|symmetric|...')")
    fmt, field = m.group(1).lower(), m.group(2).lower()
    if fmt == "array" and field == "pattern":
        raise DatasetError(f"{path}: not a valid Matrix Market file (an array has values)")
    for _ in range(1_000_000):
        line = f.readline(1 << 16)
        if not line:
            raise DatasetError(f"{path}: not a valid Matrix Market file (no size line)")
        text = line.decode("ascii", errors="replace").strip()
        if text and not text.startswith("%"):
            break
    else:
        raise DatasetError(f"{path}: not a valid Matrix Market file (no size line)")
    sizes = _SIZES.fullmatch(text)
    if not sizes or (fmt == "coordinate") != (sizes.group(3) is not None):
        want = "ROWS COLS ENTRIES" if fmt == "coordinate" else "ROWS COLS"
        raise DatasetError(f"{path}: not a valid Matrix Market file (size line {text[:60]!r}, "
                           f"expected {want})")
    rows, cols = int(sizes.group(1)), int(sizes.group(2))
    entries = int(sizes.group(3)) if fmt == "coordinate" else rows * cols
    return fmt, field, rows, cols, entries


def _read_body(f: IO[bytes], path: Path, columns: int, entries: int) -> np.ndarray:
    """The body's numbers as an (entries, columns) float64 array (indices are exact below 2^53)."""
    import pandas as pd

    try:
        frame = pd.read_csv(f, sep=r"\s+", comment="%", header=None, dtype=np.float64,
                            engine="c", names=list(range(columns)), usecols=range(columns),
                            skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame(np.zeros((0, columns)))
    except Exception as e:  # noqa: BLE001 - non-numbers, bad bytes, ragged lines
        raise DatasetError(f"{path}: not a valid Matrix Market file ({type(e).__name__}: "
                           f"{one_line(e)[:200]})") from None
    values = frame.to_numpy(dtype=np.float64)
    if values.shape[0] != entries:
        raise DatasetError(f"{path}: truncated Matrix Market file: the header promises "
                           f"{entries} entries, the file holds {values.shape[0]}")
    if values.size and not np.isfinite(values).all():
        raise DatasetError(f"{path}: not a valid Matrix Market file (missing or non-finite "
                           "numbers)")
    return values


def load_mtx(path: str | Path, seed: int = 0) -> Graph:
    """Load a square Matrix Market matrix (``.mtx``, also ``.mtx.gz``) as an undirected graph."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        with _open(path) as f:
            fmt, field, rows, cols, entries = read_header(f, path)
            if rows != cols:
                raise DatasetError(f"{path}: matrix is {rows}x{cols}; an adjacency matrix must "
                                   "be square")
            # the header's sizes are what the body would need: check them before reading it
            check_alloc(8.0 * 4 * entries, str(path), f"{entries} entries")
            check_graph_size(str(path), rows, 2 * entries, DEFAULT_FEATURES)
            n = rows
            if fmt == "coordinate":
                body = _read_body(f, path, 2 + _VALUES[field], entries)
                src, dst = body[:, 0], body[:, 1]
                if entries and (src.min() < 1 or dst.min() < 1 or src.max() > n
                                or dst.max() > n or (src != np.round(src)).any()
                                or (dst != np.round(dst)).any()):
                    raise DatasetError(f"{path}: entry indices must be integers in [1, {n}]")
                nonzero = ((body[:, 2:] != 0).any(axis=1) if body.shape[1] > 2 else
                    np.ones(entries, dtype=bool))
                src = src[nonzero].astype(np.int64) - 1
                dst = dst[nonzero].astype(np.int64) - 1
            else:  # dense, column-major; every nonzero value is an edge
                body = _read_body(f, path, _VALUES[field], entries)
                flat = np.flatnonzero((body != 0).any(axis=1))
                src, dst = flat % n, flat // n
    except (OSError, EOFError) as e:  # unreadable file, corrupt .gz
        raise DatasetError(
            f"{path}: cannot read ({type(e).__name__}: {one_line(e)[:200]})") from None
    adj = edges_to_csr(src, dst, n, symmetrize=True)
    name = path.name  # the file, never the bare stem: a cora.mtx is not the embedded Cora
    return complete_graph(name, adj, seed=seed, source=str(path),
                          notes=["adjacency from Matrix Market nonzeros, symmetrized, "
                                 "self loops dropped"])
