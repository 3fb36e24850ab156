"""Load imbalance (max/mean non-zeros over the blocks of Â) of every permutation kind.

    python benchmarks/partition_balance.py [--layers 3] [--seeds 0,1,2]
        [--dataset SPEC --grid XxYxZ ...]   (default: R-MAT scale 18 and Cora at 4x4x1 and 16x16x1)

Three layers cover every block layout of a grid (rows by z/y/x, columns by x/z/y). Per kind the
table gives each layer's max/mean (worst over the seeds) and the worst layer.
"""

from __future__ import annotations

import argparse
import time

from plexus_partition.model.grid import GridShape
from plexus_datasets import gcn_normalize, load_dataset
from plexus_partition import PERMUTATIONS, layer_balance, make_permutation

DEFAULT_DATASETS = ("rmat:scale=18,edge_factor=16,features=16,classes=4,seed=0", "cora")
DEFAULT_GRIDS = ("4x4x1", "16x16x1")


def run(spec: str, grids, layers: int, seeds) -> None:
    t = time.perf_counter()
    graph = load_dataset(spec)
    adj_hat = gcn_normalize(graph.adj, graph.directed)
    print(f"\n{spec}: N={graph.num_nodes:,}, nnz(Â)={adj_hat.nnz:,} "
          f"(loaded in {time.perf_counter() - t:.1f}s)")
    for grid in grids:
        shape = GridShape.parse(grid)
        world = shape.world_size
        print(f"  grid {grid}, {layers} layers; max/mean per layer (worst of seeds {seeds})")
        for kind in PERMUTATIONS:
            worst = [0.0] * layers
            t = time.perf_counter()
            for seed in seeds:
                perm = make_permutation(adj_hat, kind, seed, world)
                for s in layer_balance(adj_hat, perm, shape, layers):
                    worst[s.layer] = max(worst[s.layer], s.max_over_mean)
            per_layer = "  ".join(f"L{i} {v:7.4f}" for i, v in enumerate(worst))
            print(f"    {kind:<9} {per_layer}  | worst {max(worst):7.4f}  "
                  f"({(time.perf_counter() - t) / len(seeds):.2f}s per seed)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", action="append", help="dataset spec (repeatable)")
    p.add_argument("--grid", action="append", help="grid XxYxZ (repeatable)")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seeds", default="0", help="comma-separated permutation seeds")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for spec in args.dataset or DEFAULT_DATASETS:
        run(spec, args.grid or DEFAULT_GRIDS, args.layers, seeds)


if __name__ == "__main__":
    main()
