"""CPU step time of two source trees (before/after a change), interleaved: each round runs
``plexus-train`` once from each tree on the same job, and the medians of every run's training
steps (the first left out: warm-up) are compared. The load average is printed with each run:
on a shared machine the figures mean little unless it stays low.

    python benchmarks/step_time_ab.py --before /path/to/main --after .          # Cora 2x2x2
    python benchmarks/step_time_ab.py --before ../main --after . --rounds 5 \\
        --dataset rmat:scale=16,edge_factor=16,features=128 --epochs 6

Each tree runs as ``python -m plexus.train`` with ``PYTHONPATH`` set to it, so both use their
own code and the same interpreter. Each tree keeps its shard stores in a cache folder of its own
(made once per invocation): a newer tree may refuse an older one's stores, and the partitioning
is not part of a step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from plexus.studies.launchers import interpreter


def one_run(tree: Path, args: argparse.Namespace, extra: list[str], cache: Path) -> list[float]:
    """The training steps' times (s) of one run from ``tree``, the first left out."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.json"
        cmd = [*interpreter(sys.executable), "-m", "plexus.train", "--grid", args.grid,
               "--dataset", args.dataset, "--epochs", str(args.epochs), "--eval-every", "0",
               "--quiet", "--cache", str(cache), "--log-json", str(log), *extra]
        # a tree of the three projects: its datasets and partitioner projects too
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            str(p) for p in (tree, tree / "datasets", tree / "partitioners") if p.is_dir())}
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: plexus-train failed:\n{proc.stderr[-2000:]}")
        rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [r["epoch_time_s"] for r in rows if "epoch_time_s" in r and not r.get("summary")][1:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, type=Path, help="source tree before the change")
    p.add_argument("--after", required=True, type=Path, help="source tree after it")
    p.add_argument("--grid", default="2x2x2")
    p.add_argument("--dataset", default="cora")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--after-arg", action="append", default=[], metavar="FLAG",
                   help="a flag only the after run gets (e.g. --after-arg=--comm-dtype=bf16)")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    steps: dict[str, list[float]] = {"before": [], "after": []}
    medians: dict[str, list[float]] = {"before": [], "after": []}
    print(f"{args.dataset} on {args.grid}, {args.epochs} epochs per run (no evaluation), "
          f"{args.rounds} rounds, interleaved")
    with tempfile.TemporaryDirectory() as caches:
        for r in range(args.rounds):
            for name, tree, extra in (("before", args.before, []),
                                      ("after", args.after, args.after_arg)):
                load = os.getloadavg()[0]
                times = one_run(tree.resolve(), args, extra, Path(caches) / name)
                steps[name] += times
                medians[name].append(statistics.median(times))
                print(f"  round {r + 1} {name:<6} median step {medians[name][-1] * 1e3:8.2f} ms "
                      f"(load {load:.2f} at start, {os.getloadavg()[0]:.2f} at end)", flush=True)
    b, a = statistics.median(medians["before"]), statistics.median(medians["after"])
    print(f"median of the runs' medians: before {b * 1e3:.2f} ms, after {a * 1e3:.2f} ms, "
          f"after/before {a / b:.3f}; all steps pooled: before "
          f"{statistics.median(steps['before']) * 1e3:.2f} ms, after "
          f"{statistics.median(steps['after']) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
