"""Shared helpers of the benchmark scripts.

- `load_bundle`: a dataset spec -> the `Graph`, its GCN-normalized Â and the sizes the
  performance model needs.
- `run_grid`: train the distributed GCN on one X×Y×Z grid on a local gloo world
  (`plexus.localworld.run_world`) and return, per rank and per measured epoch, the wall time of
  the training step, the engine's timers (wall and thread-CPU seconds) and the ledger's volumes.
- `GridRun`: reductions of that (median epoch time, per-timer max/mean over ranks, bytes per
  axis) and the perf model's volume for the same configuration.
- atomic output writers (CSV, JSON, text, PNG): temp file in the target folder + ``os.replace``,
  so a reader never sees half a file and an interrupted run leaves the previous output intact.

Scripts import this as ``benchmarks.common`` (the repository root is put on ``sys.path`` by
`repo_on_path`); spawned ranks find it the same way, as spawn passes the parent's ``sys.path``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from plexus.atomic import atomic_file
from plexus.worker import rank_coords

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "benchmarks" / "out"
DEFAULT_SPEC = "rmat:scale=17,edge_factor=16,features=128,classes=16,seed=0"
SMOKE_SPEC = "rmat:scale=9,edge_factor=4,features=16,classes=4,seed=0"
AXES = ("x", "y", "z")


def repo_on_path() -> None:
    """Make ``benchmarks.common`` and the in-tree ``plexus`` importable when a script is run as
    ``python benchmarks/NAME.py`` (sys.path[0] is then benchmarks/, not the repository root)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_file(path, "w") as f:
        f.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (non-JSON values via ``str``)."""
    return write_text(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]],
              fields: Sequence[str] | None = None) -> Path:
    """Write dict rows as CSV atomically; columns are ``fields`` or the union of the rows' keys
    in first-seen order."""
    if fields is None:
        fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_value(v) for k, v in r.items()})
    return write_text(path, buf.getvalue())


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v)
    return v


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG atomically."""
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
    return Path(path)


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, or None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


