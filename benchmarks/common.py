"""What the benchmark scripts share: paths, dataset specs, command-line options.

The measurement machinery lives in the package (so that tests use it without importing a
benchmark script): `plexus.testing.gridrun` (timed training runs on local gloo worlds, built with
the engine's own builder) and `plexus.bench.output` (atomic CSV/JSON/PNG writers, statistics).
This module re-exports what the scripts use from there.

Scripts import this as ``benchmarks.common`` (the repository root is put on ``sys.path`` by
`repo_on_path`); spawned ranks find it the same way, as spawn passes the parent's ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from plexus_partition.model.grid import AXES, GridShape  # noqa: F401 (AXES: for the scripts)
from plexus.testing.gridrun import (Bundle, GridRun, Job, RunOptions,  # noqa: F401
                                    load_bundle, model_bytes, model_spec, rank_shards,
                                    rank_worker, run_by_world, run_configs, run_grid, run_jobs,
                                    volumes_equal)
from plexus.bench.output import (Tee, format_table, loadavg, machine_info, median,  # noqa: F401
                                   pyplot, ranks_of, save_figure, spearman, spread, write_csv,
                                   write_json, write_text)
from plexus.testing.turns import COMPUTE, Turns, timers_class  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "benchmarks" / "out"
DEFAULT_SPEC = "rmat:scale=17,edge_factor=16,features=128,classes=16,seed=0"
SMOKE_SPEC = "rmat:scale=9,edge_factor=4,features=16,classes=4,seed=0"


def repo_on_path() -> None:
    """Make ``benchmarks.common`` and the in-tree ``plexus`` importable when a script is run as
    ``python benchmarks/NAME.py`` (sys.path[0] is then benchmarks/, not the repository root)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def fmt_bytes(b: float) -> str:
    """Bytes in MiB with 2 decimals (the scale of the volumes here)."""
    return f"{b / 2**20:.2f} MiB"


def add_training_options(p: Any, epochs: int, perm_help: str = "node permutation") -> None:
    """The model and timing options the grid benchmarks share (argparse parser ``p``)."""
    p.add_argument("--model", default="gcn", help="model kind: gcn, sage, gin, gat, mlp "
                                                    "(default gcn)")
    p.add_argument("--layers", type=int, default=3, help="GNN layers (default 3)")
    p.add_argument("--hidden", type=int, default=128, help="hidden width (default 128; GAT: "
                                                           "per head)")
    p.add_argument("--heads", type=int, default=1, help="GAT: heads of hidden layers")
    p.add_argument("--attn-dropout", type=float, default=0.0, help="GAT: attention dropout")
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
    from plexus.engine.config import ModelConfig  # noqa: PLC0415

    cfg = ModelConfig(num_layers=args.layers, hidden=args.hidden, dropout=args.dropout,
                      order=args.order, kind=args.model, heads=args.heads,
                      attn_dropout=args.attn_dropout)
    try:
        return cfg, engine_config(args.backend, args.engine)
    except ValueError as e:
        p.error(str(e))
        raise  # unreachable: p.error exits


def grid_text(dims: Sequence[int]) -> str:
    return str(GridShape.of(dims))


def parse_grids(text: str) -> list[tuple[int, int, int]]:
    """"1x1x1,2x1x1" -> [(1, 1, 1), (2, 1, 1)]."""
    return [GridShape.parse(t).dims for t in text.split(",") if t.strip()]


def grids_of(world_sizes: Iterable[int]) -> list[tuple[int, int, int]]:
    """Every ordered factorization X·Y·Z of each world size."""
    from plexus.perfmodel import factorizations

    return [g for w in world_sizes for g in factorizations(w)]


def engine_config(backend: str = "torch", options: str = "") -> Any:
    """`plexus.engine.config.EngineConfig` with ``spmm_backend=backend`` and the comma-separated
    ``key=value`` fields of ``options`` (e.g. "agg_chunks=4,overlap=1,tune_gemms=1"); values are
    converted to the field's type. Raises ValueError naming a bad key or value."""
    import dataclasses

    from plexus.engine.config import EngineConfig

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


def write_lines(lines: list[str], out: Path, start: float) -> None:
    """Print ``lines`` with a last line of the seconds since ``start`` and write them to
    ``out`` (its folder made)."""
    import time  # noqa: PLC0415

    text = "\n".join(lines + [f"# {time.time() - start:.0f} s"])
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


def write_results(out: Path, name: str, csv_rows: list[dict], say: Tee) -> None:
    """``out/NAME.csv`` (the rows) and ``out/NAME.txt`` (what ``say`` printed), then a line
    naming them."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{name}.csv", csv_rows)
    write_text(out / f"{name}.txt", say.text())
    say(f"wrote {out / name}.csv and .txt")
