"""GAT at 1x1x1 against PyG's GATConv: epoch time and peak memory, each in its own process.

    python benchmarks/gat.py                 # R-MAT scale 17: PyG peaks at ~16 GiB, run it alone
    python benchmarks/gat.py --smoke         # tiny graph, seconds (the tests run it)

The graph: R-MAT scale 17, edge factor 16, 128 features, 16 classes (undirected; self loops
added as GATConv adds them). The model: 2 layers, ``--hidden 64 --heads 4`` = PyG's
``GATConv(128, 64, heads=4)`` (concatenated, 256 wide), ReLU, ``GATConv(256, 16, heads=1)``;
dropout 0.5 on both layers' input features and on the attention coefficients; Adam, full batch.

- PyG: the two GATConv layers on ``edge_index`` in a child process (its peak RSS is the kernel's
  figure for that child, dataset loading included). GATConv materializes a message per edge and
  head (edges × heads × 64 floats) and its gradients; that is where its memory goes.
- Plexus: ``plexus-train --model gat`` on a 1x1x1 grid (`benchmarks/memory.py`'s runner): peak
  RSS of the process (loading included) and of training, the tracked tensor peak, the memory
  model's figure, the median epoch.

Targets (issue 23): Plexus's epoch time <= 0.5x PyG's and its peak RSS <= 0.2x PyG's.
Output: the printed report, also ``gat.txt`` and ``gat.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEFAULT_SPEC = "rmat:scale=17,edge_factor=16,features=128,classes=16,seed=0"
TARGET_TIME, TARGET_MEMORY = 0.5, 0.2
GIB = 2**30


def pyg_worker(args: argparse.Namespace) -> None:
    """Train PyG's GAT in this process; print one JSON line of figures."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv

    from plexus_datasets import load_dataset
    from plexus_datasets.graph import incoming

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = load_dataset(args.spec)
    m = incoming(g.adj, g.directed).tocoo()  # rows: destinations
    edge_index = torch.from_numpy(np.vstack([m.col, m.row]).astype(np.int64))  # (source, target)
    x, y = torch.from_numpy(g.features), torch.from_numpy(g.labels)
    mask = torch.from_numpy(g.train_mask)
    del g, m
    p = args.dropout
    convs = torch.nn.ModuleList([
        GATConv(x.shape[1], args.hidden, heads=args.heads, dropout=p),
        GATConv(args.hidden * args.heads, int(y.max()) + 1, heads=1, concat=False, dropout=p)])
    opt = torch.optim.Adam(convs.parameters(), lr=0.005, weight_decay=5e-4)
    times = []
    for _ in range(args.epochs):
        t = time.perf_counter()
        convs.train()
        opt.zero_grad()
        h = F.relu(convs[0](F.dropout(x, p, True), edge_index))
        out = convs[1](F.dropout(h, p, True), edge_index)
        F.cross_entropy(out[mask], y[mask]).backward()
        opt.step()
        times.append(time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"epoch_times": times, "peak_rss": peak}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"dataset (default {DEFAULT_SPEC})")
    p.add_argument("--hidden", type=int, default=64, help="per head (default 64)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.5, help="features and attention")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (the first warms up)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per process")
    p.add_argument("--min-free", type=float, default=1.5,
                   help="kill a run when the host's available memory drops below this (GiB)")
    p.add_argument("--skip-pyg", action="store_true")
    p.add_argument("--smoke", action="store_true", help="a tiny graph: seconds")
    p.add_argument("--out", default="benchmarks/out", help="folder for gat.txt and gat.json")
    p.add_argument("--pyg-worker", action="store_true", help=argparse.SUPPRESS)
    from benchmarks.memory import build_parser as memory_parser, options_or_worker, run_child, \
        run_plexus

    args = options_or_worker(p, argv, 8, pyg_worker)
    if args is None:
        return 0
    from plexus.bench.output import Tee, machine_info, write_json, write_text

    say = Tee()
    info = machine_info()
    say(f"GAT benchmark on {info['host']} ({info['cpus']} cpus, load {info['loadavg']}), torch "
        f"{info['torch']}: {args.spec}; 2 layers, GATConv(F, {args.hidden}, heads={args.heads}) "
        f"-> GATConv({args.hidden * args.heads}, C, heads=1), dropout {args.dropout} on "
        f"features and attention; {args.epochs} epochs (median of all but the first), "
        f"{args.threads} threads, each side in its own process")
    results: dict = {"machine": info, "spec": args.spec}
    pyg = None
    if not args.skip_pyg:
        cmd = [sys.executable, __file__, "--pyg-worker", "--spec", args.spec, "--hidden",
               str(args.hidden), "--heads", str(args.heads), "--dropout", str(args.dropout),
               "--epochs", str(args.epochs), "--threads", str(args.threads)]
        code, rss, wall, text, killed = run_child(cmd, args.min_free * GIB)
        if code != 0:
            say("PyG failed: " + ("killed: low host memory" if killed else text[-2000:]))
        else:
            figures = json.loads(text.strip().splitlines()[-1])
            times = figures["epoch_times"][1:] or figures["epoch_times"]
            pyg = {"peak_rss": rss, "epoch_s": sorted(times)[len(times) // 2], "wall_s": wall}
            say(f"PyG GATConv        peak RSS {rss / GIB:6.2f} GiB  epoch {pyg['epoch_s']:7.2f} s")
        results["pyg"] = pyg
    opts = memory_parser().parse_args([
        "--spec", args.spec, "--layers", "2", "--hidden", str(args.hidden), "--dropout",
        str(args.dropout), "--epochs", str(args.epochs), "--threads", str(args.threads),
        "--min-free", str(args.min_free), "--plexus-arg=--model=gat",
        f"--plexus-arg=--heads={args.heads}", f"--plexus-arg=--attn-dropout={args.dropout}",
        "--plexus-arg=--lr=0.005"])
    r = run_plexus(opts, "1x1x1")
    results["plexus"] = r
    if not r["ok"]:
        say(f"Plexus failed: {r['why']}")
    else:
        say(f"Plexus 1x1x1       peak RSS {max(r['peak_rss']) / GIB:6.2f} GiB  epoch "
            f"{r['epoch_s']:7.2f} s  (training's peak RSS {max(r['train_rss']) / GIB:.2f} GiB, "
            f"tracked tensors {max(r['tracked']) / GIB:.2f} GiB, memory model "
            f"{r['predicted'] / GIB:.2f} GiB: {r['predicted'] / max(r['train_rss']):.2f}x)")
    if pyg and r["ok"]:
        mem = max(r["peak_rss"]) / pyg["peak_rss"]
        tim = r["epoch_s"] / pyg["epoch_s"]
        results["ratios"] = {"memory": mem, "time": tim}
        say(f"Plexus / PyG: epoch time {tim:.2f}x (target <= {TARGET_TIME}), peak RSS {mem:.2f}x "
            f"(target <= {TARGET_MEMORY})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "gat.txt", say.text())
    write_json(out / "gat.json", results)
    return 0 if r["ok"] and (pyg is not None or args.skip_pyg) else 1


if __name__ == "__main__":
    sys.exit(main())
