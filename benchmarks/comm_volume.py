"""Communication volume per rank of 1D, 1.5D, 2D and 3D (Plexus) full-graph GCN training.

Run: ``python benchmarks/comm_volume.py [--out benchmarks/out/comm_volume.csv] [--no-plot]``

Model: a GCN of L = 3 layers, hidden width 128 (widths D_0 = features, D_1 = D_2 = 128,
D_3 = classes), one training epoch (forward + backward), float32 (4 bytes per element). Volumes are
elements one rank sends, with ring collectives: all-reduce of n over p moves 2(p-1)/p·n,
all-gather / reduce-scatter / broadcast-stages of a result of n move (p-1)/p·n. Layer 0's input
gradient is never needed (fixed features), so no layer has a dH term at l = 0. The baselines follow
the algorithms of Tripathy, Yelick and Buluç (CAGNET, SC20); the formulas as modelled here, per
layer l with D = D_l, D' = D_{l+1}, P ranks:

1D   (block rows of Â and H, W replicated)
     forward  all-gather H:                     (P-1)/P · N·D
     backward all-gather dOUT for Âᵀ·dOUT (l>0): (P-1)/P · N·D'
              all-reduce dW:                    2(P-1)/P · D·D'

1.5D (replication factor c, c² | P: P/c block rows, each held by c ranks that split the P/c
     broadcast stages among them, then sum their partial outputs)
     forward  stages N·D/c  +  all-reduce over c of the (c/P)·N × D block: 2(c-1)·N·D/P
     backward (l>0) the same with D'; all-reduce dW: 2(P-1)/P · D·D'
     c is chosen per P (the best of all c with c² | P; c = 1 is 1D up to the (P-1)/P factor).

2D   (Pr × Pc grid, Pr·Pc = P, Pr ≤ Pc as square as possible; SUMMA for Â·H, W replicated)
     forward  Â row panel:  nnz/Pr · (Pc-1)/Pc   (one element per non-zero, as CAGNET counts)
              H col panel:  N·D/Pc · (Pr-1)/Pr
              OUT = AGG·W: reduce-scatter over the process row, N·D'/Pr · (Pc-1)/Pc
     backward all-gather dOUT over the process row: N·D'/Pr · (Pc-1)/Pc
              all-reduce dW: 2(P-1)/P · D·D'
              (l>0) SUMMA for Âᵀ·dAGG: nnz/Pc · (Pr-1)/Pr + N·D/Pr · (Pc-1)/Pc
     For a square grid this is ≈ (nnz + 2·N·D + 2·N·D')/√P per layer: CAGNET's nnz/√P + N·D/√P
     per SpMM.

3D   Plexus, from `plexus.perfmodel.epoch_volume` (the design doc's formulas with padding, bias and
     the loss's all-reduces included): the grid X·Y·Z = P with the smallest volume, with every layer
     aggregating first as the paper ("3d"), and with the best per-layer order ("3d-order").

Graph sizes (nnz of the GCN-normalized Â, self loops included):
- ogbn-products: N = 2,449,029; 61,859,140 undirected edges stored both ways (123,718,280) plus N
  self loops = 126,167,309; 100 features, 47 classes.
- ogbn-papers100M: N = 111,059,956; 1,615,685,872 directed edges, symmetrized (3,231,371,744) plus
  N self loops = 3,342,431,700; 128 features, 172 classes. (Without symmetrizing, as the loader's
  ``directed`` normalization does, nnz is 1.73B; the 3D volume does not depend on nnz at all.)
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from plexus_datasets.base.atomic import atomic_file
from plexus_partition.model.grid import GridError, parse_world_sizes
from plexus.perfmodel import ModelSpec, epoch_volume, factorizations
from plexus_partition.model.layout import ORDERS

DTYPE_BYTES = 4
LAYERS = 3
HIDDEN = 128


@dataclass(frozen=True)
class GraphSize:
    """The sizes the volume formulas need."""

    name: str
    num_nodes: int
    nnz: int
    features: int
    classes: int


GRAPHS = (
    GraphSize("ogbn-products", 2_449_029, 123_718_280 + 2_449_029, 100, 47),
    GraphSize("ogbn-papers100M", 111_059_956, 3_231_371_744 + 111_059_956, 128, 172),
)


def widths(g: GraphSize, layers: int = LAYERS, hidden: int = HIDDEN) -> list[int]:
    """D_0 .. D_L."""
    return [g.features] + [hidden] * (layers - 1) + [g.classes]


def _ar(n: float, p: int) -> float:
    return 2.0 * (p - 1) / p * n


def _ag(n: float, p: int) -> float:
    return (p - 1) / p * n


def volume_1d(g: GraphSize, p: int, layers: int = LAYERS, hidden: int = HIDDEN) -> float:
    """Elements per rank per epoch of 1D (block-row) training (module docstring)."""
    w, n, total = widths(g, layers, hidden), g.num_nodes, 0.0
    for l in range(layers):
        d, d2 = w[l], w[l + 1]
        total += _ag(n * d, p) + _ar(d * d2, p)
        if l > 0:
            total += _ag(n * d2, p)
    return total


def volume_15d(g: GraphSize, p: int, c: int, layers: int = LAYERS, hidden: int = HIDDEN) -> float:
    """Elements per rank per epoch of 1.5D training with replication factor ``c``."""
    if p % (c * c):
        raise ValueError(f"1.5D needs c² | P, got c={c}, P={p}")
    w, n, total = widths(g, layers, hidden), g.num_nodes, 0.0

    def spmm(width: int) -> float:
        return n * width / c + 2.0 * (c - 1) * n * width / p

    for l in range(layers):
        d, d2 = w[l], w[l + 1]
        total += spmm(d) + _ar(d * d2, p)
        if l > 0:
            total += spmm(d2)
    return total


def best_15d(g: GraphSize, p: int) -> tuple[float, int]:
    """(volume, c) of the best replication factor with c² | P."""
    options = [c for c in range(1, math.isqrt(p) + 1) if p % (c * c) == 0]
    return min((volume_15d(g, p, c), c) for c in options)


def grid_2d(p: int) -> tuple[int, int]:
    """(Pr, Pc), Pr·Pc = P, Pr ≤ Pc, as square as possible."""
    pr = max(r for r in range(1, math.isqrt(p) + 1) if p % r == 0)
    return pr, p // pr


def volume_2d(g: GraphSize, p: int, layers: int = LAYERS, hidden: int = HIDDEN) -> float:
    """Elements per rank per epoch of 2D (SUMMA) training (module docstring)."""
    pr, pc = grid_2d(p)
    w, n, total = widths(g, layers, hidden), g.num_nodes, 0.0
    for l in range(layers):
        d, d2 = w[l], w[l + 1]
        total += g.nnz / pr * (pc - 1) / pc + n * d / pc * (pr - 1) / pr  # SUMMA Â·H
        total += n * d2 / pr * (pc - 1) / pc  # reduce-scatter OUT over the process row
        total += n * d2 / pr * (pc - 1) / pc + _ar(d * d2, p)  # gather dOUT, all-reduce dW
        if l > 0:
            total += g.nnz / pc * (pr - 1) / pr + n * d / pr * (pc - 1) / pc  # SUMMA Âᵀ·dAGG
    return total


def best_3d(g: GraphSize, p: int, search_orders: bool,
            layers: int = LAYERS, hidden: int = HIDDEN) -> tuple[float, tuple[int, int, int], str]:
    """(volume, grid, orders) of the 3D grid (and, if ``search_orders``, per-layer orders) with
    the smallest per-rank volume; bias on, features fixed, as `plexus-train` defaults."""
    spec = ModelSpec.of(g.num_nodes, g.nnz, g.features, g.classes, num_layers=layers,
                        hidden=hidden, name=g.name)
    candidates = list(itertools.product(ORDERS, repeat=layers)) if search_orders \
        else [("agg",) * layers]
    best = None
    for grid in factorizations(p):
        for orders in candidates:
            vol = epoch_volume(spec, grid, orders).total_elements
            key = (vol, grid, orders)
            if best is None or key < best:
                best = key
    assert best is not None
    vol, grid, orders = best
    return vol, grid, "/".join(o[0] for o in orders)  # "a/a/c": no comma inside a CSV cell


def rows_for(g: GraphSize, world_sizes: Sequence[int]) -> list[dict[str, object]]:
    """One record per (world size, method)."""
    out = []
    for p in world_sizes:
        v15, c = best_15d(g, p)
        pr, pc = grid_2d(p)
        v3, grid3, _ = best_3d(g, p, search_orders=False)
        v3o, grid3o, orders = best_3d(g, p, search_orders=True)
        methods = [("1d", volume_1d(g, p), f"P={p}"), ("1.5d", v15, f"c={c}"),
                   ("2d", volume_2d(g, p), f"{pr}x{pc}"),
                   ("3d", v3, "x".join(map(str, grid3))),
                   ("3d-order", v3o, "x".join(map(str, grid3o)) + f" {orders}")]
        for method, vol, config in methods:
            out.append({"dataset": g.name, "world_size": p, "method": method, "config": config,
                        "elements_per_rank": vol, "bytes_per_rank": vol * DTYPE_BYTES})
    return out




def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    """CSV with one line per (dataset, world size, method), written atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    with atomic_file(path, "w") as f:
        f.write(buf.getvalue())


