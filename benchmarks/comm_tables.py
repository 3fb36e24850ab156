"""plexus-model's plan at the Plexus paper's scale and model: ogbn-papers100M at 64-2,048 GPUs and
ogbn-products at 4-512 (4 GPUs per node, the measured perlmutter-a100 profile), a 3-layer GCN of
hidden 128 (the paper's), the fastest grid per GPU count beside the paper's measured epoch.

Run: ``python benchmarks/comm_tables.py [--out benchmarks/out/comm_tables.txt]``

Each row is one ``plexus-model --dataset D --gpus ... --gpus-per-node 4 --layers 3 --hidden 128
--json`` call (published sizes, no data read; `benchmarks.paper`):

- ``paper algorithm``: the paper's (`benchmarks.paper.PAPER_MODE`: learnable input features,
  aggregate first, no bias or dropout, every sum an all-reduce, fp32 payloads);
- ``ours fp32``: our defaults (fixed input gathered once and kept where memory allows, order per
  layer, sparse exchanges and two-level collectives where priced cheaper, and each node's block
  of the grid where priced fastest: ``--placement best``, what ``plexus-train --placement auto``
  runs with the profile as its calibration);
- ``ours fp32, launcher numbering``: the same with the launcher's consecutive ranks per node
  (``plexus-train --placement launcher``);
- ``ours bf16 (upper bound)``: ``--comm-dtype bf16`` payloads; no measured full-graph bf16 epoch
  exists to check it against.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_lines  # noqa: E402
from benchmarks.paper import MEASURED_MS, PAPER_MODE, header, priced  # noqa: E402

VARIANTS = {
    "paper algorithm": PAPER_MODE,
    "ours fp32": ["--placement", "best"],
    "ours fp32, launcher numbering": [],
    "ours bf16 (upper bound)": ["--placement", "best", "--comm-dtype", "bf16"],
}


def shares(cfg: dict) -> str:
    parts = []
    for axis, seconds in cfg["comm_s_per_axis"].items():
        if seconds > 0:
            parts.append(f"{axis} {100 * seconds / cfg['time_s']:.0f}% {cfg['links'][axis]}")
    return " ".join(parts) or "-"


def table(dataset: str) -> list[str]:
    measured = MEASURED_MS[dataset]
    gpus = sorted(measured)
    lines = [f"{dataset}, model: 3-layer GCN, hidden 128 (the paper's); fastest grid per GPU "
             "count, 4 GPUs per node, profile perlmutter-a100; measured: the paper's Fig. 10",
             f"{'GPUs':>5} {'measured':>9}  {'variant':<29} {'grid':<9} {'node':<6} "
             f"{'epoch':>9} {'x':>5} {'comm%':>6} {'comm share per axis, link':<40} "
             f"{'GiB/rank':>8} {'inter+strided':>13} {'memory':>8}"]
    docs = {name: priced(dataset, gpus, extra) for name, extra in VARIANTS.items()}
    for g in gpus:
        for name, rows in docs.items():
            cfg = rows[g]
            ms = cfg["time_s"] * 1e3
            node = "x".join(map(str, cfg["node"])) if cfg.get("node") else "-"
            by_link = cfg["link_bytes"]  # each collective in the form it runs in
            across = sum(v for k, v in by_link.items() if k != "intra")
            lines.append(
                f"{g:>5} {measured[g]:>9}  {name:<29} {'x'.join(map(str, cfg['grid'])):<9} "
                f"{node:<6} {ms:>7.1f}ms {ms / measured[g]:>5.2f} "
                f"{100 * cfg['comm_s'] / cfg['time_s']:>5.1f}% {shares(cfg):<40} "
                f"{cfg['comm_bytes'] / 2**30:>8.2f} {across / 2**30:>13.2f} "
                f"{cfg['memory_bytes'] / 2**30:>6.2f}Gi")
        lines.append("")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/comm_tables.txt"))
    args = p.parse_args()
    start = time.time()
    lines = header("comm_tables.py", "variants: " + "; ".join(
        f"{k}: {' '.join(v) or '(defaults)'}" for k, v in VARIANTS.items()),
        "x = our epoch / the paper's measured; GiB/rank: bytes one rank sends per epoch "
        "(inter+strided: of them, across nodes)")
    for dataset in MEASURED_MS:
        lines += table(dataset)
    write_lines(lines, args.out, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
