"""Link prediction's peak memory per rank: the tensor tracker's high-water mark against the memory
model's figure for the same rank (`plexus.testing.linkmemory.link_peak`: two training steps of a
2-layer GCN encoder, hidden 128, 64 output columns, dropout 0.5, batches of pairs of 4 MiB; the
model's tensors, without the process's runtime and allocator slack), on every rank of each grid,
both decoders. The graph: an R-MAT graph with a random 0.85/0.05/0.1 edge split (seed 0).
Prints one line per grid, decoder and rank, then the range of predicted/tracked.

    ./run python benchmarks/link_memory.py [--graph rmat:scale=12,...] [--grids 1x1x1,2x2x2]
"""

from __future__ import annotations

import argparse

from plexus.runtime.world import run_world

GRAPH = "rmat:scale=12,edge_factor=32,features=128,classes=8,seed=0"
GRIDS = "1x1x1,2x1x2,2x2x1,2x2x2"
DECODERS = ("dot", "mlp")


def on_rank(dims: tuple[int, int, int], graph: str, budget: float) -> list[tuple]:
    """This rank's (decoder, rank, coords, tracked, predicted) for each decoder."""
    from plexus.engine.grid import Grid  # noqa: PLC0415 (in the spawned rank)
    from plexus.testing.linkmemory import link_peak  # noqa: PLC0415
    from plexus_datasets import load_dataset  # noqa: PLC0415
    from plexus_datasets.linksplit import random_edge_split  # noqa: PLC0415

    split = random_edge_split(load_dataset(graph, None, seed=0), (0.85, 0.05, 0.1), seed=0)
    grid = Grid.create(dims)
    out = []
    for decoder in DECODERS:
        peak = link_peak(grid, split, decoder, hidden=128, out_channels=64, budget=budget)
        out.append((decoder, peak.rank, peak.coords, peak.tracked, peak.predicted))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default=GRAPH)
    ap.add_argument("--grids", default=GRIDS)
    ap.add_argument("--budget-mib", type=float, default=4.0, help="bytes of one batch of pairs")
    args = ap.parse_args(argv)
    print(f"graph {args.graph}; 2-layer GCN 128/64, dropout 0.5; batches of "
          f"{args.budget_mib:g} MiB; two training steps; MiB of tensors")
    print(f"{'grid':7} {'decoder':7} {'rank':>4} {'coords':9} {'tracked':>8} {'predicted':>9} "
          f"{'ratio':>6}")
    ratios = []
    for name in args.grids.split(","):
        dims = tuple(int(d) for d in name.split("x"))
        rows = [r for rank in run_world(dims[0] * dims[1] * dims[2], on_rank, dims, args.graph,
                                        args.budget_mib * 2**20) for r in rank]
        for decoder, rank, coords, tracked, predicted in sorted(rows):
            ratios.append(predicted / tracked)
            print(f"{name:7} {decoder:7} {rank:>4} {','.join(map(str, coords)):9} "
                  f"{tracked / 2**20:8.2f} {predicted / 2**20:9.2f} {predicted / tracked:6.3f}",
                  flush=True)
    print(f"predicted/tracked over every rank: {min(ratios):.3f} .. {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
