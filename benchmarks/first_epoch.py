"""A first epoch, whole process: ``plexus-train --grid 1x1x1 --epochs 1`` and ``--grid 2x2x2``
(embedded Cora, the 2x2x2 store cached) against a PyG user's whole script (imports, Cora from
the raw Planetoid files, one GCNConv epoch), and ``./run``'s own overhead.

    python benchmarks/first_epoch.py                 # 3 rounds, interleaved
    python benchmarks/first_epoch.py --rounds 5 --out benchmarks/results/first_epoch.txt
    python benchmarks/first_epoch.py --rmat-setup    # + the CPU part of R-MAT 20's set-up

Each round runs every variant once, in turn (plexus 1x1x1, plexus 2x2x2, the PyG script, the
import of ``plexus.train.cli`` alone, ``./run true`` and ``true``), so the machine's load falls on
all alike; the figures are the medians over the rounds, with the load averages before and after
each round. A run's breakdown comes from its own JSON log: start-up (the command's start to the
rank's: imports, the launcher, the fork server, the workers' rendezvous), rank 0's set-up in
parts (process group, its shard: the store opened or the graph cut, the model), the first step,
the evaluation, and the rest (the summary, the exit). ``./run``'s overhead is measured on a
sandbox of this checkout whose ``.venv`` is the running interpreter's, with a stamp of its own.

Targets (issue 48): 1x1x1 <= 0.6x the PyG script, 2x2x2 <= 1.0x, also under load; ./run's
overhead <= 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plexus.studies.launchers import interpreter

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EMBEDDED = REPO / "plexus" / "datasets" / "data" / "planetoid"
RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

# A PyG user's whole script: what they would write for one epoch of a 2-layer GCN on Cora.
PYG_SCRIPT = r"""
import sys, time
import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv
import torch_geometric.transforms as T
torch.manual_seed(0)
data = Planetoid(sys.argv[1], "Cora", transform=T.NormalizeFeatures())[0]

class GCN(torch.nn.Module):
    def __init__(self, f, h, c):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(f, h), GCNConv(h, c)
    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)

model = GCN(data.num_features, 16, 7)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
model.train(); opt.zero_grad()
loss = F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
loss.backward(); opt.step()
model.eval()
with torch.no_grad():
    pred = model(data.x, data.edge_index).argmax(1)
accs = [float((pred[m] == data.y[m]).float().mean()) for m in (data.train_mask, data.val_mask, data.test_mask)]
print(f"epoch 1 loss {float(loss):.4f} accs {accs}")
"""


def env(tree: Path = REPO) -> dict[str, str]:
    e = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
             PYTHONPATH=os.pathsep.join(str(p) for p in (tree, tree / "datasets",
                                                         tree / "partitioners") if p.is_dir()))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "PLEXUS_SETUP_DONE"):
        e.pop(key, None)
    return e


def timed(cmd: list[str], cwd: Path | None = None, tree: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env(tree), capture_output=True, text=True, cwd=cwd,
                          timeout=900)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def plexus_run(grid: str, cache: Path, tmp: Path, tree: Path = REPO) -> dict:
    log = tmp / f"log-{grid}.json"
    # run in the tree: a fork server's `python -c` puts its working directory first on its path
    wall, _ = timed([str(BIN / "plexus-train"), "--grid", grid, "--epochs", "1", "--quiet",
                     "--cache", str(cache), "--log-json", str(log)], cwd=tree, tree=tree)
    summary = json.loads(log.read_text().splitlines()[-1])
    w, phases = summary["wall_time"], summary.get("setup_phases") or {}
    return {"whole_s": wall, "startup_s": w["startup_s"],
            "process_group_s": phases.get("process_group_s", float("nan")),
            "shard_s": phases.get("load_s", float("nan")),
            "model_s": phases.get("build_s", float("nan")),
            "first_step_s": w["train_steps_s"], "eval_s": w["eval_s"],
            "rest_s": wall - (w["total_s"] - w.get("other_s", 0.0)),
            "loss": summary["final"]["loss"]}


def sandbox(tmp: Path) -> Path:
    """A set-up checkout to time ./run on: links to this one's entries, and a .venv whose bin
    is the running interpreter's, with its stamp (so ./run takes its fast path)."""
    root = tmp / "checkout"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".venv", ".git"):
            (root / entry.name).symlink_to(entry)
    venv = root / ".venv"
    venv.mkdir()
    (venv / "bin").symlink_to(BIN)
    want = subprocess.run(["cksum"], stdin=open(REPO / "pyproject.toml", "rb"),
                          capture_output=True, text=True, check=True).stdout.strip()
    import importlib.util  # noqa: PLC0415
    torch_init = importlib.util.find_spec("torch").origin  # type: ignore[union-attr]
    (venv / ".plexus-installed").write_text(f"{want}\n{torch_init}\n")
    return root


