"""Single-process baseline: one training epoch of the same GCN in PyG, the serial reference and
Plexus on a 1x1x1 grid.

Run: ``python benchmarks/baseline.py [--spec SPEC] [--threads 2] [--epochs 5] [--profile]``
     ``python benchmarks/baseline.py --smoke`` (tiny graph, seconds; for the tests)

The model everywhere: 3 GCN layers, hidden width 128 (F -> 128 -> 128 -> C), bias, ReLU between
layers, dropout 0.5 on every layer's input, Adam (lr 0.01, weight decay 5e-4 on every parameter),
mean cross-entropy over the training mask. One epoch = forward + backward + Adam step, full batch;
no evaluation. Every variant uses the same number of torch threads (``--threads``, default 2).

Variants:
- ``pyg-adj_t``: PyTorch Geometric ``GCNConv(normalize=False)`` on the precomputed Â given as a
  ``torch.sparse_csr_tensor`` ``adj_t`` (PyG then calls ``torch.sparse.mm``; no torch-sparse
  needed). Â is symmetric, so ``adj_t = Â``. Normalizing once up front (not per epoch) is the fair
  comparison: Plexus also takes Â precomputed. GCNConv always combines first, Â·(H·W).
- ``pyg-edge_index``: the same convolution on ``edge_index`` + ``edge_weight`` = Â's entries
  (gather/scatter message passing).
- ``serial``: `plexus.engine.serial.SerialModel` (torch COO ``sparse.mm``), with the same
  grid-independent dropout masks as Plexus.
- ``plexus-<backend>-<order>``: `plexus.engine.model.DistributedModel` on a 1-rank gloo world
  (`plexus.testing.localworld.run_world`), SpMM backend torch/scipy, product order agg/auto.

Timing: ``--warmup`` untimed epochs, then ``--epochs`` timed ones per round, the median over all
rounds reported. The machine is shared, so the epochs of the in-process variants are interleaved
round-robin, the Plexus variants' likewise inside their 1-rank world, and ``--rounds`` > 1 (default
2) alternates the two groups: a busy minute does not hit one variant only. The Plexus rows also show
the engine's timers (SpMM, GEMM, the rest), and ``--profile`` adds torch.profiler tables of one
epoch of PyG adj_t and of Plexus.

Output: the printed table (also ``baseline.txt``) and ``baseline.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (DEFAULT_SPEC, OUT_DIR, SMOKE_SPEC, Bundle, RunOptions, Tee,
                               engine_config, format_table, load_bundle, loadavg, machine_info,
                               median, run_configs, spread, write_json, write_text)

TARGET = 0.9  # issue: Plexus 1x1x1 epoch time <= 0.9 x PyG's (adj_t)
VARIANTS = ("pyg-adj_t", "pyg-edge_index", "serial", "plexus-torch-agg", "plexus-torch-auto",
            "plexus-scipy-agg", "plexus-scipy-auto")


def _csr(adj_hat: Any) -> Any:
    """Â as a torch CSR tensor (int64 indices, float32)."""
    import numpy as np
    import torch

    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(adj_hat.indptr.astype(np.int64)),
                                       torch.from_numpy(adj_hat.indices.astype(np.int64)),
                                       torch.from_numpy(adj_hat.data.astype(np.float32)),
                                       size=adj_hat.shape)


def pyg_step(bundle: Bundle, hidden: int, layers: int, dropout: float, use_adj_t: bool,
             seed: int = 0) -> Callable[[], float]:
    """A closure running one PyG training epoch (returns the loss)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    g = bundle.graph
    torch.manual_seed(seed)
    widths = [g.num_features] + [hidden] * (layers - 1) + [g.num_classes]

    class PygGCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # normalize=False: Â is precomputed (GCN normalization with self loops), as Plexus's.
            self.convs = torch.nn.ModuleList(GCNConv(a, b, normalize=False, bias=True)
                                             for a, b in zip(widths[:-1], widths[1:]))

        def forward(self, x, adj, weight):
            for l, conv in enumerate(self.convs):
                x = F.dropout(x, dropout, self.training)
                x = conv(x, adj) if weight is None else conv(x, adj, weight)
                if l < len(self.convs) - 1:
                    x = F.relu(x)
            return x

    model = PygGCN()
    x = torch.from_numpy(g.features)
    y = torch.from_numpy(g.labels)
    mask = torch.from_numpy(g.train_mask)
    if use_adj_t:
        adj, weight = _csr(bundle.adj_hat), None
    else:
        coo = bundle.adj_hat.tocoo()
        # edge (j -> i) carries Â[i, j]: PyG's flow source_to_target aggregates at index 1
        adj = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
        weight = torch.from_numpy(coo.data.astype(np.float32))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    known = mask[:, None] & (y >= 0) if g.multilabel else None  # BCE's labelled entries
    target = y.clamp(min=0).float() if g.multilabel else None

    def step() -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(x, adj, weight)
        if known is not None:  # multi-label (ogbn-proteins): BCE over the labelled entries
            loss = F.binary_cross_entropy_with_logits(out[known], target[known])
        else:
            loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def serial_step(bundle: Bundle, cfg: Any) -> Callable[[], float]:
    """A closure running one epoch of the serial reference."""
    from plexus.engine.config import TrainConfig
    from plexus.engine.serial import SerialModel
    from plexus.engine.trainer import Trainer

    trainer = Trainer(SerialModel(bundle.graph, cfg, seed=0, adj_hat=bundle.adj_hat),
                      TrainConfig(eval_every=0))
    return trainer.train_step


