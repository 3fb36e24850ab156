"""``plexus-bench calibrate --device cuda``: a GPU's rates and its cluster's links, in the
calibration file format (`plexus.perfmodel.calibration`).

Compute is timed with CUDA events (`cuda_timer`: a warm-up call, then the median of events
around each call, no host clock) on the shapes the model prices: cuSPARSE CSR SpMM of a random
scattered matrix at the widths of a layer, tall-skinny GEMMs, one elementwise pass, and the
dropout-mask pass of the step (the engine's fused kernel, handed in by ``plexus-bench``, as this
package may not import the engine), in float32 and in bf16 (the file's ``precisions``).

Links are NCCL all-reduce and all-gather timings fitted to the ring model (`fit_alpha_beta`) per
link class present: "intra" among the GPUs of one node (NVLink or PCIe), "inter" among ranks
with the same local rank on different nodes (the network, every GPU's NIC busy at once, as a
cross-node grid axis is). Under torchrun or srun every rank joins; alone on a node with several
GPUs the command starts one rank per GPU itself; on one GPU there is no link to time.
"""

from __future__ import annotations

import platform
import statistics
import warnings
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import numpy as np

from plexus_partition.model.ops.base import FUSED_DROPOUT_PASSES

from .calibration import FORMAT_VERSION, LINK_CLASSES
from .measure import fit_alpha_beta

#: timer(fn, reps) -> median seconds of one call of fn (tests inject a fake one)
Timer = Callable[[Callable[[], object], int], float]
#: mask_pass(x) -> the step's dropout of x (the engine's fused kernel on a GPU)
MaskPass = Callable[[Any], object]
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def cuda_timer(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``fn`` between CUDA events, after one warm-up call."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _csr(num_nodes: int, nnz_per_row: int, device: Any, dtype: Any, seed: int = 0) -> Any:
    import torch

    rng = np.random.default_rng(seed)
    nnz = num_nodes * nnz_per_row
    crow = torch.arange(0, nnz + 1, nnz_per_row, dtype=torch.int32)
    col = np.sort(rng.integers(0, num_nodes, size=(num_nodes, nnz_per_row)), axis=1).ravel()
    with warnings.catch_warnings():  # "CSR support is in beta": noise for a benchmark
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, torch.from_numpy(col.astype(np.int32)),
                                       torch.rand(nnz, dtype=dtype), size=(num_nodes, num_nodes),
                                       check_invariants=False).to(device)


def measure_compute(device: Any, dtype_name: str, timer: Timer, quick: bool = False,
                    mask_pass: MaskPass | None = None) -> dict[str, Any]:
    """The rates of one precision on ``device``: SpMM (2·nnz·width flops), GEMM (2·m·k·n),
    elementwise (element passes: a scale-by-constant pass, and the step's dropout mask when
    ``mask_pass`` is given, priced as `FUSED_DROPOUT_PASSES` passes). Returns the rates (the
    median over shapes) and every record."""
    import torch

    dtype = getattr(torch, DTYPES[dtype_name])
    reps = 3 if quick else 20
    n = 4_096 if quick else 1 << 20
    a = _csr(n, 16, device, dtype)
    spmm = []
    for width in ((16, 64) if quick else (16, 64, 128, 256)):
        x = torch.randn(n, width, device=device, dtype=dtype)
        seconds = timer(lambda: torch.sparse.mm(a, x), reps)
        spmm.append({"nnz": n * 16, "width": width, "seconds": seconds,
                     "flops": 2.0 * n * 16 * width / seconds})
    gemm = []
    shapes = ((1_024, 64, 64),) if quick else ((1 << 20, 128, 128), (1 << 20, 256, 256),
                                              (1 << 20, 128, 16), (1 << 18, 256, 128))
    for m, k, nn in shapes:
        x, w = (torch.randn(m, k, device=device, dtype=dtype),
                torch.randn(k, nn, device=device, dtype=dtype))
        seconds = timer(lambda: torch.mm(x, w), reps)
        gemm.append({"m": m, "k": k, "n": nn, "seconds": seconds,
                     "flops": 2.0 * m * k * nn / seconds})
    rows, cols = (1_024, 64) if quick else (1 << 20, 128)
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    out = torch.empty_like(x)
    seconds = timer(lambda: torch.mul(x, 2.0, out=out), reps)
    elementwise = [{"op": "scale", "elements": rows * cols, "passes": rows * cols,
                    "seconds": seconds, "rate": rows * cols / seconds}]
    if mask_pass is not None:
        seconds = timer(lambda: mask_pass(x), reps)
        passes = FUSED_DROPOUT_PASSES * rows * cols
        elementwise.append({"op": "dropout_mask", "elements": rows * cols, "passes": passes,
                            "seconds": seconds, "rate": passes / seconds})
    return {"spmm_flops": statistics.median(r["flops"] for r in spmm),
            "gemm_flops": statistics.median(r["flops"] for r in gemm),
            "elementwise_rate": statistics.median(r["rate"] for r in elementwise),
            "measurements": {"spmm": spmm, "gemm": gemm, "elementwise": elementwise}}


