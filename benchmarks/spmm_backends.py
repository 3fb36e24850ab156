"""SpMM time of the engine's sparse backends: Â @ X and Âᵀ @ X on R-MAT graphs.

Run: ``python benchmarks/spmm_backends.py [--scales 17,18] [--widths 16,64,128] [--threads 1,2]``
     ``python benchmarks/spmm_backends.py --smoke`` (tiny graph, seconds; for the tests)

Backends, all through `plexus.engine.spmm.SparseBlock` (``mm`` = Â @ X, ``tmm`` = Âᵀ @ X), i.e.
exactly what the engine runs:
- ``torch``: torch CSR tensors and ``torch.sparse.mm``; Âᵀ is stored as a second CSR.
- ``scipy``: scipy CSR; Âᵀ is a CSC view of the same arrays (no copy). scipy's sparse products
  are single-threaded, whatever ``--threads`` says.
- ``torch-sparse``: torch_sparse.SparseTensor, when that optional package is installed (skipped
  with a note otherwise).
Two more rows, not engine backends, show alternatives the torch backend could use
(``--no-extra`` drops them):
- ``torch-int32``: the same ``torch.sparse.mm`` on CSR tensors with int32 indices (the engine
  builds int64 ones; the CPU kernel then converts the indices on every call).
- ``torch-reduce``: ``torch.sparse.mm(csr, X, "sum")``, ATen's sparse-times-dense kernel with a
  reduction, a different code path from plain ``torch.sparse.mm`` on the CPU. The torch backend
  itself switches to it on the CPU from width ``plexus.engine.spmm.REDUCE_MIN_WIDTH`` on, where it
  measured faster, so its rows at wide widths time the same kernel.

Â is the GCN-normalized adjacency (self loops included) of R-MAT (edge factor 16, node ids
randomly permuted by the generator), X a dense float32 N × width block. Each time is the median of
``--reps`` calls after one warm-up; the calls are interleaved round-robin over the backends and
products of one (scale, width, threads) cell, so a burst of load from other users of the machine
hits every backend alike. GFLOP/s counts 2·nnz·width. Output: the printed table and
``spmm_backends.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (OUT_DIR, Tee, format_table, load_bundle, loadavg, machine_info,
                               median, write_results)
from plexus.core.timing import time_calls


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def operators(adj_hat: Any, extra: bool) -> tuple[dict[str, tuple[Callable, Callable]], list[str]]:
    """{backend: (mm, tmm)} for every backend that runs here, and notes on the skipped ones."""
    import numpy as np
    import torch

    from plexus.engine.spmm import SparseBlock, available_backends

    out: dict[str, tuple[Callable, Callable]] = {}
    notes = []
    for backend in ("torch", "scipy", "torch-sparse"):
        if backend not in available_backends():
            notes.append(f"{backend}: skipped (optional package torch-sparse is not installed)")
            continue
        blk = SparseBlock.build(adj_hat, "cpu", backend)
        out[backend] = (blk.mm, blk.tmm)
    if extra:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)

            def csr(m: Any, index: Any = np.int64) -> torch.Tensor:
                m = m.tocsr()
                return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(index)),
                                               torch.from_numpy(m.indices.astype(index)),
                                               torch.from_numpy(m.data.astype(np.float32)),
                                               size=m.shape)
            a, at = csr(adj_hat), csr(adj_hat.T)
            a32, at32 = csr(adj_hat, np.int32), csr(adj_hat.T, np.int32)
        out["torch-int32"] = (lambda x: torch.sparse.mm(a32, x), lambda x: torch.sparse.mm(at32, x))
        out["torch-reduce"] = (lambda x: torch.sparse.mm(a, x, "sum"),
                               lambda x: torch.sparse.mm(at, x, "sum"))
    return out, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", default="17,18", help="R-MAT scales (default 17,18)")
    p.add_argument("--edge-factor", type=int, default=16, help="R-MAT edge factor (default 16)")
    p.add_argument("--widths", default="16,64,128", help="dense widths (default 16,64,128)")
    p.add_argument("--threads", default="1,2", help="torch thread counts (default 1,2)")
    p.add_argument("--reps", type=int, default=5, help="timed calls per cell (default 5)")
    p.add_argument("--no-extra", action="store_true",
                   help="leave out the torch-int32 and torch-reduce rows")
    p.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    p.add_argument("--smoke", action="store_true", help="scale 9, widths 16, 2 reps")
    args = p.parse_args(argv)
    if args.smoke:
        args.scales, args.widths, args.reps, args.edge_factor = "9", "16", 2, 4
    scales, widths, threads = _ints(args.scales), _ints(args.widths), _ints(args.threads)
    if not scales or not widths or not threads or min(widths + threads) < 1 or args.reps < 1:
        p.error("--scales, --widths and --threads need positive integers; --reps >= 1")

    import torch

    say = Tee()
    info = machine_info()
    say(f"machine: {info['cpus']} cpus, load {info['loadavg']}, torch {info['torch']}, "
        f"scipy {info['scipy']}; median of {args.reps} calls after 1 warm-up")
    rows, csv_rows = [], []
    for scale in scales:
        bundle = load_bundle(f"rmat:scale={scale},edge_factor={args.edge_factor},features=8,"
                             "classes=2,seed=0")
        n, nnz = bundle.num_nodes, bundle.nnz
        say(f"R-MAT scale {scale}: N={n:,}, nnz(Â)={nnz:,}")
        ops, notes = operators(bundle.adj_hat, not args.no_extra)
        for note in notes:
            say(f"  note: {note}")
        gen = torch.Generator().manual_seed(0)
        for width in widths:
            x = torch.randn(n, width, generator=gen)
            ref = {name: fn(x) for name, fn in zip(("mm", "tmm"), ops["scipy"])}
            for t in threads:
                torch.set_num_threads(t)
                cells = [(backend, op, fn) for backend, pair in ops.items()
                         for op, fn in zip(("mm", "tmm"), pair)]
                errs = {}
                for backend, op, fn in cells:  # warm-up, and the backends must agree
                    errs[backend, op] = float((fn(x) - ref[op]).abs().max())
                times: dict[tuple[str, str], list[float]] = {(b, o): [] for b, o, _ in cells}
                for _ in range(args.reps):  # round-robin: load bursts hit every cell alike
                    for backend, op, fn in cells:
                        times[backend, op] += time_calls(lambda: fn(x), 1, warmup=0)
                for backend, op, _fn in cells:
                    ts, err = times[backend, op], errs[backend, op]
                    med = median(ts)
                    gflops = 2.0 * nnz * width / med / 1e9
                    rows.append([scale, backend, "A@X" if op == "mm" else "At@X", width, t,
                                 f"{med * 1e3:.1f}", f"{min(ts) * 1e3:.1f}",
                                 f"{max(ts) * 1e3:.1f}", f"{gflops:.2f}", f"{err:.1e}"])
                    csv_rows.append({"scale": scale, "nodes": n, "nnz": nnz,
                                     "backend": backend, "op": op, "width": width,
                                     "threads": t, "median_s": med, "min_s": min(ts),
                                     "max_s": max(ts), "gflops": gflops,
                                     "max_abs_diff_vs_scipy": err, "load": loadavg()})
            say(f"  width {width} done (load {loadavg()})")
        del bundle, ops
    say("")
    say("times in ms; diff = max |result - scipy's|")
    say(format_table(["scale", "backend", "op", "width", "threads", "median ms", "min", "max",
                      "GFLOP/s", "diff"], rows))
    # Compact view: per scale/width/threads, the median of mm and tmm per backend.
    say("")
    say("summary: median ms of A@X + At@X (one forward and one backward SpMM):")
    summary = []
    names = list(dict.fromkeys(r["backend"] for r in csv_rows))
    keys = list(dict.fromkeys((r["scale"], r["width"], r["threads"]) for r in csv_rows))
    for key in keys:
        cells = []
        for b in names:
            pair = [r["median_s"] for r in csv_rows
                    if (r["scale"], r["width"], r["threads"]) == key and r["backend"] == b]
            cells.append(f"{sum(pair) * 1e3:.1f}" if pair else "-")
        summary.append([*key, *cells])
    say(format_table(["scale", "width", "threads", *names], summary))
    write_results(args.out, "spmm_backends", csv_rows, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
