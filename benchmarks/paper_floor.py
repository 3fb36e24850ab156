"""How far below the Plexus paper's measured epochs an honest price can go: our 3D defaults (the
model's search over grids, orders, node blocks, collective forms and sparse exchanges) beside a
sparsity-aware 1D decomposition's communication alone (each rank owns N/G rows and receives,
per layer and direction, the distinct remote rows its rows' non-zeros touch, as SA/GVB-style
1D algorithms do), on the same measured perlmutter-a100 profile.

Run: ``python benchmarks/paper_floor.py [--out benchmarks/out/paper_floor.txt]``

The 1D figure is a lower bound of that decomposition's epoch, made generous on purpose: every
rank's exchange at the profile's cross-node all-to-all rate ("inter"), no compute, no
imbalance; layer 0's fixed features received once at set-up (not per step); per step, the
forward of layers 1..L-1 and the backward dH of layers L-1..1, each a 128-wide float32 row per
needed remote node. Under the load-balancing random permutation a row block of R = N/G rows
with k non-zeros per row touches N·(1 - e^(-k/G)) distinct columns, of which (1 - 1/G) are
remote (k = nnz/N of Â with self loops).

What halving the paper's epoch would take of our 3D bytes: ``GB/s for 0.5x`` is the rate at which
the bytes a rank sends per epoch (every link class together) would have to travel for the epoch
to be half the paper's measured one, after the model's compute and overheads of the same grid
(``never``: those alone exceed it), set beside the profile's measured cross-node rates. ``touched``
is the share of its rows a block of Â touches on each axis of the grid (1 − (1 − 1/p)^k for an
axis of p ranks): what a sparse exchange could leave out is the rest, nothing where it is ~100%.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_lines  # noqa: E402
from benchmarks.paper import MEASURED_MS, PROFILE, header, priced  # noqa: E402
from plexus.perfmodel.profiles import load_profile  # noqa: E402
from plexus_datasets.ogb_sizes import ogb_sizes  # noqa: E402

LAYERS, HIDDEN = 3, 128


def one_d_ms(num_nodes: int, nnz: int, gpus: int, alpha: float, beta: float) -> tuple[float,
                                                                                     float]:
    """(GB one rank receives per epoch, ms) of the sparsity-aware 1D decomposition's exchanges
    (module docstring)."""
    k = nnz / num_nodes
    rows = num_nodes * (1 - math.exp(-k / gpus)) * (1 - 1 / gpus)
    moves = 2 * (LAYERS - 1)  # forward of layers 1..L-1, dH of layers L-1..1
    sent = moves * rows * HIDDEN * 4
    return sent / 1e9, 1e3 * (sent * beta + moves * (gpus - 1) * alpha)


def needed_rate(cfg: dict, measured_ms: float) -> str:
    """GB/s the 3D grid's bytes per rank would need for an epoch of half ``measured_ms``."""
    left = 0.5 * measured_ms / 1e3 - (cfg["time_s"] - cfg["comm_s"])
    return "never" if left <= 0 else f"{cfg['comm_bytes'] / left / 1e9:.1f}"


def touched(k: float, grid: list[int]) -> str:
    """The share of a block's rows that hold a non-zero on each axis of ``grid``."""
    return "/".join(f"{100 * (1 - (1 - 1 / p) ** k):.0f}%" if p > 1 else "-" for p in grid)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/paper_floor.txt"))
    args = p.parse_args()
    start = time.time()
    profile = load_profile(PROFILE)
    alpha, beta = profile.link_class("inter")
    rates = ", ".join(f"{name} {1 / profile.link_class(name)[1] / 1e9:.1f}"
                      for name in ("inter", "strided", "strided4"))
    lines = header("paper_floor.py", f"profile {PROFILE}; 1D at its cross-node rate "
                   f"(alpha {alpha:.1e} s, {1 / beta / 1e9:.1f} GB/s); x = / the paper's "
                   "measured epoch (arXiv 2505.04083 v2 Fig. 10)",
                   f"measured cross-node rates of the profile, GB/s: {rates}")
    for dataset, measured in MEASURED_MS.items():
        sizes = ogb_sizes(dataset)
        assert sizes is not None
        ours = priced(dataset, sorted(measured), ["--placement", "best"])
        lines += ["", f"{dataset}: {LAYERS}-layer GCN, hidden {HIDDEN}, 4 GPUs per node",
                  f"{'GPUs':>5} {'measured':>9} {'ours 3D ms':>11} {'x':>5} {'of it comm':>10} "
                  f"{'1D GB/rank':>11} {'1D comm ms':>11} {'x':>5}  {'3D GB/rank':>10} "
                  f"{'GB/s for 0.5x':>13}  touched per axis"]
        for g in sorted(measured):
            cfg = ours[g]
            gb, ms = one_d_ms(sizes.num_nodes, sizes.gcn_nnz, g, alpha, beta)
            lines.append(f"{g:>5} {measured[g]:>9} {cfg['time_s'] * 1e3:>11.1f} "
                         f"{cfg['time_s'] * 1e3 / measured[g]:>5.2f} "
                         f"{100 * cfg['comm_s'] / cfg['time_s']:>9.0f}% {gb:>11.2f} {ms:>11.1f} "
                         f"{ms / measured[g]:>5.2f}  {cfg['comm_bytes'] / 1e9:>10.2f} "
                         f"{needed_rate(cfg, measured[g]):>13}  "
                         f"{touched(sizes.gcn_nnz / sizes.num_nodes, cfg['grid'])}")
    write_lines(lines, args.out, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
