"""Measured training runs on local gloo worlds, for benchmarks and their tests.

`run_jobs` cuts every rank's shard once, starts one world per world size
(`plexus.testing.localworld.run_world`) and has each rank build its model with the engine's own
builder (`plexus.engine.build.build_model`) and time training steps; `GridRun` reduces what the
ranks measured (per-epoch step times, per-timer wall and CPU seconds, ledger bytes).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from plexus_datasets.base import owned
from plexus_datasets.base import gate
from plexus_partition.model.grid import AXES, GridShape
from plexus.core.timing import loadavg, median

from .turns import Turns, timers_class


@dataclass
class Bundle:
    """A loaded graph with its normalized adjacency (computed once, shared by every run)."""

    spec: str
    graph: Any  # plexus_datasets.graph.Graph
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
    """Load the dataset ``spec`` (see `plexus_datasets.load_dataset`) and normalize it."""
    from plexus_datasets import load_dataset

    start = time.perf_counter()
    g = load_dataset(spec, root)
    adj_hat = g.normalized("gcn")
    return Bundle(spec, g, adj_hat, time.perf_counter() - start)


def model_spec(bundle: Bundle, cfg: Any, perm: str = "none") -> Any:
    """The `plexus.perfmodel.ModelSpec` of ``bundle`` with the model ``cfg`` (a ModelConfig)."""
    from plexus.perfmodel import ModelSpec

    g = bundle.graph
    return ModelSpec(g.num_nodes, bundle.nnz, g.num_features, g.num_classes, cfg, perm=perm,
                     name=bundle.spec)


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
    model_cfg: Any  # plexus.engine.config.ModelConfig
    engine_cfg: Any = None  # plexus.engine.config.EngineConfig; None: the defaults

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

    from plexus.engine.build import build_model
    from plexus.engine.config import TrainConfig
    from plexus.engine.grid import Grid
    from plexus.engine.trainer import Trainer

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
        model = build_model(grid, shard, job.model_cfg, opts.seed, job.engine_cfg, timers)
        ledger = model.comm.ledger
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
        return {"grid": str(GridShape.of(self.dims)), "world": self.world,
                "epoch_times": self.epoch_times(), "epoch_time": self.epoch_time(),
                "wall_s": self.wall_s, "opts": asdict(self.opts),
                "model": self.model_cfg.as_dict() if self.model_cfg else None,
                "engine": asdict(self.engine_cfg) if self.engine_cfg else None,
                "ranks": [{k: v for k, v in r.items() if k != "profile"} for r in self.ranks]}


def rank_shards(bundle: Bundle, dims: Sequence[int], model_cfg: Any, perm: Any,
                seed: int) -> Iterator[Any]:
    """Each rank's `RankShard` of grid ``dims`` in rank order, for the GCN of ``model_cfg`` and the
    node permutation ``perm`` (from `plexus_partition.make_permutation`), one at a time."""
    from plexus_partition import shard_graph

    g = bundle.graph
    dims = tuple(dims)
    orders = model_cfg.orders(g.num_features, g.num_classes)
    shape = GridShape.of(dims)
    for r in range(shape.world_size):
        adj_hat = bundle.adj_hat if model_cfg.aggregation == "gcn" else None
        yield shard_graph(g, shape, shape.coords(r), model_cfg.num_stages, orders, perm, seed,
                          adj_hat, aggregation=model_cfg.aggregation)


def run_jobs(bundle: Bundle, jobs: Sequence[Job], opts: RunOptions | None = None,
             timeout: float = 3600) -> list[GridRun]:
    """Run every job in turn on one world of local gloo ranks (``opts.threads`` torch threads
    each); all jobs need the same world size X·Y·Z. Returns one `GridRun` per job.

    Starting a world costs seconds per rank, so the grids of one world size share one, and their
    epochs are interleaved (see `rank_worker`). The shards are cut here, once per job, and handed
    to the ranks through pickle files in a temporary folder: each rank loads only its own shard
    instead of regenerating the graph.
    """
    from plexus.engine.config import EngineConfig
    from plexus_partition.launch.hostmem import huge_pages_env
    from plexus.testing.localworld import run_world
    from plexus_partition import make_permutation

    opts = opts or RunOptions()
    jobs = [Job(tuple(int(d) for d in j.dims), j.model_cfg, j.engine_cfg or EngineConfig())
            for j in jobs]
    worlds = {j.world for j in jobs}
    if len(worlds) != 1:
        raise ValueError(f"run_jobs needs one world size, got {sorted(worlds)}")
    world = worlds.pop()
    perm = make_permutation(bundle.adj_hat, opts.perm, opts.seed, world)
    start = time.perf_counter()
    with owned.scratch_dir("plexus-bench-") as tmp:
        for k, job in enumerate(jobs):
            for r, shard in enumerate(rank_shards(bundle, job.dims, job.model_cfg, perm,
                                                  opts.seed)):
                with gate.open_stream(Path(tmp) / f"job{k}-rank{r}.pkl", "wb") as f:
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
            grids = ", ".join(str(GridShape.of(jobs[k].dims)) for k in idx)
            log(f"  world of {world} rank(s): {grids}"
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
