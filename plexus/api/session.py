"""Start a grid of local workers (`launch`) or join the job this process is in (`init`).

One launcher: `launch` runs the workers with `plexus.runtime.local.launch_local`, the same
elastic launcher as ``plexus-train``; under torchrun or srun it joins the job instead, so one
script runs both ways.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from plexus_partition.model.grid import GridShape
from plexus.engine.arguments import check_callable, check_kind, check_timeout
from plexus.engine.grid import Grid
from plexus_partition.launch.env import JobEnv, LaunchError, check_local_devices, detect_environment
from plexus_partition.launch.group import DEFAULT_TIMEOUT_S, init_process_group, prove_job
from plexus.runtime.local import LaunchInterrupted, free_port, launch_local



def init(grid: str | GridShape | tuple[int, int, int], timeout_s: float = DEFAULT_TIMEOUT_S
         ) -> Grid:
    """Join the job this process runs in and return its `Grid` of shape ``grid`` ("2x2x2").

    Uses the default process group when one exists (e.g. your own ``init_process_group``);
    otherwise joins the torchrun/SLURM job from the environment (gloo on CPUs, NCCL with
    ``cuda:LOCAL_RANK``). Raises `LaunchError` outside a launcher: use `launch` there.
    """
    shape = GridShape.of(grid)
    if dist.is_initialized():
        device = (torch.device("cuda", torch.cuda.current_device())
                  if dist.get_backend() == "nccl" else torch.device("cpu"))
        return Grid.create(shape, device, timeout_s)
    env = detect_environment()
    if env is None:
        raise LaunchError("not inside torchrun or srun: start local workers with "
                          "plexus.launch(fn, ..., grid=...)")
    shape.check_world(env.world_size, "the launcher started")
    device = init_process_group(env, timeout_s)
    # a port is no proof: every rank proves the job's secret, Plexus's version and the grid
    # before a tensor moves (a rank pointed at another user's job is refused in one line)
    from plexus import __version__  # noqa: PLC0415

    prove_job({"plexus": __version__, "grid": str(shape)},
              f"the job at {env.master_addr}:{env.master_port}", stage="grid")
    return Grid.create(shape, device, timeout_s)


def _run(fn: Callable[..., Any], grid: GridShape, timeout_s: float, args: tuple) -> Any:
    """One rank: join, call ``fn(grid, *args)``, leave."""
    handle = init(grid, timeout_s)
    try:
        return fn(handle, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _local_worker(fn: Callable[..., Any], grid: GridShape, timeout_s: float, args: tuple) -> Any:
    # the local launcher ties this worker's life to its own (plexus_partition.launch.lifeline)
    return _run(fn, grid, timeout_s, args)


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    names = {p.id for p in parts if isinstance(p, ast.Name)}
    texts = {p.value for p in parts if isinstance(p, ast.Constant)}
    return (names == {"__name__"} and texts == {"__main__"} and
        isinstance(node.test.ops[0], ast.Eq))


def unguarded_main_call() -> str | None:
    """``FILE:LINE`` where the script run as ``__main__`` reaches this call from its top level
    outside ``if __name__ == "__main__":`` (local workers import the script again: they would
    reach the call too), or None (guarded, or no script file: ``-c``, a notebook)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if not main_file or not str(main_file).endswith(".py"):
        return None
    lines = []
    frame = sys._getframe(1)  # noqa: SLF001 - the caller chain is what the question is about
    while frame is not None:
        if frame.f_globals.get("__name__") == "__main__" and frame.f_code.co_name == "<module>":
            lines.append(frame.f_lineno)
        frame = frame.f_back
    if not lines:
        return None
    try:
        tree = ast.parse(Path(main_file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    guarded = [(n.lineno, n.end_lineno or n.lineno) for n in tree.body if _is_main_guard(n)]
    for line in lines:
        if not any(lo <= line <= hi for lo, hi in guarded):
            return f"{main_file}:{line}"
    return None


def launch(fn: Callable[..., Any], *args: Any, grid: str | GridShape = "1x1x1",
           timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """Run ``fn(grid, *args)`` on every rank of an X×Y×Z grid; ``grid`` is a `Grid`.

    Outside a launcher this starts X·Y·Z local workers (gloo on CPUs, one GPU each with CUDA;
    a 1x1x1 grid runs in this process) and returns what ``fn`` returned on rank 0. Under
    torchrun or srun this process joins the job as one rank and returns what ``fn`` returned
    here. ``fn`` and ``args`` must be picklable (a module-level function; in a script, guard the
    call with ``if __name__ == "__main__":``; without it the script ends at the call with one
    line saying so, before anything starts, since every worker would import the script and
    launch again). A worker that fails ends the job: `plexus.runtime.local.LocalJobFailed` names
    the rank and the cause.
    """
    where = unguarded_main_call()
    if where is not None:
        raise SystemExit(f"plexus.launch: error: called at the top level of {where} without "
                         "if __name__ == \"__main__\": (each worker imports the script and "
                         "would launch again); put the call under that guard")
    return run_grid(fn, *args, grid=grid, timeout_s=timeout_s)


def run_grid(fn: Callable[..., Any], *args: Any, grid: str | GridShape = "1x1x1",
             timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """`launch` without its check of the calling script: for a tool's own module (such as
    ``plexus-train --task link``), which workers import without launching again."""
    check_callable(fn, "plexus.launch")
    check_kind(grid, (str, GridShape), "plexus.launch", "grid (\"XxYxZ\" or a GridShape)")
    timeout_s = check_timeout(timeout_s, "plexus.launch")
    shape = GridShape.of(grid)
    if detect_environment() is not None or dist.is_initialized():
        return _run(fn, shape, timeout_s, args)
    check_local_devices(shape.world_size)
    if shape.world_size == 1:
        env = JobEnv("single", 0, 1, 0, 1, "127.0.0.1", free_port())
        device = init_process_group(env, timeout_s)
        try:
            return fn(Grid.create(shape, device, timeout_s), *args)
        finally:
            dist.destroy_process_group()
    try:
        return launch_local(shape.world_size, _local_worker, fn, shape, timeout_s, args)[0]
    except LaunchInterrupted as e:  # a signal: one line, no stack
        print(f"plexus: {e.message}", file=sys.stderr, flush=True)
        raise