def write_plot(rows: list[dict[str, object]], path: Path) -> bool:
    """Log-log volume per rank vs world size, one panel per dataset. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        for method in methods:
            pts = [(r["world_size"], r["bytes_per_rank"] / 2**30) for r in rows
                   if r["dataset"] == name and r["method"] == method]
            ax.plot(*zip(*pts), marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name}, GCN {LAYERS} layers, hidden {HIDDEN}")
        ax.set_xlabel("ranks (G)")
        ax.set_ylabel("communication per rank per epoch (GiB)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    # savefig picks the format from the extension, so the temp name keeps ".png".
    with atomic_file(path, "wb") as f:
        fig.savefig(f, dpi=120, format=path.suffix[1:] or "png")
    plt.close(fig)
    return True


def format_table(rows: list[dict[str, object]]) -> str:
    """Per dataset: one line per world size, GiB per rank for each method, and the configs."""
    lines = [f"GCN {LAYERS} layers, hidden {HIDDEN}, float32; communication per rank per epoch "
             "(forward + backward), GiB"]
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for name in names:
        lines += ["", name, f"{'G':>6} " + " ".join(f"{m:>9}" for m in methods)
                  + "   1.5d c | 2d grid | 3d grid | 3d-order grid"]
        sizes = list(dict.fromkeys(r["world_size"] for r in rows if r["dataset"] == name))
        for p in sizes:
            by = {r["method"]: r for r in rows if r["dataset"] == name and r["world_size"] == p}
            vals = " ".join(f"{by[m]['bytes_per_rank'] / 2**30:>9.3f}" for m in methods)
            cfg = " | ".join(str(by[m]["config"]) for m in methods[1:])
            lines.append(f"{p:>6} {vals}   {cfg}")
    return "\n".join(lines)


def _world_sizes(text: str) -> list[int]:
    try:
        return list(parse_world_sizes(text))
    except GridError as e:
        raise argparse.ArgumentTypeError(f"world sizes {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, write the CSV and (with matplotlib) the PNG."""
    parser = argparse.ArgumentParser(
        prog="comm_volume.py",
        description="Per-rank communication volume of 1D, 1.5D, 2D and 3D GCN training on "
                    "ogbn-products and ogbn-papers100M sizes (3 layers, hidden 128).")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/comm_volume.csv"),
                        help="CSV to write (default benchmarks/out/comm_volume.csv)")
    parser.add_argument("--plot", type=Path,
                        help="PNG to write (default: the CSV path with .png)")
    parser.add_argument("--no-plot", action="store_true", help="skip the plot")
    parser.add_argument("--world-sizes", type=_world_sizes,
                        default=[16, 32, 64, 128, 256, 512, 1024], metavar="G,G,...",
                        help="world sizes (default 16,32,...,1024)")
    args = parser.parse_args(argv)
    rows = [r for g in GRAPHS for r in rows_for(g, args.world_sizes)]
    print(format_table(rows))
    write_csv(rows, args.out)
    print(f"\nwrote {args.out}")
    if not args.no_plot:
        plot = args.plot or args.out.with_suffix(".png")
        if write_plot(rows, plot):
            print(f"wrote {plot}")
        else:
            print("matplotlib not installed: no plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
