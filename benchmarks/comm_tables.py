"""plexus-model's plan at scale, before and after issue 45: ogbn-papers100M and ogbn-products at
64-2,048 GPUs (4 per node, the perlmutter-a100 profile as shipped), the fastest grid per GPU
count with its epoch, communication share per axis and link class and bytes per rank.

Run: ``python benchmarks/comm_tables.py [--out benchmarks/out/comm_tables.txt]``

Each row is one ``plexus-model --dataset D --gpus 64,...,2048 --gpus-per-node 4 --json`` call
(published sizes, no data read; the model's default GCN, 2 layers, hidden 16, --order auto):

- ``before fp32``: today's main: ``--sparse-comm off --gather-input`` (layer 0's features
  gathered every step, every sum an all-reduce, fp32 payloads);
- ``before --dtype bf16``: main's only way to send bf16, which also computes in bf16;
- ``after fp32``: the defaults now (the gathered input kept where memory allows, sparse
  exchanges where priced cheaper, rows estimated from the mean degree);
- ``after --comm-dtype bf16``: the same with bf16 activation and gradient payloads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_lines  # noqa: E402

from plexus.perfmodel.cli import model_main  # noqa: E402

GPUS = "64,128,256,512,1024,2048"
DATASETS = ("ogbn-papers100M", "ogbn-products")
VARIANTS = {
    "before fp32": ["--sparse-comm", "off", "--gather-input"],
    "before --dtype bf16": ["--sparse-comm", "off", "--gather-input", "--dtype", "bf16"],
    "after fp32": [],
    "after --comm-dtype bf16": ["--comm-dtype", "bf16"],
}


def run(dataset: str, extra: list[str]) -> dict:
    """plexus-model's JSON for one dataset and variant (the calibration env var ignored: the
    profile as shipped)."""
    out = io.StringIO()
    saved = os.environ.pop("PLEXUS_CALIBRATION", None)
    try:
        with contextlib.redirect_stdout(out):
            status = model_main(["--dataset", dataset, "--gpus", GPUS, "--gpus-per-node", "4",
                                 "--profile", "perlmutter-a100", "--json", "--top", "1",
                                 *extra])
    finally:
        if saved is not None:
            os.environ["PLEXUS_CALIBRATION"] = saved
    assert status == 0, f"plexus-model failed for {dataset} {extra}"
    return json.loads(out.getvalue())


def shares(cfg: dict) -> str:
    parts = []
    for axis, seconds in cfg["comm_s_per_axis"].items():
        if seconds > 0:
            parts.append(f"{axis} {100 * seconds / cfg['time_s']:.0f}% {cfg['links'][axis]}")
    return " ".join(parts) or "-"


def table(dataset: str) -> list[str]:
    lines = [f"{dataset}: fastest grid per GPU count (4 GPUs per node, profile perlmutter-a100)",
             f"{'GPUs':>5}  {'variant':<24} {'grid':<9} {'epoch':>9} {'comm%':>6} "
             f"{'comm share per axis, link':<34} {'bytes/rank':>10} {'memory/rank':>11}"]
    docs = {name: run(dataset, extra) for name, extra in VARIANTS.items()}
    for k, world in enumerate(docs["before fp32"]["worlds"]):
        for name, doc in docs.items():
            cfg = doc["worlds"][k]["configs"][0]
            grid = "x".join(map(str, cfg["grid"]))
            lines.append(
                f"{world['world_size']:>5}  {name:<24} {grid:<9} {cfg['time_s'] * 1e3:>7.1f}ms "
                f"{100 * cfg['comm_s'] / cfg['time_s']:>5.1f}% {shares(cfg):<34} "
                f"{cfg['comm_bytes'] / 2**30:>7.2f}GiB {cfg['memory_bytes'] / 2**30:>8.2f}GiB")
        lines.append("")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/comm_tables.txt"))
    args = p.parse_args()
    start = time.time()
    lines = [f"# benchmarks/comm_tables.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f", load {os.getloadavg()[0]:.1f} (the model is arithmetic: load does not matter)",
             "# variants: " + "; ".join(f"{k}: plexus-model {' '.join(v) or '(defaults)'}"
                                      for k, v in VARIANTS.items()), ""]
    for dataset in DATASETS:
        lines += table(dataset)
    write_lines(lines, args.out, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
