"""A dense graph: epoch time and peak memory per rank on an ogbn-proteins-size stand-in (132,534
nodes, average degree ~600, 112 tasks, 8 edge features: about 80M non-zeros in Â), Plexus at
1x1x1 and 2x2x2 next to PyG's full-batch GCN of OGB's example, each variant in its own process.

    flock /work/bench.lock python benchmarks/proteins.py     # full size (~15 GiB at its peak)
    python benchmarks/proteins.py --smoke                     # a small stand-in, seconds

The stand-in (`plexus_datasets.proteins_standin`) is written once under ``--workdir`` in OGB's raw
layout and read back by the ogbn-proteins loader (ogb builds its processed cache on the first
read). Model everywhere: OGB's proteins/gnn.py GCN (3 layers, hidden 256, no dropout, Adam
lr 0.01, BCEWithLogitsLoss over the training nodes' 112 tasks); one epoch = forward, backward and
the Adam step.

- PyG: ``GCNConv(normalize=False)`` on the precomputed Â as a ``torch.sparse_csr_tensor`` adj_t
  (torch-sparse does not install here), as benchmarks/memory.py runs it; its process loads the
  graph the same way. Peak RSS of the whole process (loading included) and of training alone
  (the kernel's count restarted after loading).
- Plexus: ``plexus-partition`` cuts the grid's shards once (its own process), then
  ``plexus-train --shards`` trains (each rank reads only its shard). Per rank: the peak RSS of
  training, the tracked tensor peak, and the memory model's figure (plexus.perfmodel) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.memory import GIB, gib, grid_rows, run_child, train_figures  # noqa: E402

SMOKE = {"nodes": 600, "degree": 40, "epochs": 2, "hidden": 16}


def standin(args: argparse.Namespace) -> Path:
    """The stand-in's root under ``--workdir`` (written once per size and seed)."""
    from plexus_datasets.proteins_standin import write_proteins_standin

    root = Path(args.workdir) / f"proteins-{args.nodes}-{args.degree}-seed{args.seed}"
    done = root / "complete"
    if not done.exists():
        start = time.perf_counter()
        write_proteins_standin(root, args.nodes, args.degree, seed=args.seed)
        done.write_text(f"{time.perf_counter() - start:.1f} s\n")
    return root


# ---- the PyG child ----------------------------------------------------------------------------
def pyg_worker(args: argparse.Namespace) -> None:
    """Train PyG's GCN (adj_t) in this process and print one JSON line of figures."""
    import torch

    torch.set_num_threads(args.threads)
    from benchmarks.baseline import pyg_step
    from plexus.core.timing import time_calls
    from plexus.runtime.memstats import peak_rss_bytes, reset_peak_rss
    from plexus.testing.gridrun import load_bundle

    bundle = load_bundle("ogbn-proteins", args.root)
    step = pyg_step(bundle, args.hidden, args.layers, 0.0, use_adj_t=True)
    loaded = peak_rss_bytes()
    del bundle  # PyG's model holds what it needs (x, labels, adj_t)
    reset = reset_peak_rss()
    times = time_calls(step, args.epochs, warmup=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"epoch_times": times, "peak_rss": max(peak, loaded),
                      "train_rss": peak if reset else None}))