class Tee:
    """Print to stdout and keep a copy, so the printed report can also be saved to a file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: host, cores, load, library versions."""
    import numpy
    import scipy
    import torch

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {"host": platform.node(), "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in load],
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "scipy": scipy.__version__,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def loadavg() -> str:
    """The 1-minute load average as text (other users of the machine make timings noisy)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------
# Statistics and formatting
# ---------------------------------------------------------------------------------------------
def median(values: Iterable[float]) -> float:
    """Median, NaN for no values."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how noisy repeated measurements were."""
    m = median(values)
    return (max(values) - min(values)) / m if values and m > 0 else float("nan")


def fmt_bytes(b: float) -> str:
    """Bytes in MiB with 2 decimals (the scale of the volumes here)."""
    return f"{b / 2**20:.2f} MiB"


def add_training_options(p: Any, epochs: int, perm_help: str = "node permutation") -> None:
    """The model and timing options the grid benchmarks share (argparse parser ``p``)."""
    p.add_argument("--layers", type=int, default=3, help="GCN layers (default 3)")
    p.add_argument("--hidden", type=int, default=128, help="hidden width (default 128)")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout (default 0.5)")
    p.add_argument("--order", default="agg", help="product order: agg, combine, auto or a list")
    p.add_argument("--backend", default="torch", help="SpMM backend: torch, scipy, torch-sparse")
    p.add_argument("--engine", default="",
                   help="more EngineConfig fields, e.g. agg_chunks=4,overlap=1,tune_gemms=1")
    p.add_argument("--perm", default="none", help=f"{perm_help} (default none)")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs per grid (default 1)")
    p.add_argument("--epochs", type=int, default=epochs,
                   help=f"timed epochs per grid (default {epochs})")


def training_config(args: Any, p: Any) -> tuple[Any, Any]:
    """(ModelConfig, EngineConfig) from the options of `add_training_options`; a bad --engine or
    --backend is reported by parser ``p``."""
    from plexus.config import ModelConfig  # noqa: PLC0415

    cfg = ModelConfig(num_layers=args.layers, hidden=args.hidden, dropout=args.dropout,
                      order=args.order)
    try:
        return cfg, engine_config(args.backend, args.engine)
    except ValueError as e:
        p.error(str(e))
        raise  # unreachable: p.error exits


def grid_text(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims)


def parse_grids(text: str) -> list[tuple[int, int, int]]:
    """"1x1x1,2x1x1" -> [(1, 1, 1), (2, 1, 1)]."""
    from plexus.grid import parse_grid

    return [parse_grid(t) for t in text.split(",") if t.strip()]


def grids_of(world_sizes: Iterable[int]) -> list[tuple[int, int, int]]:
    """Every ordered factorization X·Y·Z of each world size."""
    from plexus.perfmodel import factorizations

    return [g for w in world_sizes for g in factorizations(w)]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width text table; first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                               for i, c in enumerate(r)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def engine_config(backend: str = "torch", options: str = "") -> Any:
    """`plexus.config.EngineConfig` with ``spmm_backend=backend`` and the comma-separated
    ``key=value`` fields of ``options`` (e.g. "agg_chunks=4,overlap=1,tune_gemms=1"); values are
    converted to the field's type. Raises ValueError naming a bad key or value."""
    import dataclasses

    from plexus.config import EngineConfig

    fields = {f.name: f for f in dataclasses.fields(EngineConfig)}
    kwargs: dict[str, Any] = {"spmm_backend": backend}
    for item in filter(None, (t.strip() for t in options.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in fields or key == "extra":
            raise ValueError(f"bad engine option {item!r}; use key=value with key in "
                             f"{', '.join(k for k in fields if k != 'extra')}")
        default = getattr(EngineConfig(), key)
        if isinstance(default, bool):
            if value.strip().lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(f"engine option {key} needs a boolean, got {value!r}")
            kwargs[key] = value.strip().lower() in ("1", "true", "yes")
        elif isinstance(default, int):
            kwargs[key] = int(value)
        else:
            kwargs[key] = value.strip()
    return EngineConfig(**kwargs)


# ---------------------------------------------------------------------------------------------
# Graph
# ---------------------------------------------------------------------------------------------
@dataclass
class Bundle:
    """A loaded graph with its normalized adjacency (computed once, shared by every run)."""

    spec: str
    graph: Any  # plexus.datasets.graph.Graph
    adj_hat: Any  # scipy CSR, float32
    load_s: float

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def nnz(self) -> int:
        return int(self.adj_hat.nnz)

    def describe(self) -> str:
        g = self.graph
        return (f"{self.spec}: N={g.num_nodes:,}, edges={g.num_edges:,}, nnz(Â)={self.nnz:,}, "
                f"F={g.num_features}, C={g.num_classes}")


def load_bundle(spec: str, root: str | None = None) -> Bundle:
    """Load the dataset ``spec`` (see `plexus.datasets.load_dataset`) and normalize it."""
    from plexus.datasets import gcn_normalize, load_dataset

    start = time.perf_counter()
    g = load_dataset(spec, root)
    adj_hat = gcn_normalize(g.adj, g.directed)
    return Bundle(spec, g, adj_hat, time.perf_counter() - start)


def model_spec(bundle: Bundle, cfg: Any, perm: str = "none") -> Any:
    """The `plexus.perfmodel.ModelSpec` of ``bundle`` with the GCN of ``cfg`` (a ModelConfig)."""
    from plexus.perfmodel import ModelSpec

    g = bundle.graph
    return ModelSpec.from_config(g.num_nodes, bundle.nnz, g.num_features, g.num_classes, cfg,
                                 perm=perm, name=bundle.spec)


# ---------------------------------------------------------------------------------------------
# Distributed runs
# ---------------------------------------------------------------------------------------------
COMPUTE = ("spmm", "gemm")


@dataclass
class Turns:
    """Ranks taking turns in their compute regions, ``slots`` ranks at a time (see
    `timers_class`): ``group`` spans all ranks."""

    group: Any
    slots: int

    def __post_init__(self) -> None:
        import torch.distributed as dist

        self.size = dist.get_world_size(self.group)
        self.mine = dist.get_rank(self.group) // self.slots  # this rank's turn
        self.count = -(-self.size // self.slots)  # turns per region

    def wait(self, before: bool) -> None:
        """The barriers before this rank's turn (``before``) or from its end on; none when all
        ranks fit in one turn (then the ranks compute side by side, one per core)."""
        import torch.distributed as dist

        if self.count == 1:
            return
        for _ in range(self.mine if before else self.count - self.mine):
            dist.barrier(group=self.group)


def timers_class():
    """`plexus.timing.Timers` that also accumulates the calling thread's CPU seconds, and can
    make the ranks take turns in their compute regions.

    With more ranks than cores a rank's wall time inside a kernel includes time it waited for a
    core; its thread CPU time does not. Each rank runs torch (and scipy) single-threaded in the
    calling thread, so thread CPU time is the work the kernel did, but it still includes the
    cost of sharing a core: another rank's time slices evict this one's caches mid-kernel.
    With ``turns`` set (a `Turns`), each SpMM/GEMM region runs on ``turns.slots`` ranks at a
    time: ranks r with r // slots = t compute between the t-th and (t+1)-th of ⌈G/slots⌉
    barriers, the others wait blocked in theirs. With one slot per core that is G ranks on G
    cores, as far as the kernels can tell. The collectives between regions are untouched, so
    the epoch computes exactly what it does otherwise.
    """
    from plexus.timing import Timers

    class CpuTimers(Timers):
        def __init__(self, device, enabled: bool = True) -> None:
            super().__init__(device, enabled)
            self.cpu_seconds: dict[str, float] = {}
            self.turns: Turns | None = None
            self.spans: list[tuple[float, float]] | None = None  # compute (start, end), if kept

        @contextmanager
        def __call__(self, name: str) -> Iterator[None]:
            if not self.enabled:
                yield
                return
            turns = self.turns if name in COMPUTE else None
            if turns is not None:
                turns.wait(before=True)
            cpu, start = time.thread_time(), time.perf_counter()
            try:
                with super().__call__(name):
                    yield
            finally:
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + time.thread_time() - cpu
                if self.spans is not None and name in COMPUTE:
                    self.spans.append((start, time.perf_counter()))
                if turns is not None:
                    turns.wait(before=False)

        def reset(self) -> None:
            super().reset()
            self.cpu_seconds.clear()

    return CpuTimers


@dataclass
class RunOptions:
    """What one grid run trains and how long."""

    warmup: int = 1
    epochs: int = 5
    threads: int = 1
    perm: str = "none"
    seed: int = 0
    profile: bool = False  # one extra epoch under torch.profiler on rank 0
    turn_epochs: int = 0  # more epochs whose compute regions run turn_slots ranks at a time
    turn_slots: int = 1
    keep_spans: bool = False  # record each compute region's (start, end) in the turn epochs


@dataclass
class Job:
    """One measurement of `run_jobs`: a grid and the configuration trained on it."""

    dims: tuple[int, int, int]
    model_cfg: Any  # plexus.config.ModelConfig
    engine_cfg: Any = None  # plexus.config.EngineConfig; None: the defaults

    @property
    def world(self) -> int:
        return self.dims[0] * self.dims[1] * self.dims[2]


def epoch_kinds(opts: RunOptions) -> list[str]:
    """The epochs of a run in order: the warm-up ones, then the timed and the turn-taking ones
    spread evenly among each other, so a drift of the machine's load hits both kinds alike."""
    timed = [("timed", (i + 0.5) / opts.epochs) for i in range(opts.epochs)]
    turns = [("turns", (i + 0.5) / opts.turn_epochs) for i in range(opts.turn_epochs)]
    return ["warmup"] * opts.warmup + [k for k, _ in sorted(timed + turns, key=lambda t: t[1])]


def rank_worker(shard_dir: str, jobs: list[Job], opts: RunOptions) -> list[dict[str, Any]]:
    """One rank of `run_jobs` (runs inside a gloo world): build every job's grid and model from
    this rank's pickled shards, then time ``opts.warmup`` + ``opts.epochs`` training steps of each.

    The jobs' steps are interleaved, epoch by epoch, starting with a different job each epoch:
    the machine is shared, and a burst of someone else's load then hits every job alike instead
    of whichever happened to run at that minute.

    Among them (`epoch_kinds`), ``opts.turn_epochs`` more steps of each job whose SpMM/GEMM
    regions run ``opts.turn_slots`` ranks at a time (see `timers_class`): their compute times
    are the ranks' work without G ranks time-sharing fewer cores.

    Returns, per job: per measured epoch (and per turn-taking epoch) the step's wall and CPU
    seconds and that epoch's timers (wall and thread CPU) and ledger; plus this rank's nnz and
    set-up time.
    """
    import torch
    import torch.distributed as dist

    from plexus.comm import Comm
    from plexus.config import TrainConfig
    from plexus.grid import Grid
    from plexus.ledger import Ledger
    from plexus.model import DistributedGCN
    from plexus.trainer import Trainer

    rank = dist.get_rank()
    grids: dict[tuple[int, int, int], Grid] = {}
    built = []
    for k, job in enumerate(jobs):
        start = time.perf_counter()
        if job.dims not in grids:  # a collective: every rank walks the jobs in the same order
            grids[job.dims] = Grid.create(job.dims)
        grid = grids[job.dims]
        with open(Path(shard_dir) / f"job{k}-rank{rank}.pkl", "rb") as f:
            shard = pickle.load(f)
        timers = timers_class()(grid.device, enabled=True)
        ledger = Ledger()
        model = DistributedGCN(Comm(grid, ledger, timers), shard, job.model_cfg, seed=opts.seed,
                               engine=job.engine_cfg)
        trainer = Trainer(model, TrainConfig(epochs=10**9, seed=opts.seed, eval_every=0))
        built.append({"trainer": trainer, "timers": timers, "ledger": ledger, "grid": grid,
                      "nnz": {key: int(b.nnz) for key, b in shard.blocks.items()},
                      "setup_s": time.perf_counter() - start, "epochs": [], "turn_epochs": [],
                      "losses": []})
        del shard
    turns = Turns(dist.new_group(backend="gloo"), opts.turn_slots) if opts.turn_epochs else None
    for e, kind in enumerate(epoch_kinds(opts)):
        taking_turns = kind == "turns"
        for k in range(len(built)):
            job = built[(k + e) % len(built)]  # rotate: no job always runs first
            timers, ledger = job["timers"], job["ledger"]
            timers.reset()
            ledger.reset()
            timers.turns = turns if taking_turns else None
            timers.spans = [] if taking_turns and opts.keep_spans else None
            dist.barrier()  # all ranks start the step together; the slowest one sets the pace
            wall, cpu, pcpu = time.perf_counter(), time.thread_time(), time.process_time()
            job["losses"].append(job["trainer"].train_step())
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            pcpu = time.process_time() - pcpu  # all threads (intra-op pool, gloo) of the rank
            if kind != "warmup":
                job["turn_epochs" if taking_turns else "epochs"].append({
                    "wall": wall, "cpu": cpu, "process_cpu": pcpu,
                    "timers": dict(timers.seconds), "timers_cpu": dict(timers.cpu_seconds),
                    "spans": timers.spans,
                    "bytes": {f"{a}:{op}": v for (a, op), v in ledger.bytes.items()},
                    "calls": {f"{a}:{op}": v for (a, op), v in ledger.calls.items()}})
            timers.turns = timers.spans = None
    results = []
    for job in built:
        profile = None
        if opts.profile:
            from torch.profiler import ProfilerActivity, profile as torch_profile

            dist.barrier()
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                job["trainer"].train_step()
            if rank == 0:
                profile = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        results.append({"rank": rank, "coords": job["grid"].coords, "epochs": job["epochs"],
                        "turn_epochs": job["turn_epochs"],
                        "losses": job["losses"], "setup_s": job["setup_s"], "nnz": job["nnz"],
                        "threads": torch.get_num_threads(), "profile": profile})
    return results


@dataclass
class GridRun:
    """Everything measured on one grid, with reductions over ranks and epochs."""

    dims: tuple[int, int, int]
    ranks: list[dict[str, Any]]
    wall_s: float  # the whole run_jobs call (every job of the world), start-up included
    model_cfg: Any = None
    engine_cfg: Any = None
    opts: RunOptions = field(default_factory=RunOptions)

    @property
    def world(self) -> int:
        return self.dims[0] * self.dims[1] * self.dims[2]

    @property
    def num_epochs(self) -> int:
        return len(self.ranks[0]["epochs"])

    def epoch_times(self) -> list[float]:
        """Per measured epoch: the slowest rank's step time."""
        return [max(r["epochs"][e]["wall"] for r in self.ranks) for e in range(self.num_epochs)]

    def epoch_time(self) -> float:
        """Median over epochs of the slowest rank's step time."""
        return median(self.epoch_times())

    def epoch_cpu_times(self) -> list[float]:
        """Per measured epoch: the CPU seconds (all threads) of the step, summed over ranks."""
        return [sum(r["epochs"][e]["process_cpu"] for r in self.ranks)
                for e in range(self.num_epochs)]

    def timer_names(self) -> list[str]:
        names = {n for r in self.ranks for ep in r["epochs"] for n in ep["timers"]}
        order = {"spmm": 0, "gemm": 1}
        return sorted(names, key=lambda n: (order.get(n, 2), n))

    def per_rank(self, name: str, cpu: bool = False, turns: bool = False) -> list[float]:
        """Per rank: median over epochs of timer ``name`` (seconds per epoch). ``name`` may also be
        "compute" (spmm + gemm), "comm" (every collective), "step" (the whole step) or "other"
        (the step minus every timer: dropout, activations, loss arithmetic, Adam, autograd).
        ``turns``: over the epochs whose compute regions took turns."""
        key = "timers_cpu" if cpu else "timers"
        out = []
        for r in self.ranks:
            vals = []
            for ep in r["turn_epochs" if turns else "epochs"]:
                t = ep[key]
                if name == "compute":
                    v = t.get("spmm", 0.0) + t.get("gemm", 0.0)
                elif name == "comm":
                    v = sum(s for n, s in t.items() if ":" in n)
                elif name == "step":
                    v = ep["cpu" if cpu else "wall"]
                elif name == "other":
                    v = ep["cpu" if cpu else "wall"] - sum(t.values())
                else:
                    v = t.get(name, 0.0)
                vals.append(v)
            out.append(median(vals))
        return out

    def stat(self, name: str, cpu: bool = False, turns: bool = False) -> tuple[float, float]:
        """(max, mean) over ranks of `per_rank`."""
        v = self.per_rank(name, cpu, turns)
        return max(v), sum(v) / len(v)

    def ledger_bytes(self) -> dict[str, float]:
        """Bytes per axis one rank moved in an epoch (the maximum over ranks; all ranks of a grid
        issue the same collectives, so they agree)."""
        out = {a: 0.0 for a in AXES}
        for r in self.ranks:
            per = {a: 0.0 for a in AXES}
            for key, v in r["epochs"][-1]["bytes"].items():
                per[key.split(":")[0]] += v
            for a in AXES:
                out[a] = max(out[a], per[a])
        return out

    def ledger_table(self) -> dict[str, float]:
        """{"axis:op": bytes} of rank 0's last epoch."""
        return dict(self.ranks[0]["epochs"][-1]["bytes"])

    def nnz_imbalance(self) -> float:
        """max/mean over ranks of the non-zeros a rank multiplies by (all its blocks)."""
        tot = [sum(r["nnz"].values()) for r in self.ranks]
        mean = sum(tot) / len(tot)
        return max(tot) / mean if mean else 1.0

    def summary(self) -> dict[str, Any]:
        """A JSON-ready record (per-rank data included)."""
        return {"grid": grid_text(self.dims), "world": self.world,
                "epoch_times": self.epoch_times(), "epoch_time": self.epoch_time(),
                "wall_s": self.wall_s, "opts": asdict(self.opts),
                "model": asdict(self.model_cfg) if self.model_cfg else None,
                "engine": asdict(self.engine_cfg) if self.engine_cfg else None,
                "ranks": [{k: v for k, v in r.items() if k != "profile"} for r in self.ranks]}


def rank_shards(bundle: Bundle, dims: Sequence[int], model_cfg: Any, perm: Any,
                seed: int) -> Iterator[Any]:
    """Each rank's `RankShard` of grid ``dims`` in rank order, for the GCN of ``model_cfg`` and the
    node permutation ``perm`` (from `plexus.partitioners.make_permutation`), one at a time."""
    from plexus.partitioners import shard_graph

    g = bundle.graph
    dims = tuple(dims)
    orders = model_cfg.orders(g.num_features, g.num_classes)
    for r in range(dims[0] * dims[1] * dims[2]):
        yield shard_graph(g, dict(zip(AXES, dims)), rank_coords(r, dims), model_cfg.num_layers,
                          orders, perm, seed, bundle.adj_hat)


def add_grid_options(p: Any, world_sizes: str, grids_help: str = "") -> None:
    """--spec, --root, --grids and --world-sizes (default ``world_sizes``) of the grid
    benchmarks; `selected_grids` reads them."""
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"dataset spec (default {DEFAULT_SPEC})")
    p.add_argument("--root", help="dataset root for file-based specs")
    p.add_argument("--grids", help="comma-separated XxYxZ grids (default: every factorization "
                                   f"of --world-sizes){grids_help}")
    p.add_argument("--world-sizes", default=world_sizes,
                   help=f"world sizes whose every factorization is run (default {world_sizes})")


def selected_grids(args: Any, p: Any) -> list[tuple[int, int, int]]:
    """The grids of `add_grid_options`' --grids, or else every factorization of --world-sizes,
    without repeats; a bad value is reported by parser ``p``."""
    try:
        grids = parse_grids(args.grids) if args.grids else \
            grids_of(int(w) for w in args.world_sizes.split(","))
    except ValueError as e:
        p.error(str(e))
    return list(dict.fromkeys(grids))


def run_jobs(bundle: Bundle, jobs: Sequence[Job], opts: RunOptions | None = None,
             timeout: float = 3600) -> list[GridRun]:
    """Run every job in turn on one world of local gloo ranks (``opts.threads`` torch threads
    each); all jobs need the same world size X·Y·Z. Returns one `GridRun` per job.

    Starting a world costs seconds per rank, so the grids of one world size share one, and their
    epochs are interleaved (see `rank_worker`). The shards are cut here, once per job, and handed
    to the ranks through pickle files in a temporary folder: each rank loads only its own shard
    instead of regenerating the graph.
    """
    from plexus.config import EngineConfig
    from plexus.hostmem import huge_pages_env
    from plexus.localworld import run_world
    from plexus.partitioners import make_permutation

    opts = opts or RunOptions()
    jobs = [Job(tuple(int(d) for d in j.dims), j.model_cfg, j.engine_cfg or EngineConfig())
            for j in jobs]
    worlds = {j.world for j in jobs}
    if len(worlds) != 1:
        raise ValueError(f"run_jobs needs one world size, got {sorted(worlds)}")
    world = worlds.pop()
    perm = make_permutation(bundle.adj_hat, opts.perm, opts.seed, world)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plexus-bench-") as tmp:
        for k, job in enumerate(jobs):
            for r, shard in enumerate(rank_shards(bundle, job.dims, job.model_cfg, perm,
                                                  opts.seed)):
                with open(Path(tmp) / f"job{k}-rank{r}.pkl", "wb") as f:
                    pickle.dump(shard, f, protocol=pickle.HIGHEST_PROTOCOL)
                del shard
        huge = any(j.engine_cfg.huge_pages for j in jobs)  # as plexus-train's workers
        ranks = run_world(world, rank_worker, tmp, jobs, opts, timeout=timeout,
                          threads=opts.threads, env=huge_pages_env() if huge else None)
    wall = time.perf_counter() - start
    return [GridRun(j.dims, [r[k] for r in ranks], wall, j.model_cfg, j.engine_cfg, opts)
            for k, j in enumerate(jobs)]


def run_configs(bundle: Bundle, dims: Sequence[int], configs: Sequence[tuple[Any, Any]],
                opts: RunOptions | None = None, timeout: float = 3600) -> list[GridRun]:
    """`run_jobs` of several (ModelConfig, EngineConfig) on one grid."""
    return run_jobs(bundle, [Job(tuple(dims), m, e) for m, e in configs], opts, timeout)


def run_grid(bundle: Bundle, dims: Sequence[int], model_cfg: Any, engine_cfg: Any = None,
             opts: RunOptions | None = None, timeout: float = 3600) -> GridRun:
    """`run_jobs` of one configuration on one grid."""
    return run_jobs(bundle, [Job(tuple(dims), model_cfg, engine_cfg)], opts, timeout)[0]


def run_by_world(bundle: Bundle, jobs: Sequence[Job], opts: RunOptions | None = None,
                 log=None, timeout: float = 3600) -> list[GridRun]:
    """`run_jobs` for jobs of any world sizes: one world per size, smallest first; results in
    the order of ``jobs``."""
    by_world: dict[int, list[int]] = {}
    for k, j in enumerate(jobs):
        by_world.setdefault(j.dims[0] * j.dims[1] * j.dims[2], []).append(k)
    out: dict[int, GridRun] = {}
    for world in sorted(by_world):
        idx = by_world[world]
        if log:
            log(f"  world of {world} rank(s): {', '.join(grid_text(jobs[k].dims) for k in idx)}"
                f" (load {loadavg()}) ...")
        for k, run in zip(idx, run_jobs(bundle, [jobs[k] for k in idx], opts, timeout)):
            out[k] = run
    return [out[k] for k in range(len(jobs))]


def model_bytes(bundle: Bundle, model_cfg: Any, dims: Sequence[int],
                perm: str = "none") -> dict[str, float]:
    """Bytes per axis one rank moves in a training epoch, by `plexus.perfmodel.epoch_volume`."""
    from plexus.perfmodel import epoch_volume

    vol = epoch_volume(model_spec(bundle, model_cfg, perm), tuple(dims))
    return vol.per_axis("bytes")


def volumes_equal(a: Mapping[str, float], b: Mapping[str, float], rtol: float = 1e-9) -> bool:
    """Whether two per-axis byte counts agree (up to float summation order)."""
    return all(abs(a[k] - b[k]) <= rtol * max(abs(a[k]), abs(b[k]), 1.0) for k in AXES)