def link_groups(world: int, local_world: int) -> dict[str, list[list[int]]]:
    """The rank groups each link class is timed on, for ``world`` ranks numbered node by node
    with ``local_world`` per node: "intra", each node's ranks (when a node has two or more);
    "inter", the ranks of one local rank across the nodes (when there are two or more)."""
    nodes = world // local_world
    out: dict[str, list[list[int]]] = {}
    if local_world > 1:
        out["intra"] = [list(range(k * local_world, (k + 1) * local_world)) for k in range(nodes)]
    if nodes > 1:
        out["inter"] = [list(range(r, world, local_world)) for r in range(local_world)]
    return out


def time_links(local_world: int, sizes: Sequence[int], reps: int,
               timer: Timer) -> dict[str, list[dict[str, Any]]]:
    """On every rank of the current NCCL (or gloo) world: time all-reduce and all-gather of
    each per-rank size on every link class's groups at once (`link_groups`; each group's
    collectives in its own process group). Returns {class: records of op, world (the group's
    size), elements, seconds}, the slowest rank's time."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
        else torch.device("cpu"))
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    out: dict[str, list[dict[str, Any]]] = {}
    for cls, groups in link_groups(world, local_world).items():
        handles = [dist.new_group(g) for g in groups]  # every rank creates every group
        mine = next(h for g, h in zip(groups, handles) if rank in g)
        p = len(groups[0])
        records = []
        for n in sizes:
            x = torch.ones(n, device=device)
            buf = torch.empty(n * p, device=device)
            ops = {"all_reduce": lambda: dist.all_reduce(x, group=mine),
                   "all_gather": lambda: gather(buf, x, group=mine)}
            for op, fn in ops.items():
                dist.barrier()
                seconds = torch.tensor([timer(fn, reps)], dtype=torch.float64, device=device)
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
                records.append({"op": op, "world": p, "elements": n * p if op == "all_gather"
                                else n, "seconds": float(seconds)})
        out[cls] = records
    return out


def fit_links(timed: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """{class: {"alpha", "beta"}} fitted to each class's records (`fit_alpha_beta`)."""
    out = {}
    for cls in LINK_CLASSES:
        if timed.get(cls):
            alpha, beta = fit_alpha_beta(timed[cls])
            out[cls] = {"alpha": alpha, "beta": beta}
    return out