def run_pyg(args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--pyg-worker", "--root", str(args.root), "--epochs",
           str(args.epochs), "--threads", str(args.threads), "--hidden", str(args.hidden),
           "--layers", str(args.layers)]
    code, rss, wall, text, killed = run_child(cmd, args.min_free * GIB)
    if code != 0:
        return {"ok": False, "why": "killed: low host memory" if killed else text[-2000:]}
    figures = json.loads(text.strip().splitlines()[-1])
    times = figures["epoch_times"][1:] or figures["epoch_times"]  # the first warms up
    return {"ok": True, "peak_rss": max(rss, figures["peak_rss"]),
            "train_rss": figures["train_rss"], "epoch_s": sorted(times)[len(times) // 2],
            "wall_s": wall}


# ---- the Plexus children ----------------------------------------------------------------------
def run_plexus(args: argparse.Namespace, grid: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        store, log = Path(tmp) / "store", Path(tmp) / "run.json"
        # agg on every layer, as the snapshot in results/proteins.txt was cut (plexus-partition's
        # default is now auto, which combines first on the last layer: 256 -> 112)
        cut = ["plexus-partition", "--dataset", "ogbn-proteins", "--root", str(args.root),
               "--grid", grid, "--layers", str(args.layers), "--orders", "agg",
               "--out", str(store)]
        code, cut_rss, cut_s, text, killed = run_child(cut, args.min_free * GIB, env)
        if code != 0:
            return {"ok": False, "why": "killed: low host memory" if killed else text[-2000:]}
        cmd = ["plexus-train", "--shards", str(store), "--grid", grid,
               "--recipe", "ogbn-proteins-gcn", "--hidden", str(args.hidden),
               "--epochs", str(args.epochs), "--eval-every", "0", "--quiet", "--log-json",
               str(log)]
        r = train_figures(cmd, log, args.min_free * GIB, env)
    return {**r, "cut_rss": cut_rss, "cut_s": cut_s}


def build_parser() -> argparse.ArgumentParser:
    from plexus_datasets.proteins_standin import REAL_DEGREE, REAL_NODES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=REAL_NODES)
    p.add_argument("--degree", type=float, default=REAL_DEGREE,
                   help="average degree, both directions (default: the real graph's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grids", default="1x1x1,2x2x2", help="Plexus grids, comma-separated")
    p.add_argument("--epochs", type=int, default=4, help="epochs per run (the first warms up)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per process")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--skip-pyg", action="store_true", help="only the Plexus runs")
    p.add_argument("--min-free", type=float, default=2.0,
                   help="kill a run when the host's available memory drops below this (GiB)")
    p.add_argument("--workdir", default="benchmarks/out/proteins",
                   help="where the stand-in is written (kept for the next run)")
    p.add_argument("--smoke", action="store_true", help="a small stand-in: seconds")
    p.add_argument("--out", default="benchmarks/out", help="folder for proteins.txt and .json")
    p.add_argument("--pyg-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.pyg_worker:
        pyg_worker(args)
        return 0
    if args.smoke:
        args.nodes, args.degree = SMOKE["nodes"], SMOKE["degree"]
        args.epochs, args.hidden = SMOKE["epochs"], SMOKE["hidden"]
    from plexus.bench.output import Tee, loadavg

    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    say = Tee()
    start = time.perf_counter()
    args.root = standin(args)
    say(f"proteins benchmark: stand-in of {args.nodes} nodes, average degree {args.degree:g} "
        f"({2 * int(args.nodes * args.degree / 2)} directed edges), 112 tasks, 8 edge "
        f"features, at {args.root} ({time.perf_counter() - start:.0f} s to write or find)")
    say(f"GCN {args.layers}x{args.hidden}, BCEWithLogits, Adam; {args.epochs} epochs "
        f"(median of all but the first); {args.threads} threads per process; one child process "
        f"per run; load average before: {loadavg()}")
    pyg = None
    if not args.skip_pyg:
        pyg = run_pyg(args)
        if pyg["ok"]:
            train = f"{gib(pyg['train_rss'])}" if pyg["train_rss"] else "   n/a"
            say(f"PyG GCNConv adj_t   peak RSS {gib(pyg['peak_rss'])} (loading included), "
                f"training {train}, epoch {pyg['epoch_s']:7.2f} s")
        else:
            say(f"PyG failed: {pyg['why']}")
    say("Plexus per rank, max over ranks: peak RSS of training, tracked tensor peak, the memory "
        "model (plexus.perfmodel.epoch_memory) and model / measured")
    say(f"{'grid':<8} {'training':>11} {'tensors':>11} {'model':>11} {'model/meas':>10} "
        f"{'epoch':>9} {'cut peak':>11} {'cut time':>9}")

    def row(r: dict) -> str:
        train = max(r["train_rss"])
        return (f"{gib(train):>11} {gib(max(r['tracked'])):>11} {gib(r['predicted']):>11} "
                f"{r['predicted'] / train:10.2f} {r['epoch_s']:8.2f}s {gib(r['cut_rss']):>11} "
                f"{r['cut_s']:8.1f}s")

    results = grid_rows(args, say, run_plexus, row)
    if pyg and pyg["ok"]:
        for grid, r in results.items():
            if r["ok"]:
                say(f"Plexus {grid} / PyG: training memory per rank "
                    f"{max(r['train_rss']) / (pyg['train_rss'] or pyg['peak_rss']):.2f}x, "
                    f"epoch time {r['epoch_s'] / pyg['epoch_s']:.2f}x")
    say(f"load average after: {loadavg()}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "proteins.txt").write_text(say.text(), encoding="utf-8")
    (out / "proteins.json").write_text(json.dumps(
        {"nodes": args.nodes, "degree": args.degree, "pyg": pyg, "plexus": results},
        indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["ok"] for r in results.values()) and (pyg is None or pyg["ok"]) else 1


if __name__ == "__main__":
    sys.exit(main())