def profile_step(step: Callable[[], float], rows: int = 20) -> str:
    """torch.profiler table (by self CPU time) of one call of ``step``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def run_inprocess(step: Callable[[], float], warmup: int,
                  epochs: int) -> tuple[list[float], list[float]]:
    """Wall and process-CPU seconds of each timed epoch of an in-process variant."""
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(epochs):
        start, cpu0 = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu0)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"dataset spec (default {DEFAULT_SPEC})")
    p.add_argument("--root", help="dataset root for file-based specs")
    p.add_argument("--hidden", type=int, default=128, help="hidden width (default 128)")
    p.add_argument("--layers", type=int, default=3, help="GCN layers (default 3)")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout (default 0.5)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per variant (default 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs per round (default 1)")
    p.add_argument("--epochs", type=int, default=5, help="timed epochs per round (default 5)")
    p.add_argument("--rounds", type=int, default=2,
                   help="times every variant is run, interleaved (default 2)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated subset of {', '.join(VARIANTS)}")
    p.add_argument("--engine", default="",
                   help="more EngineConfig fields for the Plexus variants, e.g. tune_gemms=1")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler tables of one PyG adj_t and one Plexus epoch")
    p.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    p.add_argument("--smoke", action="store_true",
                   help="tiny graph, 1 round of 2 epochs, hidden 16: checks that it runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.spec, args.hidden, args.warmup, args.epochs, args.rounds = SMOKE_SPEC, 16, 1, 2, 1
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    if min(args.threads, args.epochs, args.rounds) < 1 or args.warmup < 0:
        p.error("--threads, --epochs and --rounds must be >= 1, --warmup >= 0")
    try:
        engine = engine_config("torch", args.engine)
    except ValueError as e:
        p.error(str(e))
    from plexus_partition.launch.hostmem import enable_huge_pages

    # What plexus-train's workers do on the CPU, given to the in-process variants (PyG, serial)
    # alike; huge pages only work if asked for before the first tensor.
    huge = engine.huge_pages and enable_huge_pages()

    import torch

    from plexus.engine.config import ModelConfig

    torch.set_num_threads(args.threads)
    say = Tee()
    try:
        import torch_geometric
        pyg_version = torch_geometric.__version__
    except ImportError:
        pyg_version = None
        skipped = [v for v in variants if v.startswith("pyg")]
        variants = [v for v in variants if not v.startswith("pyg")]
        if skipped:
            say(f"note: torch_geometric is not installed; skipping {', '.join(skipped)} "
                "(pip install 'plexus-gnn[bench]')")
    bundle = load_bundle(args.spec, args.root)
    info = machine_info()
    say(f"graph {bundle.describe()} (loaded in {bundle.load_s:.1f} s)")
    say(f"model: {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, bias, Adam "
        f"lr 0.01 wd 5e-4; {args.threads} torch threads; {args.warmup} warm-up + {args.epochs} "
        f"timed epochs x {args.rounds} round(s)")
    say(f"machine: {info['cpus']} cpus, load {info['loadavg']}, torch {info['torch']}, "
        f"PyG {pyg_version or 'n/a'}")
    say(f"host memory (plexus_partition.launch.hostmem), every variant: huge pages {'on' if huge else 'off'}")

    def cfg_for(order: str) -> ModelConfig:
        return ModelConfig(num_layers=args.layers, hidden=args.hidden, dropout=args.dropout,
                           order=order)

    times: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}  # process CPU s per epoch
    breakdown: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    profiles: dict[str, str] = {}
    plexus = [v for v in variants if v.startswith("plexus")]
    local = [v for v in variants if not v.startswith("plexus")]
    steps: dict[str, Callable[[], float]] = {}
    for v in local:
        steps[v] = (pyg_step(bundle, args.hidden, args.layers, args.dropout, v == "pyg-adj_t")
                    if v.startswith("pyg") else serial_step(bundle, cfg_for("agg")))
    if args.profile and "pyg-adj_t" in steps:
        steps["pyg-adj_t"]()  # warm-up: the profile shows a steady-state epoch
        profiles["pyg-adj_t"] = profile_step(steps["pyg-adj_t"])
    for rnd in range(args.rounds):
        if local:
            # In-process variants: epochs interleaved round-robin (rotating the first one), so a
            # burst of load from other users hits every variant alike.
            say(f"  round {rnd + 1}/{args.rounds}: {', '.join(local)} (load {loadavg()}) ...")
            for v in local:
                run_inprocess(steps[v], args.warmup, 0)
            for e in range(args.epochs):
                for k in range(len(local)):
                    v = local[(k + e) % len(local)]
                    wall, cpu = run_inprocess(steps[v], 0, 1)
                    times[v] += wall
                    cpus[v] += cpu
        if not plexus:
            continue
        # One 1-rank world runs every Plexus variant, epochs interleaved (see run_jobs).
        say(f"  round {rnd + 1}/{args.rounds}: {', '.join(plexus)} (load {loadavg()}) ...")
        configs = [(cfg_for(v.split("-")[2]), engine_config(v.split("-")[1], args.engine))
                   for v in plexus]
        runs = run_configs(bundle, (1, 1, 1), configs,
                           RunOptions(args.warmup, args.epochs, args.threads,
                                      profile=args.profile and rnd == 0))
        for v, run in zip(plexus, runs):
            times[v] += run.epoch_times()
            cpus[v] += run.epoch_cpu_times()
            for name in ("spmm", "gemm", "comm", "other"):
                breakdown[v].setdefault(name, []).append(run.stat(name)[0])
            if run.ranks[0].get("profile"):
                profiles[v] = run.ranks[0]["profile"]

    ref = median(times["pyg-adj_t"]) if times.get("pyg-adj_t") else None
    ref_cpu = median(cpus["pyg-adj_t"]) if cpus.get("pyg-adj_t") else None
    rows = []
    for v in variants:
        t, c = median(times[v]), median(cpus[v])
        b = breakdown[v]
        parts = ("" if not b else
                 f"{median(b['spmm']):.2f} / {median(b['gemm']):.2f} / {median(b['other']):.2f}")
        rows.append([v, f"{t:.3f}", f"{min(times[v]):.3f}", f"{max(times[v]):.3f}",
                     f"{100 * spread(times[v]):.0f}%", len(times[v]),
                     f"{t / ref:.2f}" if ref else "n/a", f"{c:.3f}",
                     f"{c / ref_cpu:.2f}" if ref_cpu else "n/a", parts])
    say("")
    say("wall = median seconds per epoch; spread = (max-min)/median; cpu = process CPU seconds "
        "per epoch (all threads; less sensitive to other users of the machine than wall time)")
    say(format_table(["variant", "wall s/epoch", "min", "max", "spread", "n", "x PyG adj_t",
                      "cpu s/epoch", "cpu x PyG", "spmm / gemm / other s"], rows))
    say("")
    verdicts = {}
    if ref:
        for v in variants:
            if v.startswith("plexus"):
                ratio = median(times[v]) / ref
                verdicts[v] = ratio
                cpu_ratio = median(cpus[v]) / ref_cpu
                say(f"{v}: {ratio:.2f} x PyG adj_t wall ({cpu_ratio:.2f} x in CPU time) -> "
                    f"target <= {TARGET} {'MET' if ratio <= TARGET else 'MISSED'}")
    for name, table in profiles.items():
        say("")
        say(f"torch.profiler, one epoch of {name}:")
        say(table)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "baseline.txt", say.text())
    write_json(args.out / "baseline.json",
               {"spec": args.spec, "machine": info,
                "args": {k: str(v) for k, v in vars(args).items()},
                "epoch_times": times, "median": {v: median(t) for v, t in times.items()},
                "epoch_cpu": cpus, "median_cpu": {v: median(t) for v, t in cpus.items()},
                "plexus_breakdown": breakdown, "ratio_to_pyg_adj_t": verdicts, "target": TARGET,
                "profiles": profiles})
    say(f"wrote {args.out / 'baseline.txt'} and {args.out / 'baseline.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