def cuda_document(compute: dict[str, dict[str, Any]], timed: dict[str, list[dict[str, Any]]],
                  gpu: str, memory: float, world: int, local_world: int,
                  torch_version: str) -> dict[str, Any]:
    """The calibration file of a GPU cluster: fp32 rates at the top, bf16's under
    ``precisions``, the links fitted per class (``alpha``/``beta``: the slowest class's pair,
    what a file read without placement prices every link with)."""
    fp32, bf16 = compute["fp32"], compute.get("bf16")
    links = fit_links(timed)
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "machine": platform.machine(), "torch": torch_version,
        "device": "cuda", "gpu": gpu, "device_memory": memory,
        "gpus_per_node": local_world, "nodes": world // local_world,
        "spmm_flops": fp32["spmm_flops"], "gemm_flops": fp32["gemm_flops"],
        "elementwise_rate": fp32["elementwise_rate"],
        "measurements": {"fp32": fp32["measurements"],
                         **({"bf16": bf16["measurements"]} if bf16 else {}),
                         "links": timed},
    }
    if bf16:
        doc["precisions"] = {"bf16": {k: bf16[k] for k in ("spmm_flops", "gemm_flops",
                                                            "elementwise_rate")}}
    if links:
        doc["links"] = links
        slowest = links.get("inter") or links["intra"]
        doc["alpha"], doc["beta"] = slowest["alpha"], slowest["beta"]
        doc["backend"] = "nccl"
    else:
        doc["note"] = "one GPU: no link to time; a multi-GPU grid needs a calibration of a node"
    return doc


LINK_SIZES = (1, 4_096, 65_536, 1 << 20, 1 << 24)
QUICK_LINK_SIZES = (1, 4_096, 65_536)


def _rank_links(local_world: int, sizes: Sequence[int], reps: int) -> dict[str, list]:
    """`time_links` with CUDA events, on one rank of a world `run_world` started."""
    return time_links(local_world, sizes, reps, cuda_timer)


def calibrate_cuda(quick: bool = False, log: Callable[[str], None] | None = None,
                   mask_pass: MaskPass | None = None) -> dict[str, Any] | None:
    """Measure this GPU (fp32 and bf16) and the links of its job: under torchrun/srun every
    rank calls this and only rank 0 gets the document (the others None, as rank 0 writes the
    file); alone, one rank per local GPU is started for the "intra" class. Raises
    RuntimeError when CUDA is not available."""
    import torch

    from plexus_partition.launch.env import detect_environment  # noqa: PLC0415
    from plexus.runtime.world import run_world  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device here; calibrate on a GPU node")
    say = log or (lambda _msg: None)
    env = detect_environment()
    sizes, reps = (QUICK_LINK_SIZES, 5) if quick else (LINK_SIZES, 20)
    if env is not None:  # every rank of the launcher's world
        from plexus_partition.launch.group import init_process_group  # noqa: PLC0415

        init_process_group(env, 600.0, device="cuda")
        world, local_world = env.world_size, env.local_world_size
        say(f"NCCL links ({world} ranks, {local_world} per node) ...")
        timed = time_links(local_world, sizes, reps, cuda_timer)
        rank = env.rank
        torch.distributed.destroy_process_group()
        if rank != 0:
            return None
    else:
        world = local_world = torch.cuda.device_count()
        timed = {}
        if world > 1:
            say(f"NCCL links ({world} local GPUs) ...")
            timed = run_world(world, _rank_links, world, list(sizes), reps, backend="nccl",
                              timeout=600)[0]
    device = torch.device("cuda", torch.cuda.current_device())
    compute = {}
    for name in DTYPES:
        say(f"compute ({name}: SpMM, GEMM, elementwise, dropout mask) ...")
        try:
            compute[name] = measure_compute(device, name, cuda_timer, quick, mask_pass)
        except (RuntimeError, NotImplementedError) as e:  # a kernel this torch lacks in bf16
            if name == "fp32":
                raise
            say(f"  {name} not measured ({str(e).splitlines()[0][:120]}): priced at fp32's")
    props = torch.cuda.get_device_properties(device)
    return cuda_document(compute, timed, props.name, float(props.total_memory), world,
                         local_world, torch.__version__)
