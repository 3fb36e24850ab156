"""`load_dataset`: one spec string (``cora``, ``ogbn-arxiv``, ``npz:PATH``, ``rmat:scale=20``, ...)
chooses the loader."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

from .edgelist import load_edgelist
from .errors import DatasetError
from .files import file_sha256
from .graph import Graph, row_normalize
from .mtx import load_mtx
from .npz import load_npz
from .planetoid import PLANETOID_NAMES, find_planetoid_dir, load_planetoid
from .rmat import parse_rmat_params, rmat_graph

OGB_SPECS = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-proteins")
SPEC_FORMS = ("cora", "citeseer", "pubmed", "planetoid:DIR_OR_NAME", *OGB_SPECS, "npz:PATH",
              "mtx:PATH", "edgelist:PATH", "graph:DIR",
              "rmat[:scale=S,edge_factor=E,features=F,classes=C,seed=K]")


def spec_path(text: str, root: str | None, spec: str) -> Path:
    """A file path from a spec; relative paths not found as given are tried under ``root``."""
    if not text:
        raise DatasetError(f"{spec}: missing path after ':'")
    path = Path(text).expanduser()
    if not path.exists() and root is not None and not path.is_absolute():
        under_root = Path(root).expanduser() / path
        if under_root.exists():
            return under_root
    return path


def spec_paths(spec: str, root: str | None = None) -> list[Path]:
    """The files and directories the graph a spec names is read from (none for a synthetic
    graph): what a cache keyed by the source must watch for changes. A directory stands for
    everything under it; a path that does not exist stands for the files beside it that start
    with its name (a Planetoid prefix ``DIR/ind.<name>``)."""
    spec = spec.strip()
    kind, colon, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "rmat":
        return []
    name = rest.strip().lower() if kind == "planetoid" else kind
    if colon and name not in PLANETOID_NAMES:
        return [spec_path(rest.strip(), root, spec)]
    if name in PLANETOID_NAMES:
        return [find_planetoid_dir(name, root) / f"ind.{name}"]
    if kind.startswith("ogbn-") and root is not None:
        return [Path(root).expanduser() / spec.replace("-", "_")]  # ogb's directory name
    return [] if root is None else [Path(root).expanduser()]


#: Formats read from the one file a spec names (``npz:PATH``...): keyed by the file's content
FILE_FORMATS = ("npz", "mtx", "edgelist")


def content_key(spec: str, root: str | None = None) -> list[str] | None:
    """``[format, sha256 of the file]`` for a spec of `FILE_FORMATS`: what names its graph in a
    cache wherever the file lies and whatever it is called (a copy of a file is the same graph,
    a file named cora.npz is not the embedded Cora); None for other specs. Raises `OSError`
    when the file cannot be read."""
    kind, colon, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if not colon or kind not in FILE_FORMATS:
        return None
    return [kind, file_sha256(spec_path(rest.strip(), root, spec))]


#: The most files a source may hold for `source_fingerprint` to watch them
MAX_SOURCE_FILES = 100_000


def source_fingerprint(paths: list[Path], limit: int = MAX_SOURCE_FILES) -> list[list]:
    """(path, size, modification time in ns) of every file under ``paths`` (`spec_paths`),
    sorted: what changes when a source's files change (the key of the cache's stores and of a
    resumable partition's work). A path that does not exist stands for the files beside it
    whose names start with its name. Raises `DatasetError` past ``limit`` files and `OSError`
    for a file that cannot be inspected."""
    found: list[list] = []
    for path in paths:
        path = path.resolve()
        for f in _files_under(path):
            if len(found) >= limit:
                raise DatasetError(f"{path}: more than {limit} files to watch for changes")
            st = f.stat()
            found.append([str(f), st.st_size, st.st_mtime_ns])
    return sorted(found)


def _files_under(path: Path) -> Iterator[Path]:
    """The files `spec_paths`' ``path`` stands for: itself, everything under a directory, or
    the files beside it that start with its name (a path that does not exist)."""
    if path.is_dir():
        yield from (p for p in path.rglob("*") if p.is_file())
    elif path.exists():
        yield path
    else:
        parent = path.parent
        yield from (p for p in (parent.iterdir() if parent.is_dir() else ())
                    if p.name.startswith(path.name) and p.is_file())


def spec_files(spec: str, root: str | None = None, limit: int = MAX_SOURCE_FILES) -> list[Path]:
    """Every existing file the graph ``spec`` names is read from (`spec_paths`, directories and
    prefixes expanded; at most ``limit``): the inputs no output of a run may overwrite, whatever
    the format. Empty for a spec that names no files or cannot be resolved (its loader says
    why)."""
    try:
        paths = spec_paths(spec, root)
    except DatasetError:
        return []
    found: list[Path] = []
    for path in paths:
        for f in _files_under(path):
            if len(found) >= limit:
                return found
            found.append(f)
    return found


#: How node features are scaled (``--features``): "auto", the format's published convention
#: (row for Planetoid's bag of words, as Kipf & Welling and PyG's examples; the files' values for
#: every other format), "raw" (the files' values, or the seeded stand-ins), "row" (unit L1 norm
#: per node, `plexus_datasets.graph.row_normalize`)
FEATURE_MODES = ("auto", "raw", "row")


def feature_mode(spec: str, features: str = "auto") -> str:
    """"raw" or "row": what ``features`` (one of `FEATURE_MODES`) means for the graph ``spec``
    names; `DatasetError` for another mode."""
    if features not in FEATURE_MODES:
        raise DatasetError(f"features {features!r}: use one of {', '.join(FEATURE_MODES)}")
    if features != "auto":
        return features
    kind, colon, _ = spec.strip().partition(":")
    kind = kind.strip().lower()
    planetoid = kind == "planetoid" if colon else kind in PLANETOID_NAMES
    return "row" if planetoid else "raw"


def load_dataset(spec: str, root: str | None = None, seed: int = 0,
                 features: str = "auto") -> Graph:
    """The graph a spec names (`read_dataset`) with its features scaled as ``features`` says
    (`FEATURE_MODES`; the default, "auto", is each format's convention: Planetoid's rows sum to
    1, every other format's values are kept). `DatasetError` (one line) for a spec that is not
    a string."""
    if not isinstance(spec, str):
        raise DatasetError(f"a dataset spec is a string such as \"cora\" or \"graph:DIR\", "
                           f"got {type(spec).__name__} {str(spec)[:40]}")
    mode = feature_mode(spec, features)
    graph = read_dataset(spec, root, seed, row_planetoid=mode == "row")
    kind = spec.strip().partition(":")[0].strip().lower()
    if mode == "row" and kind not in PLANETOID_NAMES and kind != "planetoid":
        graph = dataclasses.replace(graph, features=row_normalize(graph.features), notes=[
            *graph.notes, "features row-normalized (unit L1 norm per node, --features row)"])
    return graph


def read_dataset(spec: str, root: str | None = None, seed: int = 0,
                 row_planetoid: bool = True) -> Graph:
    """Load the graph a spec names; the result has passed `Graph.validate`.

    Specs: ``cora`` (shipped with the package), ``citeseer``, ``pubmed`` (``ind.<name>.*`` under
    ``root``), ``planetoid:DIR_OR_NAME``, ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``,
    ``ogbn-proteins`` (OGB layout under ``root``, never downloaded), ``npz:PATH`` (gnn-benchmark),
    ``mtx:PATH`` (Matrix Market), ``edgelist:PATH`` (SNAP), ``graph:DIR`` (a graph directory,
    `plexus_datasets.diskgraph`), ``rmat:scale=S,edge_factor=E,features=F,classes=C,seed=K`` (all
    keys optional). ``seed`` drives synthetic graphs and the stand-in features, labels and splits of
    formats that lack them; official splits are never reseeded. Raises `DatasetError` (one line) for
    an unknown spec or bad input.
    """
    spec = spec.strip()
    kind, colon, rest = spec.partition(":")
    kind = kind.strip().lower()
    if not colon:
        if kind in PLANETOID_NAMES:
            return load_planetoid(kind, root, row_planetoid)
        if kind.startswith("ogbn-"):
            from .ogb_loader import load_ogb  # imports torch/ogb/pandas: only when needed

            return load_ogb(spec, root)
        if kind == "rmat":
            return rmat_graph(**parse_rmat_params("", seed))
    elif kind == "planetoid":
        if rest.lower() in PLANETOID_NAMES:
            return load_planetoid(rest, root, row_planetoid)
        return load_planetoid(str(spec_path(rest, root, spec)), row_normalized=row_planetoid)
    elif kind == "npz":
        return load_npz(spec_path(rest, root, spec), seed)
    elif kind == "mtx":
        return load_mtx(spec_path(rest, root, spec), seed)
    elif kind == "edgelist":
        return load_edgelist(spec_path(rest, root, spec), seed)
    elif kind == "rmat":
        return rmat_graph(**parse_rmat_params(rest, seed))
    elif kind == "graph":
        from .diskgraph import load_disk_graph  # noqa: PLC0415

        return load_disk_graph(spec_path(rest, root, spec))
    raise DatasetError(f"unknown dataset spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")