def rmat_setup(out: list[str]) -> None:
    """The CPU part of a GPU run's set-up at R-MAT 20: the graph's load and the cut, in this
    process (what a 1x1x1 run does before its step)."""
    sys.path.insert(0, str(REPO))
    from plexus_datasets import load_dataset  # noqa: PLC0415
    from plexus_partition import shard_graph  # noqa: PLC0415

    spec = "rmat:scale=20,edge_factor=16,features=64,classes=16"
    start = time.perf_counter()
    graph = load_dataset(spec, None, seed=0)
    loaded = time.perf_counter()
    shard_graph(graph, "1x1x1", {"x": 0, "y": 0, "z": 0}, 3, perm="double")
    cut = time.perf_counter()
    out.append(f"R-MAT 20 set-up, CPU part, 1x1x1 (this process): load_dataset "
               f"{loaded - start:.2f} s, the cut {cut - loaded:.2f} s")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="also write the report here")
    p.add_argument("--before", type=Path, metavar="CHECKOUT",
                   help="also time plexus-train from this checkout (e.g. the commit before the "
                        "change), interleaved")
    p.add_argument("--rmat-setup", action="store_true",
                   help="also time R-MAT 20's load and cut (the CPU part of GPU set-up)")
    args = p.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory(prefix="first-epoch-") as t:
        tmp = Path(t)
        cache = tmp / "cache"
        pyg_root = tmp / "pyg"
        (pyg_root / "Cora" / "raw").mkdir(parents=True)
        for part in RAW:
            shutil.copy(EMBEDDED / f"ind.cora.{part}", pyg_root / "Cora" / "raw" / f"ind.cora.{part}")
        script = tmp / "pyg_gcn.py"
        script.write_text(PYG_SCRIPT)
        checkout = sandbox(tmp)
        say(f"first epoch, whole process; {args.rounds} rounds interleaved; python "
            f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, commit "
            f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, capture_output=True, text=True).stdout.strip()}")
        # warm: the 2x2x2 store into the cache, PyG's processed files, the page cache
        plexus_run("2x2x2", cache, tmp)
        plexus_run("1x1x1", cache, tmp)
        timed([sys.executable, str(script), str(pyg_root)])
        rows: dict[str, list] = {"1x1x1": [], "2x2x2": [], "pyg": [], "imports": [],
                                 "run": [], "bare": [], "before 1x1x1": [], "before 2x2x2": []}
        if args.before:
            plexus_run("2x2x2", cache, tmp, args.before)
        loads = []
        for r in range(args.rounds):
            before = os.getloadavg()[0]
            rows["1x1x1"].append(plexus_run("1x1x1", cache, tmp))
            rows["2x2x2"].append(plexus_run("2x2x2", cache, tmp))
            rows["pyg"].append(timed([sys.executable, str(script), str(pyg_root)])[0])
            rows["imports"].append(timed([*interpreter(sys.executable), "-c",
                                          "import plexus.train.cli"])[0])
            rows["run"].append(timed([str(checkout / "run"), "true"], cwd=checkout)[0])
            rows["bare"].append(timed(["true"])[0])
            if args.before:
                for grid in ("1x1x1", "2x2x2"):
                    rows[f"before {grid}"].append(plexus_run(grid, cache, tmp, args.before))
            after = os.getloadavg()[0]
            loads.append((before, after))
            say(f"round {r + 1}: load {before:.2f} -> {after:.2f}; 1x1x1 "
                f"{rows['1x1x1'][-1]['whole_s']:.2f} s, 2x2x2 {rows['2x2x2'][-1]['whole_s']:.2f} s, "
                f"PyG {rows['pyg'][-1]:.2f} s, import plexus.train.cli {rows['imports'][-1]:.2f} s, "
                f"./run true {rows['run'][-1]:.3f} s (true {rows['bare'][-1]:.3f} s)"
                + (f"; before: 1x1x1 {rows['before 1x1x1'][-1]['whole_s']:.2f} s, 2x2x2 "
                   f"{rows['before 2x2x2'][-1]['whole_s']:.2f} s" if args.before else ""))
        pyg = median(rows["pyg"])
        say("")
        say(f"medians of {args.rounds} (load 1-min avg over the rounds "
            f"{min(min(x) for x in loads):.2f}-{max(max(x) for x in loads):.2f}):")
        say(f"  PyG script (imports, Planetoid Cora from raw, 1 GCNConv epoch): {pyg:.2f} s")
        say(f"  import plexus.train.cli alone: {median(rows['imports']):.2f} s")
        keys = ("startup_s", "process_group_s", "shard_s", "model_s", "first_step_s", "eval_s",
                "rest_s")
        grids = ("1x1x1", "2x2x2") + (("before 1x1x1", "before 2x2x2") if args.before else ())
        for grid in grids:
            runs = rows[grid]
            whole = median([x["whole_s"] for x in runs])
            parts = ", ".join(f"{k[:-2].replace('_', ' ')} {median([x[k] for x in runs]):.2f}"
                              for k in keys)
            say(f"  {'(' + str(args.before) + ') ' if grid.startswith('before') else ''}"
                f"plexus-train --grid {grid.split()[-1]} --epochs 1: {whole:.2f} s = {whole / pyg:.2f}x "
                f"PyG  ({parts}; loss {runs[0]['loss']:.4f})")
        overhead = median(rows["run"]) - median(rows["bare"])
        say(f"  ./run's own overhead (./run true - true): {overhead * 1e3:.0f} ms")
        say("  (start-up: the command's start to rank 0's: imports, plan, cache lookup, fork "
            "server, workers, rendezvous; process group, shard (store read, or the graph cut "
            "on 1x1x1), model: rank 0's set-up; rest: the summary and the exit)")
    if args.rmat_setup:
        rmat_setup(lines)
        print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
