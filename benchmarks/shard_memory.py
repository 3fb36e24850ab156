"""Time and memory of writing a shard store, and of one rank loading its shard.

    python benchmarks/shard_memory.py [--dataset SPEC] [--grid 4x2x2] [--layers 2] [--perm double]
                                      [--out DIR] [--rank X,Y,Z]

Each phase runs in its own fresh process so its figures are its own: (1) load the dataset and
write the store (peak RSS of the whole partitioner, time per step); (2) one rank reads its shard
(RSS increase and tracemalloc peak while loading, against the shard's and the whole graph's
sizes). The point of (2): a rank's memory must scale with its shard, not with the graph.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DEFAULT_DATASET = "rmat:scale=22,edge_factor=16,features=16,classes=4,seed=0"


class PeakRss:
    """Samples this process's resident set size every few milliseconds (Linux /proc)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def current() -> int:
        """Resident set size now, in bytes."""
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            time.sleep(self.interval)

    def __enter__(self) -> "PeakRss":
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def phase_write(args) -> dict:
    """Load the dataset and write the store; figures as a dict."""
    from plexus_datasets import load_dataset
    from plexus_datasets.graph import gcn_normalize
    from plexus_partition import make_permutation, write_store
    from plexus_partition.model.grid import GridShape

    shape = GridShape.parse(args.grid)
    out = {}

    def timed(step, fn, *a, **kw):  # wall and CPU seconds of one step
        t, c = time.perf_counter(), time.process_time()
        result = fn(*a, **kw)
        out[f"{step}_s"] = time.perf_counter() - t
        out[f"{step}_cpu"] = time.process_time() - c
        return result

    with PeakRss() as rss:
        graph = timed("load", load_dataset, args.dataset)
        out["rss_after_load"] = PeakRss.current()
        adj_hat = timed("normalize", gcn_normalize, graph.adj, graph.directed)
        perm = timed("permutation", make_permutation, adj_hat, args.perm, args.seed,
                     shape["x"] * shape["y"] * shape["z"])
        out["rss_before_write"] = PeakRss.current()
        with PeakRss() as write_rss:
            manifest = timed("write", write_store, graph, args.out, shape, args.layers, "agg",
                             perm, args.seed, adj_hat=adj_hat)
        out["write_peak_rss"] = write_rss.peak
    out["peak_rss"] = rss.peak
    out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["num_nodes"], out["nnz"] = graph.num_nodes, manifest["nnz"]
    out["graph_bytes"] = (adj_hat.data.nbytes + adj_hat.indices.nbytes + adj_hat.indptr.nbytes
                          + graph.features.nbytes)
    out["store_bytes"] = sum(r["size"] for r in manifest["ranks"])
    out["ranks"] = len(manifest["ranks"])
    return out


def phase_read(args) -> dict:
    """One rank loads its shard: RSS increase and tracemalloc peak while loading."""
    import tracemalloc

    import numpy as np

    from plexus_partition import read_manifest, read_shard
    from plexus_partition.model.grid import GridShape

    shape = GridShape.parse(args.grid)
    coords = dict(zip("xyz", (int(c) for c in args.rank.split(","))))
    manifest = read_manifest(args.out)  # also warms the imports
    before = PeakRss.current()
    tracemalloc.start()
    t = time.perf_counter()
    with PeakRss() as rss:
        shard = read_shard(args.out, coords, shape=shape, num_stages=args.layers, orders="agg",
                           perm=args.perm, seed=args.seed)
    elapsed = time.perf_counter() - t
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    arrays = [shard.features, shard.output_ids, shard.labels, *shard.input_ids,
              *shard.masks.values()]
    arrays += [a for b in shard.blocks.values() for a in (b.data, b.indices, b.indptr)]
    entry = next(r for r in manifest["ranks"] if r["coords"] == coords)
    return {"read_s": elapsed, "rss_increase": rss.peak - before, "tracemalloc_peak": traced_peak,
            "shard_bytes": int(sum(np.asarray(a).nbytes for a in arrays)),
            "file_bytes": entry["size"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=DEFAULT_DATASET)
    p.add_argument("--grid", default="4x2x2")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--perm", default="double")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="store directory (default: a temporary one)")
    p.add_argument("--rank", default="0,0,0", help="coordinates of the rank that reads")
    p.add_argument("--phase", choices=("write", "read"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:  # child process: print figures as JSON
        print(json.dumps(phase_write(args) if args.phase == "write" else phase_read(args)))
        return
    with tempfile.TemporaryDirectory(dir=args.out and Path(args.out).parent) as tmp:
        if args.out is None:
            args.out = str(Path(tmp) / "store")
        base = [sys.executable, __file__, "--dataset", args.dataset, "--grid", args.grid,
                "--layers", str(args.layers), "--perm", args.perm, "--seed", str(args.seed),
                "--out", args.out, "--rank", args.rank]
        w = json.loads(subprocess.run(base + ["--phase", "write"], check=True,
                                      capture_output=True, text=True).stdout)
        r = json.loads(subprocess.run(base + ["--phase", "read"], check=True,
                                      capture_output=True, text=True).stdout)
    print(f"dataset {args.dataset}: N={w['num_nodes']:,} nnz(Â)={w['nnz']:,}; grid {args.grid}, "
          f"{args.layers} layers, perm {args.perm}, {w['ranks']} ranks")
    steps = ("load", "normalize", "permutation", "write")
    print("time (wall / CPU): " + "  ".join(f"{s} {w[s + '_s']:.1f}s / {w[s + '_cpu']:.1f}s"
                                            for s in steps))
    print(f"memory: peak RSS {gib(w['peak_rss'])} (ru_maxrss {gib(w['ru_maxrss'])}), of which "
          f"writing the store {gib(w['write_peak_rss'])} (RSS before writing "
          f"{gib(w['rss_before_write'])}, after loading the dataset {gib(w['rss_after_load'])});"
          f" store {gib(w['store_bytes'])}")
    print(f"read rank {args.rank}: {r['read_s']:.2f}s, RSS increase {mib(r['rss_increase'])}, "
          f"tracemalloc peak {mib(r['tracemalloc_peak'])}; shard arrays {mib(r['shard_bytes'])}, "
          f"file {mib(r['file_bytes'])}; whole graph (Â + features) {mib(w['graph_bytes'])} "
          f"-> load peak / graph = {r['rss_increase'] / w['graph_bytes']:.3f}")


if __name__ == "__main__":
    main()
