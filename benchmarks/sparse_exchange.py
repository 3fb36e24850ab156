"""Sparse exchanges measured: bytes per epoch of plexus-train with ``--sparse-comm on`` and
``off`` on an R-MAT graph at 8x1x1 and 1x8x1, the ledger's against the schedule's (priced with
the run's own exchange rows), and the saving's factor against the model's.

Run: ``python benchmarks/sparse_exchange.py [--spec rmat:...] [--out
benchmarks/out/sparse_exchange.txt]``

Each run is one ``plexus-train --log-json`` process (3 epochs, no evaluation but the final one);
its summary holds the busiest rank's ledger bytes per axis (``comm_bytes_max_rank``) and the
schedule's for that rank (``comm_bytes_declared_max_rank``, `plexus.train.report`). The model
without data (``plexus-model``'s estimate from the mean degree) is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import write_lines  # noqa: E402
from plexus.studies.launchers import interpreter  # noqa: E402

SPEC = "rmat:scale=13,edge_factor=8,features=64,classes=8"
GRIDS = ("8x1x1", "1x8x1")
#: both orders: at 8x1x1 stage 0 and 2 sum over x, at 1x8x1 stage 1 sums and gathers over y
MODEL = ["--layers", "3", "--hidden", "32", "--order", "combine,agg,agg"]


def run(spec: str, grid: str, mode: str, epochs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.json"
        cmd = [*interpreter(sys.executable), "-m", "plexus.train", "--dataset", spec, "--grid",
               grid, "--epochs", str(epochs), "--eval-every", "0", "--sparse-comm", mode,
               "--log-json", str(log), "--no-cache", *MODEL]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        subprocess.run(cmd, check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL)
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return next(r for r in records if r.get("summary"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=SPEC)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/sparse_exchange.txt"))
    args = p.parse_args()
    start = time.time()
    lines = [f"# benchmarks/sparse_exchange.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f", load {os.getloadavg()[0]:.1f}; plexus-train --dataset {args.spec} "
             f"{' '.join(MODEL)} --epochs {args.epochs} --eval-every 0",
             f"{'grid':<7} {'mode':<4} {'ledger bytes (busiest rank)':>28} "
             f"{'schedule bytes':>15} {'equal':>6}"]
    factors = []
    for grid in GRIDS:
        got = {}
        for mode in ("on", "off"):
            s = run(args.spec, grid, mode, args.epochs)
            ledger = sum(s["comm_bytes_max_rank"].values())
            declared = sum(s["comm_bytes_declared_max_rank"].values())
            same = all(abs(s["comm_bytes_max_rank"][a] - s["comm_bytes_declared_max_rank"][a])
                       <= 1e-6 * max(1.0, s["comm_bytes_declared_max_rank"][a]) for a in "xyz")
            got[mode] = (ledger, declared)
            lines.append(f"{grid:<7} {mode:<4} {ledger:>28,.0f} {declared:>15,.0f} "
                         f"{'yes' if same else 'NO':>6}")
        (on, on_m), (off, off_m) = got["on"], got["off"]
        factors.append(f"{grid}: measured on/off {on / off:.4f}, the schedule's {on_m / off_m:.4f}")
    write_lines(lines + factors, args.out, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
