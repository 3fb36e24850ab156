"""One GPU: Plexus 1x1x1 against PyG on the same graph in one process, fp32 and bf16, dropout on.

    python benchmarks/gpu.py              # on a CUDA machine: R-MAT 21 (GCN), 18 (GAT), 20
    (launches) python benchmarks/gpu.py --smoke      # tiny graphs, seconds, on any device (the
    tests run it)

Cases (Plexus on a 1-rank grid, the same engine a cluster runs; PyG's layers as its users write
them):
- GCN, 3 layers of 256, 128 features, dropout 0.5 on every layer's input: PyG ``GCNConv``
  (normalize=False) on Â as a CSR ``adj_t`` (cuSPARSE's SpMM, as Plexus), Plexus fp32 and bf16
  (``--order agg``, the order `plexus-train` picks for these widths), and Plexus fp32 without
  dropout (what the masks cost).
- GAT, 2 layers, ``GATConv(128, 64, heads=4)`` then ``GATConv(256, C, heads=1)``, dropout 0.5 on
  features and attention: PyG on ``edge_index``; Plexus fp32 and bf16.
- Kernel launches per training epoch (torch.profiler's CUDA kernels; on a CPU the ATen operators,
  each a launch on a GPU) of the Plexus GCN at ``--launch-scale``.
- The floor: cuSPARSE's CSR SpMM Â·X alone at width 128.

Timing: ``--warmup`` epochs, then ``--epochs`` timed epochs per variant, each synchronised (the
loss is read on the host), the median reported; device peak = torch.cuda.max_memory_allocated
from the variant's build to its last epoch (the graph's own host arrays are not on the device).
Each Plexus row also shows the memory model's prediction of that peak
(`plexus.perfmodel.epoch_memory` for the device). Output: the printed table, also ``gpu.txt``
and ``gpu.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

GIB = 2**30


FEATURES, CLASSES = 128, 16  # of every graph here


def rmat_spec(scale: int, features: int = FEATURES, classes: int = CLASSES) -> str:
    return f"rmat:scale={scale},edge_factor=16,features={features},classes={classes},seed=0"


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: Any) -> float | None:
    import torch

    return float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def timed(step: Callable[[], float], warmup: int, epochs: int, device: Any) -> list[float]:
    """Seconds of each timed epoch (``step`` reads the loss on the host: the device is done)."""
    for _ in range(warmup):
        step()
    out = []
    for _ in range(epochs):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        out.append(time.perf_counter() - start)
    return out


def csr_tensor(adj_hat: Any, index: Any, device: Any) -> Any:
    """Â (scipy CSR) as a float32 torch CSR tensor with ``index`` (a numpy dtype) indices."""
    import numpy as np
    import torch

    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(adj_hat.indptr.astype(index)),
                                       torch.from_numpy(adj_hat.indices.astype(index)),
                                       torch.from_numpy(adj_hat.data.astype(np.float32)),
                                       size=adj_hat.shape).to(device)


# ---- PyG --------------------------------------------------------------------------------------
def pyg_gcn(g: Any, adj_hat: Any, device: Any, hidden: int, layers: int,
            dropout: float) -> Callable[[], float]:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)
    widths = [g.num_features] + [hidden] * (layers - 1) + [g.num_classes]
    convs = torch.nn.ModuleList(GCNConv(a, b, normalize=False) for a, b in
                                zip(widths[:-1], widths[1:])).to(device)
    adj = csr_tensor(adj_hat, np.int64, device)  # as PyG users build adj_t
    x = torch.from_numpy(g.features).to(device)
    y = torch.from_numpy(g.labels).to(device)
    mask = torch.from_numpy(g.train_mask).to(device)
    opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)

    def step() -> float:
        convs.train()
        opt.zero_grad(set_to_none=True)
        h = x
        for l, conv in enumerate(convs):
            h = conv(F.dropout(h, dropout, True), adj)
            if l < len(convs) - 1:
                h = F.relu(h)
        loss = F.cross_entropy(h[mask], y[mask])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def pyg_gat(g: Any, device: Any, hidden: int, heads: int, dropout: float) -> Callable[[], float]:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv

    from plexus_datasets.graph import incoming

    torch.manual_seed(0)
    m = incoming(g.adj, g.directed).tocoo()  # rows: destinations
    edge_index = torch.from_numpy(np.vstack([m.col, m.row]).astype(np.int64)).to(device)
    x = torch.from_numpy(g.features).to(device)
    y = torch.from_numpy(g.labels).to(device)
    mask = torch.from_numpy(g.train_mask).to(device)
    p = dropout
    convs = torch.nn.ModuleList([
        GATConv(g.num_features, hidden, heads=heads, dropout=p),
        GATConv(hidden * heads, g.num_classes, heads=1, concat=False, dropout=p)]).to(device)
    opt = torch.optim.Adam(convs.parameters(), lr=0.005, weight_decay=5e-4)

    def step() -> float:
        convs.train()
        opt.zero_grad(set_to_none=True)
        h = F.relu(convs[0](F.dropout(x, p, True), edge_index))
        out = convs[1](F.dropout(h, p, True), edge_index)
        loss = F.cross_entropy(out[mask], y[mask])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


# ---- Plexus -----------------------------------------------------------------------------------
def one_rank_shard(g: Any, adj_hat: Any, cfg: Any) -> Any:
    """The whole graph as the shard of a 1x1x1 grid for the model ``cfg`` (built once, shared
    by the variants of a case)."""
    from plexus_partition import shard_graph

    orders = cfg.orders(g.num_features, g.num_classes)
    adj = adj_hat if cfg.aggregation == "gcn" else None
    return shard_graph(g, (1, 1, 1), {"x": 0, "y": 0, "z": 0}, cfg.num_stages, orders, "none",
                       adj_hat=adj, aggregation=cfg.aggregation)


def plexus_model(shard: Any, device: Any, cfg: Any, dtype: str) -> Any:
    """A Trainer of the Plexus model ``cfg`` on a 1x1x1 grid of this process."""
    from plexus.engine.build import build_model
    from plexus.engine.config import EngineConfig, TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer

    grid = Grid.create((1, 1, 1), device)
    model = build_model(grid, shard, cfg, 0, EngineConfig(dtype=dtype))
    return Trainer(model, TrainConfig(eval_every=0))


def host_syncs(step: Callable[[], float], device: Any) -> list[str] | None:
    """Where one training epoch makes the host wait for the GPU (torch's sync debug mode warns
    at each; the loss its log line reads is one): for each, the innermost lines of the project
    on the stack, None off CUDA."""
    import traceback

    import torch

    if device.type != "cuda":
        return None
    found: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message):
            frames = [f for f in traceback.extract_stack()[:-1] if "plexus" in f.filename]
            found.append(" < ".join(f"{Path(f.filename).name}:{f.lineno}"
                                    for f in reversed(frames[-3:])) or f"{filename}:{lineno}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return found


def kernel_table(step: Callable[[], float], device: Any, rows: int = 14) -> str:
    """torch.profiler's table of one epoch's operators by their own device time (CPU time
    off CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
        sync(device)
    averages = prof.key_averages()
    keys = (("self_device_time_total", "self_cuda_time_total") if device.type == "cuda"
            else ("self_cpu_time_total",))
    for key in keys:
        try:
            return averages.table(sort_by=key, row_limit=rows, max_name_column_width=48)
        except (AttributeError, KeyError, ValueError):
            continue
    return ""


def peak_breakdown(step: Callable[[], float], device: Any, rows: int = 12) -> str:
    """What is alive at one epoch's peak of tensor memory, by the operator and the engine's line
    that made it (beside what was resident before the epoch): the memory model's terms, checked
    on the device."""
    import sys
    import weakref
    from collections import Counter

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def where() -> str:
        frame = sys._getframe(3)
        while frame is not None:
            name = frame.f_code.co_filename
            if "plexus" in name and "benchmarks" not in name:
                return f"{Path(name).name}:{frame.f_lineno}"
            frame = frame.f_back
        return "?"

    class Tracker(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, tuple[int, str]] = {}
            self.total = self.peak = 0
            self.at_peak: Counter[str] = Counter()

        def _free(self, ptr: int) -> None:
            nbytes, _ = self.live.pop(ptr, (0, ""))
            self.total -= nbytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.layout == torch.strided and \
                        t.device.type == device.type:
                    st = t.untyped_storage()
                    ptr = st.data_ptr()
                    if ptr and ptr not in self.live:
                        self.live[ptr] = (st.nbytes(), f"{func.overloadpacket} {where()}")
                        self.total += st.nbytes()
                        weakref.finalize(st, self._free, ptr)
                        if self.total > self.peak:
                            self.peak = self.total
                            self.at_peak = Counter()
                            for nbytes, label in self.live.values():
                                self.at_peak[label] += nbytes
            return out

    reset_peak(device)
    resident = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    with Tracker() as tracker:
        step()
    sync(device)
    lines = [f"resident before the epoch {resident / GIB:.2f} GiB, tensors made in the epoch at "
             f"their peak {tracker.peak / GIB:.2f} GiB, allocator peak "
             f"{(peak(device) or 0) / GIB:.2f} GiB"]
    lines += [f"      {nbytes / GIB:7.3f} GiB  {label}"
              for label, nbytes in tracker.at_peak.most_common(rows)]
    return "\n".join(lines)


def predicted_peak(g: Any, nnz: int, cfg: Any, dtype: str, device: Any) -> float:
    """The memory model's prediction of the training epoch's peak on ``device``."""
    from plexus.engine.config import EngineConfig
    from plexus.perfmodel import ModelSpec, epoch_memory

    spec = ModelSpec(g.num_nodes, nnz, g.num_features, g.num_classes, cfg, perm="none",
                     dtype_bytes=EngineConfig(dtype=dtype).dtype_bytes, from_store=True,
                     device=device.type)
    return epoch_memory(spec, (1, 1, 1)).total


def launches_per_epoch(step: Callable[[], float], device: Any) -> tuple[int, str]:
    """Kernel launches of one epoch (CUDA kernels seen by torch.profiler), or on a CPU the ATen
    operators dispatched (each a launch on a GPU)."""
    if device.type != "cuda":
        from plexus.testing.opcount import count_ops

        return sum(count_ops(step).values()), "ATen operators"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        sync(device)
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    return kernels, "CUDA kernels"


def spmm_floor(adj_hat: Any, device: Any, width: int = 128, reps: int = 20) -> float:
    """Seconds of one CSR SpMM Â·X (X: nodes × ``width`` float32), median of ``reps``."""
    import numpy as np
    import torch

    a = csr_tensor(adj_hat, np.int32, device)  # as Plexus holds its blocks
    x = torch.randn(adj_hat.shape[1], width, device=device)
    out = []
    for _ in range(reps + 2):
        sync(device)
        start = time.perf_counter()
        torch.sparse.mm(a, x)
        sync(device)
        out.append(time.perf_counter() - start)
    return statistics.median(out[2:])


# ---- the run ----------------------------------------------------------------------------------
def configs() -> dict[str, Any]:
    """The models of the cases, by the variant names' model part."""
    from plexus.engine.config import ModelConfig

    return {"gcn": ModelConfig(num_layers=3, hidden=256, dropout=0.5),  # the default order: auto
            "gcn-no-dropout": ModelConfig(num_layers=3, hidden=256, dropout=0.0),
            "gat": ModelConfig(num_layers=2, hidden=64, dropout=0.5, kind="gat", heads=4,
                               out_heads=1, attn_dropout=0.5)}


def reprice(path: Path) -> str:
    """The memory model's predictions, as it is now, of the device peaks a results file
    (``gpu.txt``) measured: its graphs' sizes and peaks are read from the file."""
    import re

    import torch

    text = path.read_text(encoding="utf-8")
    sizes = {m["case"].lower(): (int(m["n"].replace(",", "")), int(m["nnz"].replace(",", "")))
             for m in re.finditer(r"^(?P<case>GCN|GAT) .*?N=(?P<n>[\d,]+), nnz\(Â\)=(?P<nnz>[\d,]+)",
                                  text, re.MULTILINE)}
    out = []
    for m in re.finditer(r"^  (?P<case>gcn|gat) +plexus-(?P<dtype>fp32|bf16)(?P<rest>\S*) +epoch "
                         r".*?peak +(?P<peak>[\d.]+) GiB", text, re.MULTILINE):
        n, nnz = sizes[m["case"]]
        cfg = configs()[m["case"] + m["rest"]]
        g = type("G", (), {"num_nodes": n, "num_features": FEATURES, "num_classes": CLASSES})
        predicted = predicted_peak(g, nnz, cfg, m["dtype"], torch.device("cuda"))
        out.append(f"  re-priced memory model {m['case']}/plexus-{m['dtype']}{m['rest']}: "
                   f"predicted / measured {predicted / (float(m['peak']) * GIB):.3f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gcn-scale", type=int, default=21)
    p.add_argument("--gat-scale", type=int, default=18)
    p.add_argument("--launch-scale", type=int, default=20)
    p.add_argument("--epochs", type=int, default=10, help="timed epochs per variant")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default=None, help="default: cuda where available, else cpu")
    p.add_argument("--skip", default="", help="comma-separated case names to skip "
                   "(gcn, gat, launches, floor, pyg)")
    p.add_argument("--diagnose", action="store_true",
                   help="per case, a profile of one epoch (top operators by device time) and "
                        "what is alive at its memory peak")
    p.add_argument("--smoke", action="store_true", help="tiny graphs: seconds, any device")
    p.add_argument("--out", default="benchmarks/out", help="folder for gpu.txt and gpu.json")
    p.add_argument("--reprice", type=Path, metavar="GPU_TXT",
                   help="print the current memory model's predictions of the peaks a gpu.txt "
                        "measured (no device needed), then exit")
    args = p.parse_args(argv)
    if args.reprice:
        print(reprice(args.reprice))
        return 0
    if args.smoke:
        args.gcn_scale, args.gat_scale, args.launch_scale = 9, 9, 10
        args.epochs, args.warmup = 2, 1

    import torch
    import torch.distributed as dist

    from plexus.runtime.local import free_port
    from plexus.testing.gridrun import load_bundle
    from plexus.bench.output import Tee, machine_info, write_json, write_text

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    skip = set(filter(None, args.skip.split(",")))
    say = Tee()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    info = machine_info()
    say(f"device: {name}; torch {torch.__version__}"
        + (f", CUDA {torch.version.cuda}" if device.type == "cuda" else "")
        + f"; {args.warmup} warm-up + {args.epochs} timed epochs per variant, medians")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    rows: list[dict] = []

    def run(case: str, variant: str, build: Callable[[], Callable[[], float]],
            predicted: Callable[[], float] | None = None) -> dict:
        reset_peak(device)
        start = time.perf_counter()
        step = build()
        built = time.perf_counter() - start
        times = timed(step, args.warmup, args.epochs, device)
        row = {"case": case, "variant": variant, "epoch_s": statistics.median(times),
               "epochs": times, "build_s": built, "device_peak": peak(device),
               "predicted_peak": predicted() if predicted else None}
        if args.diagnose:
            say(f"--- {case} {variant}: one epoch's operators\n{kernel_table(step, device)}")
            say(f"--- {case} {variant}: at the memory peak\n{peak_breakdown(step, device)}")
        del step
        rows.append(row)
        pk = "" if row["device_peak"] is None else f"  peak {row['device_peak'] / GIB:6.2f} GiB"
        pr = "" if row["predicted_peak"] is None else \
            f" (model {row['predicted_peak'] / GIB:6.2f} GiB)"
        say(f"  {case:<14} {variant:<22} epoch {row['epoch_s'] * 1e3:8.1f} ms{pk}{pr}")
        return row

    def load(title: str, scale: int) -> tuple[Any, Any]:
        b = load_bundle(rmat_spec(scale))
        g, a = b.graph, b.adj_hat
        say(f"{title} on R-MAT {scale}: N={g.num_nodes:,}, nnz(Â)={a.nnz:,}, "
            f"F={g.num_features}, C={g.num_classes} (loaded in {b.load_s:.1f} s)")
        return g, a

    gcn = configs()["gcn"]
    if "gcn" not in skip:
        g, a = load("GCN 3x256", args.gcn_scale)
        if "floor" not in skip:
            floor = spmm_floor(a, device)
            rows.append({"case": "gcn", "variant": "csr-spmm-floor", "epoch_s": floor})
            say(f"  {'gcn':<14} {'CSR SpMM Â·X (w=128)':<22} {floor * 1e3:8.2f} ms")
        if "pyg" not in skip:
            run("gcn", "pyg-gcnconv-adj_t", lambda: pyg_gcn(g, a, device, 256, 3, 0.5))
        shard = one_rank_shard(g, a, gcn)
        for dtype in ("fp32", "bf16"):
            run("gcn", f"plexus-{dtype}",
                lambda: plexus_model(shard, device, gcn, dtype).train_step,
                lambda: predicted_peak(g, a.nnz, gcn, dtype, device))
        nodrop = configs()["gcn-no-dropout"]
        run("gcn", "plexus-fp32-no-dropout",
            lambda: plexus_model(shard, device, nodrop, "fp32").train_step,
            lambda: predicted_peak(g, a.nnz, nodrop, "fp32", device))
        del g, a, shard
    gat = configs()["gat"]
    if "gat" not in skip:
        g, a = load("GAT 2 layers (64x4 heads, then 1)", args.gat_scale)
        if "pyg" not in skip:
            run("gat", "pyg-gatconv", lambda: pyg_gat(g, device, 64, 4, 0.5))
        shard = one_rank_shard(g, a, gat)
        for dtype in ("fp32", "bf16"):
            run("gat", f"plexus-{dtype}",
                lambda: plexus_model(shard, device, gat, dtype).train_step,
                lambda: predicted_peak(g, a.nnz, gat, dtype, device))
        del g, a, shard
    if "launches" not in skip:
        b = load_bundle(rmat_spec(args.launch_scale))
        for label, cfg in (("gcn", gcn), ("gat", gat)):
            shard = one_rank_shard(b.graph, b.adj_hat, cfg)
            step = plexus_model(shard, device, cfg, "fp32").train_step
            step()
            step()  # the optimizer's state exists, every kernel is compiled
            count, what = launches_per_epoch(step, device)
            syncs = host_syncs(step, device)
            rows.append({"case": "launches", "variant": f"plexus-{label}-fp32",
                         "launches": count, "what": what, "scale": args.launch_scale,
                         "host_syncs": syncs})
            say(f"  launches       plexus-{label}-fp32 R-MAT {args.launch_scale}: "
                f"{count:,} {what} per epoch"
                + ("" if syncs is None else
                   f", {len(syncs)} host synchronisation(s) ({'; '.join(syncs)})"))
            del step, shard
        del b
    say(summary(rows))
    out = Path(args.out)
    write_text(out / "gpu.txt", say.text())
    write_json(out / "gpu.json", {"device": name, "machine": info, "rows": rows,
                                  "args": vars(args)})
    dist.destroy_process_group()
    return 0


