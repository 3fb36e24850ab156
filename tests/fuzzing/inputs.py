"""Seeded fuzzing of every input file kind Plexus reads: npz, Matrix Market, edge lists, Planetoid
files, an OGB directory (raw CSVs and ogb's pickled caches), a shard store and a graph directory
(`plexus_datasets.diskgraph`); and of the Python API's graph inputs (kind ``api``,
`fuzzing.api`). The study folders of plexus-sweep and plexus-report have their cases in
`fuzzing.studies`, run by the same harness (`fuzzing.harness`).

`make_cases` writes small valid inputs (`fuzzing.samples`) and, from a seed, mutated copies of
them (`fuzzing.filecases`, `fuzzing.storecases`): bit flips, truncations, field and type edits,
size lies, crafted pickles whose payload would create a marker file, store files swapped or
altered along with their manifest. `run_one` loads a case exactly as the command lines do
(`plexus_datasets.load_dataset`, `plexus_partition.read_shard`, `plexus.load_pyg` for a
weights export); this module is the runner of `fuzzing.harness.run_cases` (``python -m
fuzzing.inputs --child``), which sorts the outcomes.

``tests/datasets/test_fuzz_inputs.py`` runs a bounded set in the test suite;
``benchmarks/fuzz_inputs.py`` a larger one. The readers of graph directories and exports
(`READER_KINDS`, size bombs included) also run one process per case (`run_cases_forked`), so
each case's peak RSS is its own: ``benchmarks/fuzz_readers.py`` holds it to `RSS_LIMIT_KB`.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from pathlib import Path

from plexus_partition.model.ops import KINDS as MODEL_KINDS

from .filecases import edgelist_case, mtx_case, npz_case, ogb_case, planetoid_case
from .harness import MARKER_NAME, Case, main
from .mutate import flip_bits
from .samples import write_bomb, write_export, write_store
from .storecases import export_case, graph_case, store_case

KINDS = ("npz", "mtx", "edgelist", "planetoid", "ogb", "store", "graph", "export", "api")
#: The readers' kinds whose every case runs in a process of its own, its peak RSS measured
READER_KINDS = ("graph", "export")
RSS_LIMIT_KB = 1 << 20  # 1 GiB: what one case of a reader may take at its peak


def make_cases(work: Path, seed: int, per_kind: int, kinds=KINDS,
               cora: Path | None = None, bomb_bytes: int = 1 << 30) -> list[Case]:
    """``per_kind`` mutated inputs of each kind under ``work`` (seeded), as `Case` records.

    ``cora`` is a directory holding the real ``ind.cora.*`` files, bit-flipped by some of the
    Planetoid cases; ``bomb_bytes``: what the exports' deflated size bomb inflates to.
    """
    rng = random.Random(seed)
    marker = work / MARKER_NAME
    cases: list[Case] = []
    base_store = work / "base-store"
    if "store" in kinds:
        write_store(base_store)
    bases: dict[str, Path] = {}
    if "export" in kinds:
        (work / "base-export").mkdir()
        for kind in MODEL_KINDS:
            bases[kind] = work / "base-export" / f"{kind}.pt"
            write_export(bases[kind], kind)
        bases["bomb"] = work / "base-export" / "bomb.pt"
        write_bomb(bases["bomb"], bases["gcn"], bomb_bytes)
    for kind in kinds:
        for i in range(per_kind):
            d = work / f"{kind}-{i:04d}"
            d.mkdir(parents=True)
            r = random.Random(rng.getrandbits(64))
            name = f"{kind}-{i:04d}"
            if kind == "npz":
                npz_case(d, r, marker)
                cases.append(Case(kind, name, f"npz:{d / 'g.npz'}"))
            elif kind == "mtx":
                mtx_case(d, r, marker)
                cases.append(Case(kind, name, f"mtx:{d / 'g.mtx'}"))
            elif kind == "edgelist":
                edgelist_case(d, r, marker)
                cases.append(Case(kind, name, f"edgelist:{d / 'g.txt'}"))
            elif kind == "planetoid":
                planetoid_case(d, r, marker, cora)
                sets = sorted(p.name[4:-2] for p in d.glob("ind.*.x"))
                cases.append(Case(kind, name, f"planetoid:{d}/ind.{sets[0] if sets else 'toy'}"))
            elif kind == "ogb":
                ogb_case(d, r, marker)
                cases.append(Case(kind, name, "ogbn-arxiv", root=str(d)))
            elif kind == "graph":
                graph_case(d, r, marker)
                cases.append(Case(kind, name, f"graph:{d / 'g'}"))
            elif kind == "export":
                export_case(d, r, bases)
                cases.append(Case(kind, name, str(d / "w.pt")))
            elif kind == "store":
                store_case(d, r, marker, base_store)
                cases.append(Case(kind, name, store=str(d / "s"),
                                  coords=r.choice(((0, 0, 0), (1, 0, 0)))))
            elif kind == "api":
                from .api import make_case  # noqa: PLC0415

                make_case(d / "case.pkl", r)
                cases.append(Case(kind, name, str(d / "case.pkl")))
    return cases


def cora_flip_cases(work: Path, cora: Path, count: int, seed: int) -> list[Case]:
    """``count`` copies of the real Cora files with one bit flipped in ``allx`` or ``tx`` (the
    flips that made scipy segfault in issue 16)."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        d = work / f"cora-{i:04d}"
        d.mkdir(parents=True)
        for f in cora.glob("ind.cora.*"):
            shutil.copy(f, d / f.name)
        target = d / f"ind.cora.{rng.choice(('allx', 'tx'))}"
        target.write_bytes(flip_bits(target.read_bytes(), rng, 1))
        cases.append(Case("planetoid", f"cora-{i:04d}", f"planetoid:{d}/ind.cora"))
    return cases


