"""What ``--comm-dtype bf16`` costs in accuracy and saves in bytes: fp32 against bf16 payloads
(activation and gradient messages rounded for the wire, summed in fp32, `plexus.engine.comm`)
on a grid, several seeds, two graphs.

    python benchmarks/comm_precision.py                  # Cora + R-MAT 11, 5 seeds, 2x2x1
    python benchmarks/comm_precision.py --seeds 2 --epochs 50 --graphs cora
    python benchmarks/comm_precision.py --smoke          # tiny graph, 2 seeds, 5 epochs

Per graph: Kipf & Welling's GCN (2 layers, hidden 16, dropout 0.5, lr 0.01, weight decay 5e-4,
``--epochs`` epochs, evaluated every epoch) in one local world of the grid; the test accuracy
at the best-validation epoch (as ``plexus-train`` reports it) per seed, mean ± standard
deviation, and the bytes rank 0 sent per training step (the ledger, the step's collectives
only). The R-MAT graph's labels are degree buckets and its features random (the stand-ins of
`plexus_datasets.synthetic`): a second, structure-labelled graph, not a real benchmark task.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GRAPHS = {"cora": "cora", "rmat11": "rmat:scale=11,edge_factor=8,features=64,classes=4,seed=0"}
SMOKE = {"rmat10": "rmat:scale=10,edge_factor=8,features=16,classes=4,seed=0"}
WIRES = ("fp32", "bf16")


def runs(dims: tuple[int, int, int], graphs: dict[str, str], seeds: int,
         epochs: int) -> dict[str, dict]:
    """Per graph and wire precision: best-validation test accuracy per seed and the bytes this
    rank sent per training step. Runs on every rank of a local world of the grid."""
    from plexus.api import distributed_model
    from plexus_datasets import load_dataset
    from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer

    grid = Grid.create(dims)
    out: dict[str, dict] = {}
    for name, spec in graphs.items():
        graph = load_dataset(spec)
        out[name] = {w: {"acc": [], "step_bytes": None} for w in WIRES}
        for seed in range(seeds):
            for wire in WIRES:  # interleaved: the machine's other load hits both alike
                engine = EngineConfig(comm_dtype=wire)
                if seed == 0:  # one training step of its own model: its bytes
                    probe = distributed_model(graph, grid, ModelConfig(), seed=seed,
                                              engine=engine)
                    probe.comm.ledger.reset()
                    Trainer(probe, TrainConfig(epochs=1, eval_every=0)).train_step()
                    out[name][wire]["step_bytes"] = sum(probe.comm.ledger.per_axis("bytes")
                                                        .values())
                model = distributed_model(graph, grid, ModelConfig(), seed=seed, engine=engine)
                history = Trainer(model, TrainConfig(epochs=epochs, seed=seed)).fit()
                out[name][wire]["acc"].append(max(history, key=lambda s: s.val_acc).test_acc)
    return out


def mean_std(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.4f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--grid", default="2x2x1")
    p.add_argument("--graphs", default=",".join(GRAPHS), help=f"of {', '.join(GRAPHS)}")
    p.add_argument("--timeout", type=float, default=6 * 3600, help="seconds the world may run")
    p.add_argument("--smoke", action="store_true", help="a tiny graph, 2 seeds, 5 epochs")
    p.add_argument("--out", default="benchmarks/out", help="folder for comm_precision.txt/.json")
    args = p.parse_args(argv)
    graphs = {g: GRAPHS[g] for g in args.graphs.split(",")}
    if args.smoke:
        graphs, args.seeds, args.epochs = SMOKE, 2, 5
    from plexus.bench.output import Tee, machine_info, write_json, write_text
    from plexus_partition.model.grid import GridShape
    from plexus.testing.localworld import run_world

    dims = GridShape.parse(args.grid).dims
    say = Tee()
    info = machine_info()
    say(f"payload precision benchmark on {info['host']} ({info['cpus']} cpus, load "
        f"{info['loadavg']}), torch {info['torch']}; grid {args.grid}, GCN 2x16, "
        f"{args.epochs} epochs, {args.seeds} seeds; test accuracy at the best validation "
        "epoch, mean ± std; bytes rank 0 sends per training step (ledger)")
    res = run_world(dims[0] * dims[1] * dims[2], runs, dims, graphs, args.seeds,
                    args.epochs, timeout=args.timeout)[0]
    for name, by_wire in res.items():
        say(f"\n{name} ({graphs[name]}):")
        for wire, r in by_wire.items():
            say(f"  {wire:<5} test acc {mean_std(r['acc'])}   step bytes "
                f"{r['step_bytes'] / 2**10:9.1f} KiB   per seed: "
                + " ".join(f"{a:.3f}" for a in r["acc"]))
        diff = statistics.mean(by_wire["bf16"]["acc"]) - statistics.mean(by_wire["fp32"]["acc"])
        ratio = by_wire["bf16"]["step_bytes"] / by_wire["fp32"]["step_bytes"]
        say(f"  bf16 - fp32 mean test accuracy: {diff * 100:+.2f} points; bytes x{ratio:.3f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "comm_precision.txt", say.text())
    write_json(out / "comm_precision.json", {"machine": info, "grid": args.grid,
                                             "graphs": graphs, "results": res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