def summary(rows: list[dict]) -> str:
    """The ratios the GPU issue asks for, from the rows."""
    by = {(r["case"], r["variant"]): r for r in rows}
    lines = ["", "ratios (median epochs; device peaks):"]

    def ratio(case: str, a: str, b: str, key: str = "epoch_s") -> str:
        ra, rb = by.get((case, a)), by.get((case, b))
        if not ra or not rb or not ra.get(key) or not rb.get(key):
            return "n/a"
        return f"{ra[key] / rb[key]:.2f}x"

    for case, pyg in (("gcn", "pyg-gcnconv-adj_t"), ("gat", "pyg-gatconv")):
        lines.append(f"  {case}: plexus fp32 / pyg epoch {ratio(case, 'plexus-fp32', pyg)}, "
                     f"bf16 / fp32 {ratio(case, 'plexus-bf16', 'plexus-fp32')}, "
                     f"peak fp32 / pyg {ratio(case, 'plexus-fp32', pyg, 'device_peak')}, "
                     f"bf16 / fp32 peak {ratio(case, 'plexus-bf16', 'plexus-fp32', 'device_peak')}")
    for r in rows:
        if r.get("predicted_peak") and r.get("device_peak"):
            lines.append(f"  memory model {r['case']}/{r['variant']}: predicted / measured "
                         f"{r['predicted_peak'] / r['device_peak']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
