"""Graphs stored as edge lists (SNAP style): one ``src dst`` pair per line, ``#`` comments.

KONECT-style ``%`` comments are accepted too; columns after the second (weights, timestamps) are
ignored. Node ids may be any integers; they are remapped to 0..N-1 in increasing id order. The
graph is symmetrized. Features, labels and the split are seeded stand-ins (see `synthetic`).
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
from .synthetic import complete_graph


_ID = re.compile(r"[+-]?[0-9]{1,19}")  # ASCII: int() would also take "1_0" and "１"


def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _comment_char(path: Path) -> str:
    with _open(path) as f:
        for raw in f:
            line = raw.strip()
            if line:
                return "%" if line.startswith(b"%") else "#"
    return "#"


def _parse_slow(path: Path, comment: str) -> tuple[np.ndarray, np.ndarray]:
    """Line-by-line parse: slow, but names the offending line. Used when the fast parse fails."""
    src, dst = [], []
    with _open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="replace")
            fields = line.split(comment, 1)[0].split()
            if not fields:
                continue
            if len(fields) < 2:
                raise DatasetError(f"{path}: line {lineno}: expected 'src dst', got "
                                   f"{line.strip()[:60]!r}")
            if not (_ID.fullmatch(fields[0]) and _ID.fullmatch(fields[1])):
                raise DatasetError(f"{path}: line {lineno}: node ids must be integers, got "
                                   f"{line.strip()[:60]!r}")
            src.append(int(fields[0]))
            dst.append(int(fields[1]))
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def _parse_fast(path: Path, comment: str) -> tuple[np.ndarray, np.ndarray] | None:
    """pandas' C parser (ogb depends on pandas); None if the file needs the careful parser."""
    try:
        import pandas as pd

        frame = pd.read_csv(path, sep=r"\s+", comment=comment, header=None, usecols=[0, 1],
                            dtype=np.int64, engine="c")
    except Exception:  # ragged rows, non-integers, empty file, no pandas: let the slow path judge
        return None
    values = frame.to_numpy()
    return values[:, 0].copy(), values[:, 1].copy()


def read_edgelist(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int64 arrays with the ids as written in the file (``.gz`` files are read too)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        comment = _comment_char(path)
        edges = _parse_fast(path, comment)
        if edges is None:
            edges = _parse_slow(path, comment)
    except (OSError, EOFError) as e:  # unreadable file, corrupt .gz
        raise DatasetError(
            f"{path}: cannot read ({type(e).__name__}: {one_line(e)[:200]})") from None
    except OverflowError:
        raise DatasetError(f"{path}: a node id does not fit in 64 bits") from None
    if edges[0].size == 0:
        raise DatasetError(f"{path}: no edges found (expected lines 'src dst')")
    return edges


def _compact_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids, each entry's index among them), as ``np.unique(return_inverse=True)``.

    SNAP ids are mostly dense, so a presence table over the id range is O(E) and several times
    faster than sorting; sparse id ranges (hashes, huge ids) fall back to sorting.
    """
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 4 * ids.size + 1024:
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[ids - lo] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return np.flatnonzero(present) + lo, rank[ids - lo]
    distinct, inverse = np.unique(ids, return_inverse=True)
    return distinct, inverse.ravel()


def load_edgelist(path: str | Path, seed: int = 0) -> Graph:
    """Load a whitespace-separated edge list as an undirected graph with remapped node ids."""
    path = Path(path).expanduser()
    src, dst = read_edgelist(path)
    ids, inverse = _compact_ids(np.concatenate([src, dst]))
    n = ids.size
    src, dst = inverse[:src.size], inverse[src.size:]
    notes = ["edge list symmetrized, self loops dropped"]
    if not (ids[0] == 0 and ids[-1] == n - 1):
        notes.append(f"node ids {int(ids[0])}..{int(ids[-1])} remapped to 0..{n - 1} in id order "
                     "(ids with no edge are not nodes)")
    adj = edges_to_csr(src, dst, n, symmetrize=True)
    # named by the file, never a bare stem a built-in dataset may share (a cora.txt is not Cora)
    return complete_graph(path.name, adj, seed=seed, source=str(path), notes=notes)
