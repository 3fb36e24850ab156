"""Every node's degrees in M from its row pieces (`plexus_datasets.canonical`), never from raw
edges (repeats and the second direction of an undirected graph would count twice): per row and
per column, the self loops, and for a graph marked undirected the check that M is symmetric. A
task per slice of pieces, then node-sized files (`Degrees`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from plexus_datasets.base import gate

from .canonical import BUCKET_ENTRIES, Pieces, budget_bounds
from .diskgraph import DiskGraphError
from .errors import DatasetError
from .npyio import load_npy, save_piece
from .work import Runner



_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
        np.uint64(0x94D049BB133111EB))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every uint64 (wrapping arithmetic)."""
    z = x + _MIX[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX[1]
    z = (z ^ (z >> np.uint64(27))) * _MIX[2]
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class ScanJob:
    pieces: Pieces
    folder: str
    directed: bool
    check: bool  # check csr pieces: sorted unique rows, and symmetry sums when undirected


#: entries of a piece checked at once by the scan (its temporaries stay a few MB)
SCAN_SLICE = 1 << 20


def _scan_task(job: ScanJob, k: int) -> dict:
    """Loops of piece k, its column counts (directed), and checks of a stored csr piece; the
    checks and loops go slice by slice of whole rows."""
    counts, cols = job.pieces.piece(k)
    r0, r1 = job.pieces.rows(k)
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    cuts = budget_bounds(counts, SCAN_SLICE)
    sym, loops, n = 0, [], np.uint64(job.pieces.num_nodes)
    for a, b in zip(cuts[:-1], cuts[1:]):
        c = np.asarray(cols[ptr[a]:ptr[b]])
        rows = np.repeat(np.arange(r0 + a, r0 + b, dtype=np.int64), counts[a:b])
        if job.check and c.size:
            ok = np.diff(c) > 0
            starts = ptr[a + 1:b] - ptr[a]  # a row may start below where the previous ended
            ok[starts[(starts > 0) & (starts < c.size)] - 1] = True
            if not ok.all():
                row = int(rows[int(np.flatnonzero(~ok)[0]) + 1])
                raise DiskGraphError(f"{job.pieces.graph.path}: the in-neighbours of node {row} "
                                     "are not sorted and unique, as a csr graph's must be")
            if not job.directed:
                r, cu = rows.astype(np.uint64), c.astype(np.uint64)
                sym = ((sym + int((_mix(r * n + cu) - _mix(cu * n + r)).sum(dtype=np.uint64)))
                    % 2**64)
        loops.append(rows[c == rows])
    result: dict[str, Any] = {"sym": sym} if job.check and not job.directed else {}
    save_piece(Path(job.folder) / f"{k:05d}.loops.npy",
                 np.concatenate(loops) if loops else np.zeros(0, np.int64))
    if job.directed:
        uniq, ucount = np.unique(cols, return_counts=True)
        save_piece(Path(job.folder) / f"{k:05d}.ucols.npy", uniq)
        save_piece(Path(job.folder) / f"{k:05d}.ucount.npy", ucount.astype(np.int64))
    return result


def _colcount_task(job: ScanJob, lo: int, hi: int, part: int) -> dict:
    """Column counts of M for columns [lo, hi), summed over every piece's unique columns."""
    out = np.zeros(hi - lo, dtype=np.int64)
    for k in range(len(job.pieces)):
        base = Path(job.folder) / f"{k:05d}"
        uniq = load_npy(f"{base}.ucols.npy", DatasetError, "i", mmap=True)
        a, b = np.searchsorted(uniq, [lo, hi])
        if b > a:
            ucount = load_npy(f"{base}.ucount.npy", DatasetError, "i", mmap=True)
            out[np.asarray(uniq[a:b]) - lo] += np.asarray(ucount[a:b])
    save_piece(Path(job.folder) / f"cc.{part:05d}.npy", out)
    return {}


@dataclass(frozen=True)
class Degrees:
    """Node-sized facts about M: entries per row (in-degree) and per column (out-degree), and
    which nodes have a self loop. Saved as .npy files in ``folder``."""

    folder: str

    def load(self, name: str, mmap: bool = False) -> np.ndarray:
        return load_npy(Path(self.folder) / f"{name}.npy", DatasetError, "biu", mmap=mmap)


def _degree_files(pieces: Pieces, job: ScanJob, ranges: Sequence[tuple[int, int]],
                  out: str) -> dict:
    n = pieces.num_nodes
    row = np.zeros(n, dtype=np.int64)
    loops = np.zeros(n, dtype=bool)
    for k in range(len(pieces)):
        r0, r1 = pieces.rows(k)
        if pieces.folder is not None:
            row[r0:r1] = load_npy(Path(pieces.folder) / f"{k:05d}.counts.npy", DatasetError, "i")
        loops[load_npy(Path(job.folder) / f"{k:05d}.loops.npy", DatasetError, "i")] = True
    if pieces.graph is not None:
        row = np.diff(pieces.graph.indptr())
    if job.directed:
        col = np.concatenate([load_npy(Path(job.folder) / f"cc.{i:05d}.npy", DatasetError, "i")
                              for i in range(len(ranges))]) if ranges else np.zeros(0, np.int64)
    else:
        col = row
    gate.make_folder(out)
    for name, arr in (("row", row), ("col", col), ("loops", loops)):
        save_piece(Path(out) / f"{name}.npy", arr)
    return {"nnz": int(row.sum()), "loops": int(loops.sum())}


def scan_pieces(pieces: Pieces, folder: str | Path, runner: Runner, *, check: bool,
                directed: bool, bucket_entries: int = BUCKET_ENTRIES,
                prefix: str = "degrees") -> Degrees:
    """Degrees of M from its pieces (``check``: also check that a stored csr graph is what its
    format promises: sorted unique rows, symmetric when undirected)."""
    folder = Path(folder)
    gate.make_folder(folder)
    job = ScanJob(pieces, str(folder), directed, check)
    results = runner.run(f"{prefix}-scan", _scan_task, [(job, k) for k in range(len(pieces))],
                         weights=pieces.nnz)
    if check and not directed and sum(r.get("sym", 0) for r in results) % 2**64:
        raise DiskGraphError(f"{pieces.graph.path}: marked undirected but its incoming "
                             "adjacency is not symmetric")
    ranges: list[tuple[int, int]] = []
    if directed:
        n = pieces.num_nodes
        step = max(1, min(n, bucket_entries))
        ranges = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
        runner.run(f"{prefix}-columns", _colcount_task,
                   [(job, lo, hi, i) for i, (lo, hi) in enumerate(ranges)],
                   weights=[hi - lo for lo, hi in ranges], unit="node")
    runner.once(f"{prefix}-sum", _degree_files, pieces, job, ranges, str(folder / "sum"))
    return Degrees(str(folder / "sum"))
