"""Any dataset spec to a graph directory (`plexus_datasets.diskgraph`), in pieces where it counts.

- ``rmat:...``: generated straight into the directory (`rmat_stream.rmat_to_disk`), any scale;
- ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``: streamed from OGB's raw files
  (`ogb_raw.ogb_to_disk`); ``ogbn-proteins`` (132k nodes, multi-label) is loaded in memory
  (a graph directory holds one class per node);
- ``graph:PATH``: already one (opened and checked);
- every other spec (Planetoid, npz, mtx, edge lists: formats small enough to load): loaded in
  memory and written out (`diskwrite.write_graph`).
"""

from __future__ import annotations

from pathlib import Path

from .canonical import BUCKET_ENTRIES, CHUNK_EDGES
from .diskgraph import DiskGraph, is_disk_graph
from .diskwrite import write_graph
from .errors import DatasetError
from .rmat import parse_rmat_params
from .spec import OGB_SPECS, load_dataset, spec_path

#: OGB datasets converted in pieces (`ogb_raw`); the others of `OGB_SPECS` load in memory
OGB_STREAMED = tuple(s for s in OGB_SPECS if s != "ogbn-proteins")
from .work import Runner


def streamed_spec(spec: str) -> bool:
    """Whether ``spec`` is converted in pieces (R-MAT, OGB, a graph directory), rather than
    loaded in memory first."""
    kind = spec.strip().partition(":")[0].strip().lower()
    return kind in ("rmat", "graph") or kind in (s.lower() for s in OGB_STREAMED)


def convert_dataset(spec: str, out: str | Path, runner: Runner, work: str | Path, *,
                    root: str | None = None, seed: int = 0, chunk_edges: int = CHUNK_EDGES,
                    bucket_entries: int = BUCKET_ENTRIES,
                    feature_dtype: str | None = None) -> DiskGraph:
    """The graph ``spec`` names (as `load_dataset` reads it, ``root`` and ``seed`` alike) as the
    graph directory ``out``; ``work`` holds the converter's scratch files (a rerun resumes an
    interrupted R-MAT generation from there). ``graph:PATH`` returns PATH itself, opened."""
    spec = spec.strip()
    kind, colon, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "graph":
        return DiskGraph.open(spec_path(rest, root, spec))
    if kind == "rmat":
        from .rmat_stream import rmat_to_disk  # noqa: PLC0415

        return rmat_to_disk(parse_rmat_params(rest, seed), out, runner, work,
                            chunk_edges=chunk_edges, bucket_entries=bucket_entries,
                            feature_dtype=feature_dtype or "float32")
    if not colon and kind in (s.lower() for s in OGB_STREAMED):
        if root is None:
            raise DatasetError(f"{spec}: needs a root directory holding "
                               f"{spec.replace('-', '_')}/ (OGB datasets are never downloaded "
                               "here)")
        runner.once("convert", _ogb, spec, root, str(out), chunk_edges, feature_dtype)
        return DiskGraph.open(out)
    runner.once("convert", _in_memory, spec, root, seed, str(out), feature_dtype)
    return DiskGraph.open(out)


def _ogb(spec: str, root: str, out: str, chunk_edges: int, feature_dtype: str | None) -> dict:
    from .ogb_raw import ogb_to_disk  # noqa: PLC0415

    if not is_disk_graph(out):
        ogb_to_disk(spec, root, out, chunk_edges=chunk_edges, feature_dtype=feature_dtype)
    return {}


def _in_memory(spec: str, root: str | None, seed: int, out: str,
               feature_dtype: str | None) -> dict:
    write_graph(load_dataset(spec, root, seed), out, feature_dtype or "float32")
    return {}
