"""What plexus.nn's layout checks cost in a training step.

    ./run python benchmarks/nn_checks.py [--steps 40] [--hidden 64] [--grid 1x1x1] [--out DIR]

The same layer twice on Cora: written with plexus.nn's ``g`` (every tensor and parameter tagged
with its layout, each torch operation checked: `plexus.nn.layouts.LaidTensor`) and written on
the untagged stage toolkit (`plexus.engine.graph3d.StageGraph`, as the built-in kinds are:
nothing checked). The layer, tests/nn_layers.py's `ScalarsEverywhere`, uses many small torch
operations per step (learnable scalars on its input, Â's rows and output, a row norm, a bias) so
the checks' per-operation cost shows. Steps (forward, loss, backward) alternate between the two
networks in blocks; medians per step and the load average are printed and written to
``nn_checks.txt`` under ``--out`` (default benchmarks/out/); ``--smoke`` runs 4 steps on a toy
graph.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the in-tree plexus first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/nn_layers.py

import plexus.nn as pnn  # noqa: E402
from nn_layers import ScalarsEverywhere as Checked  # noqa: E402 - the tests' layer, checked
from plexus.nn.layouts import ROWS_OUT, laid, plain  # noqa: E402


class Unchecked(Checked):
    """The same maths on the stage toolkit, untagged (parameters read raw)."""

    def forward(self, g, x, step):
        s, p = g.stage, self._parameters
        plan = s.plan
        x = plain(x)

        def mark(t, axes):
            for a in axes:
                t = s.replicate(t, a)
            return t

        every, out_axes = tuple(s.comm.grid.shape), (plan.out_rows, plan.out_cols)
        eps, t_in = mark(p["eps"], every), mark(p["t_in"], every)
        t_out = mark(p["t_out"], out_axes)
        h = s.aggregate(x * t_in) + (1 + eps) * s.to_rows(x)
        out = s.add_bias(s.linear(h, p["w"]), p["bias"])
        norm = s.row_norm(out, plan.out_cols).clamp_min(1e-12)
        return laid(t_out * (out / norm) + out, ROWS_OUT)


def rank_times(dims, steps: int, hidden: int, block: int, smoke: bool) -> dict:
    import plexus
    from plexus_datasets.toy import toy_graph
    from plexus.engine.grid import Grid

    grid = Grid.create(dims)
    g = toy_graph() if smoke else plexus.load_dataset("cora")
    nets = {name: pnn.Network(g, grid, [cls(g.num_features, hidden), cls(hidden, hidden),
                                        cls(hidden, g.num_classes)], seed=0)
            for name, cls in (("checked", Checked), ("unchecked", Unchecked))}
    times = {name: [] for name in nets}
    losses = {}
    for round_ in range(-1, steps // block):  # round -1: warm-up, not timed
        for name, net in nets.items():
            for _ in range(block):
                net.zero_grad()
                torch.distributed.barrier()
                t = time.perf_counter()
                loss = net.loss(net(step=0))
                loss.backward()
                torch.distributed.barrier()
                if round_ >= 0:
                    times[name].append(time.perf_counter() - t)
                losses[name] = float(loss.detach())
    return {"times": times, "losses": losses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--grid", default="1x1x1")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    parser.add_argument("--smoke", action="store_true", help="4 steps on a toy graph")
    args = parser.parse_args()
    from plexus.bench.output import write_text
    from plexus.runtime.world import run_world

    if args.smoke:
        args.steps, args.block = 4, 2
    dims = tuple(int(d) for d in args.grid.split("x"))
    size = dims[0] * dims[1] * dims[2]
    load0 = os.getloadavg()
    out = run_world(size, rank_times, dims, args.steps, args.hidden, args.block, args.smoke,
                    threads=1)[0]
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in out["times"].items()}
    lines = [f"{'toy graph' if args.smoke else 'Cora'}, 3 layers (hidden {args.hidden}), grid "
             f"{args.grid}, 1 thread per rank, {len(out['times']['checked'])} timed steps each, "
             f"alternating blocks of {args.block}"]
    for name in ("checked", "unchecked"):
        v = sorted(out["times"][name])
        lines.append(f"  {name:<9} median {med[name] * 1e3:8.2f} ms/step  (min "
                     f"{v[0] * 1e3:.2f}, max {v[-1] * 1e3:.2f})  loss {out['losses'][name]:.6f}")
    lines.append(f"  checked / unchecked: {med['checked'] / med['unchecked']:.3f} "
                 f"({(med['checked'] - med['unchecked']) * 1e3:+.2f} ms/step)")
    lines.append(f"  load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out) / "nn_checks.txt", text)


if __name__ == "__main__":
    main()