# ------------------------------------------------------------------------------- running them


def run_one(case: Case) -> tuple[str, str]:
    """(outcome, detail) of loading one case in this process (no ``signal``/``payload`` here)."""
    from plexus_datasets import DatasetError, gcn_normalize, load_dataset
    from plexus_partition import ShardStoreError, read_shard

    if case.kind == "api":
        return _run_api(case)
    if case.selftest == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.selftest == "payload":
        Path(case.spec).touch()
        return "ok", ""
    if case.kind == "export":
        return _run_export(case)
    try:
        if case.store is not None:
            x, y, z = case.coords
            read_shard(case.store, {"x": x, "y": y, "z": z}, shape={"x": 2, "y": 1, "z": 1},
                       num_stages=2, orders="agg")
        else:
            graph = load_dataset(case.spec, case.root)
            gcn_normalize(graph.adj, graph.directed)
    except (DatasetError, ShardStoreError) as e:
        msg = str(e)
        if "\n" in msg or not msg.strip():
            return "traceback", f"{type(e).__name__} message is not one line: {msg[:300]!r}"
        return "error", msg[:300]
    except Exception as e:  # noqa: BLE001 - anything untyped would be a traceback in the CLI
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


def _run_export(case: Case) -> tuple[str, str]:
    """`plexus.load_pyg` of a case: an `ExportError` on one line is the refusal; a model that
    loads must hold real weights (on the CPU, not "meta": never loaded)."""
    from plexus.api.export import ExportError, load_pyg  # noqa: PLC0415

    try:
        model = load_pyg(case.spec)
        tensors = list(model.state_dict().values())
        if any(t.device.type != "cpu" for t in tensors):
            return "traceback", "loaded a model whose weights are not on the CPU (never loaded)"
    except ExportError as e:
        msg = str(e)
        if "\n" in msg or not msg.strip():
            return "traceback", f"ExportError message is not one line: {msg[:300]!r}"
        return "error", msg[:300]
    except Exception as e:  # noqa: BLE001 - anything untyped would be a traceback
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


def _own_raise(error: BaseException) -> bool:
    """Whether ``error`` was raised by the project's own code (a deliberate check), not by a
    library it called (numpy, scipy, torch: an input that slipped past the checks)."""
    import plexus  # noqa: PLC0415
    import plexus_datasets  # noqa: PLC0415
    import plexus_partition  # noqa: PLC0415

    roots = {str(Path(m.__file__).resolve().parent) for m in (plexus, plexus_datasets,
                                                               plexus_partition)}
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and any(str(Path(last).resolve()).startswith(r + os.sep)
                                    for r in roots)


def _run_api(case: Case) -> tuple[str, str]:
    """An API call (`fuzzing.api`): a `ValueError` (`DatasetError` included) or
    `TypeError` raised by the project's own checks, on one line, is the typed refusal a
    library user gets; one escaping from numpy, scipy or torch is a ``traceback``."""
    from .api import run_case  # noqa: PLC0415

    try:
        run_case(Path(case.spec))
    except (ValueError, TypeError) as e:
        msg = str(e)
        if _own_raise(e) and msg.strip() and "\n" not in msg:
            return "error", f"{type(e).__name__}: {msg[:300]}"
        return "traceback", f"{type(e).__name__}: {' '.join(msg.split())[:300]}"
    except Exception as e:  # noqa: BLE001 - anything else is a bug
        return "traceback", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "ok", ""


if __name__ == "__main__":
    main(run_one)
