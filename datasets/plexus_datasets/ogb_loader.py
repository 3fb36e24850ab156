"""OGB node-property-prediction graphs (ogbn-arxiv, ogbn-products, ogbn-papers100M,
ogbn-proteins), offline.

Loading goes through ``ogb.nodeproppred.NodePropPredDataset`` with the official split, from a
local root only. Before ogb is called we check that the files it would otherwise download (or ask
about on stdin) are there, so a missing dataset is a one-line `DatasetError`, never a download or
a prompt. Per-dataset facts (class count, whether inverse edges are added, file names) come from
ogb's own ``master.csv``.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from plexus_datasets.base.values import one_line
from plexus_datasets.base import gate

from .files import check_regular
from .errors import DatasetError, RootMissing
from .graph import Graph, edges_to_csr
from .inputs import task_labels
from .safepickle import load_torch_numpy
from .synthetic import DEFAULT_FEATURES, random_features
from .validate import check_coo, check_graph_size

OGB_NAMES = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-proteins")


def ogb_meta(name: str) -> dict[str, str]:
    """The ``master.csv`` column of an OGB node dataset (as strings), matched case-insensitively."""
    import pandas as pd
    import ogb.nodeproppred

    path = Path(ogb.nodeproppred.__file__).parent / "master.csv"
    master = pd.read_csv(path, index_col=0, keep_default_na=False)
    for column in master.columns:
        if column.lower() == name.lower():
            meta = {k: str(v) for k, v in master[column].items()}
            meta["name"] = column
            return meta
    raise DatasetError(f"{name}: not an OGB node dataset; known: {', '.join(master.columns)}")


def expected_ogb_files(meta: dict[str, str]) -> tuple[list[str], list[str]]:
    """(raw files, processed files) ogb reads for a dataset, relative to ``<root>/<dir name>``.

    ogb uses the processed cache when present and builds it from the raw files otherwise.
    """
    if meta["binary"] == "True":
        raw = ["raw/data.npz", "raw/node-label.npz"]
    else:
        raw = ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
               "raw/node-label.csv.gz"]
        if meta["has_node_attr"] == "True":
            raw.append("raw/node-feat.csv.gz")
        if meta["has_edge_attr"] == "True":
            raw.append("raw/edge-feat.csv.gz")
        for key in ("additional node files", "additional edge files"):
            if meta[key] != "None":
                raw += [f"raw/{f}.csv.gz" for f in meta[key].split(",")]
    return raw, ["processed/data_processed"]


def _split_files(meta: dict[str, str]) -> tuple[list[str], list[str]]:
    base = f"split/{meta['split']}"
    return [f"{base}/{p}.csv.gz" for p in ("train", "valid", "test")], [f"{base}/split_dict.pt"]


def _check_offline(name: str, root: Path, meta: dict[str, str]) -> Path:
    """Raise `DatasetError` unless ogb can load ``name`` from ``root`` without network or stdin."""
    ds_dir = root / name.replace("-", "_")
    raw, processed = expected_ogb_files(meta)
    split_csv, split_pt = _split_files(meta)
    release = ds_dir / f"RELEASE_v{meta['version']}.txt"
    if not ds_dir.is_dir():  # every file asked for below, the release marker included
        raise DatasetError(f"{ds_dir}: OGB dataset directory not found; expected it to hold "
                           f"{', '.join([release.name] + raw + split_csv)} "
                           f"(download {meta['url']}, "
                           f"unzip it in {root} "
                           f"and rename {meta['download_name']}/ to {ds_dir.name}/)")
    # ogb asks on stdin whether to re-download when the release marker is missing.
    if not release.is_file():
        raise DatasetError(f"{release}: missing (ogb would offer to re-download); create the empty "
                           f"file if {ds_dir} holds release v{meta['version']} of {name}")
    for group in ((processed, raw), (split_pt, split_csv)):
        if not any(all((ds_dir / f).is_file() for f in files) for files in group):
            missing = [f for f in group[1] if not (ds_dir / f).is_file()]
            raise DatasetError(f"{ds_dir}: missing {', '.join(missing)} (or {', '.join(group[0])})")
        for f in group[0] if all((ds_dir / f).is_file() for f in group[0]) else group[1]:
            check_regular(ds_dir / f)  # (is_file follows links: a link to a FIFO is one)
    if not all((ds_dir / f).is_file() for f in processed):
        _check_raw_csv(ds_dir, raw + split_csv)
    return ds_dir


def _check_raw_csv(ds_dir: Path, files: list[str]) -> None:
    """Bound the raw csv files ogb will parse whole with pandas, before it does: lines of at
    most `plexus_datasets.ogb_raw.MAX_CSV_LINE` bytes, at most one per node (labels,
    features, split ids) or per edge."""
    from .ogb_raw import check_csv_lines, csv_count  # noqa: PLC0415 - pandas, gzip

    counts = {name: csv_count(ds_dir / f"raw/{name}.csv.gz", name)
              for name in ("num-node-list", "num-edge-list")
              if f"raw/{name}.csv.gz" in files}
    n, e = counts.get("num-node-list"), counts.get("num-edge-list")
    for f in files:
        if not f.endswith(".csv.gz") or "num-" in f or not (ds_dir / f).is_file():
            continue
        per_node = f.startswith(("raw/node", "split/"))
        limit = (e if f.startswith("raw/edge") else n if per_node else
            None if n is None or e is None else max(n, e))
        check_csv_lines(ds_dir / f, limit)


def _read_cache(path: str, what: str) -> dict:
    """One of ogb's ``torch.save`` caches, read without running code.

    ogb 1.3.6 reads them with ``torch.load``: a full unpickler, so a crafted file under the
    user's ``--root`` would run code. ogb stores only numpy arrays and plain containers in
    them, which is all `load_torch_numpy` admits. A cache that does not hold what ogb writes
    there is an error naming the file (delete it: ogb rebuilds it from ``raw/``).
    """
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: not a regular file; remove it so that ogb rebuilds it "
                           "from raw/")
    try:
        loaded = load_torch_numpy(path)
    except Exception as e:  # noqa: BLE001 - refused type, truncated or not a zip, ...
        raise DatasetError(f"{path}: not a readable ogb {what} cache ({type(e).__name__}: "
                           f"{one_line(e)[:200]}); delete it to rebuild it from raw/") from None
    if not isinstance(loaded, dict):
        raise DatasetError(f"{path}: ogb {what} cache holds a {type(loaded).__name__}, not a "
                           "dict; delete it to rebuild it from raw/")
    return loaded


@contextlib.contextmanager
def _ogb_offline_and_quiet() -> Iterator[None]:
    """Silence ogb's prints and progress bars, and make any stdin prompt an error.

    `_check_offline` already rules prompts out; shadowing ``input`` in ogb's modules (restored on
    exit, nothing global) guarantees it even if a future ogb adds one.
    """
    import ogb.nodeproppred.dataset as ds_mod
    import ogb.utils.url as url_mod

    def no_prompt(prompt: str = "") -> str:
        raise DatasetError(f"ogb wanted to ask {one_line(prompt)!r}; refusing (offline loader)")

    modules = (ds_mod, url_mod)
    saved = [m.__dict__.get("input") for m in modules]
    for m in modules:
        m.input = no_prompt
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for m, old in zip(modules, saved):
            if old is None:
                del m.input
            else:
                m.input = old


def _dataset_class():
    """NodePropPredDataset with ogb's two ``torch.load`` calls routed to `_read_cache`."""
    from ogb.nodeproppred import NodePropPredDataset

    class OfflineNodePropPredDataset(NodePropPredDataset):
        def pre_process(self) -> None:
            cache = os.path.join(self.root, "processed", "data_processed")
            if os.path.lexists(cache):
                loaded = _read_cache(cache, "processed")
                self.graph, self.labels = loaded.get("graph"), loaded.get("labels")
            else:
                # ogb writes the cache with torch.save but does not create its folder.
                gate.make_folder(os.path.dirname(cache))
                super().pre_process()

        def get_idx_split(self, split_type: str | None = None) -> dict:
            path = os.path.join(self.root, "split", split_type or self.meta_info["split"],
                                "split_dict.pt")
            if os.path.lexists(path):
                return _read_cache(path, "split")
            return super().get_idx_split(split_type)

    return OfflineNodePropPredDataset


def load_ogb(name: str, root: str | Path | None) -> Graph:
    """Load an OGB node dataset of `OGB_NAMES` from ``root`` with the official split.

    ``root`` is the directory holding ``ogbn_arxiv/`` etc. (ogb's layout). Unlabelled nodes (NaN in
    ogb, as in papers100M) get label -1. Graphs ogb stores without inverse edges (the citation
    graphs) are kept directed; the others are symmetric. A dataset of several binary tasks
    (ogbn-proteins: 112, species split) is multi-label: labels are an int8 node×task matrix (-1
    where ogb has NaN); a graph without node features but with edge features (ogbn-proteins)
    gets each node's mean of its incoming edges' features, as OGB's example does
    (`mean_incoming`).
    """
    meta = ogb_meta(name)
    name = meta["name"]
    if name not in OGB_NAMES:
        raise DatasetError(f"{name}: not supported (needs a homogeneous node-classification "
                           f"graph); supported: {', '.join(OGB_NAMES)}")
    if root is None:
        raise RootMissing(name, f"{name.replace('-', '_')}/ (OGB datasets are never downloaded "
                                "here)")
    root = Path(root).expanduser()
    ds_dir = _check_offline(name, root, meta)
    split, graph_dict, raw_labels = _read_with_ogb(name, root, ds_dir)
    graph_dict, n, edge_index = _checked_graph(graph_dict, ds_dir)
    directed = meta["add_inverse_edge"] != "True"
    notes: list[str] = []
    feats = _node_features(graph_dict, n, edge_index, directed, ds_dir, notes)
    del graph_dict
    adj = edges_to_csr(edge_index[0], edge_index[1], n, symmetrize=not directed)
    del edge_index
    if feats is None:
        feats = random_features(n, DEFAULT_FEATURES, 0)
        notes.append(f"no node_feat in the files: features are seeded random, "
                     f"{DEFAULT_FEATURES} dims")
    feats = _numeric(feats, ds_dir, "node_feat").astype(np.float32, copy=False)
    labels, num_classes = _labels(raw_labels, meta, n, ds_dir, notes)
    masks = _split_masks(split, n, ds_dir)
    notes.append(f"official OGB split '{meta['split']}'")
    graph = Graph(name=name, adj=adj, features=feats, labels=labels, train_mask=masks[0],
                  val_mask=masks[1], test_mask=masks[2], num_classes=num_classes,
                  directed=directed, notes=notes)
    return graph.validate(str(ds_dir))


def _read_with_ogb(name: str, root: Path, ds_dir: Path) -> tuple[Any, dict, Any]:
    """(split, graph dict, labels) as ogb reads them, offline and quietly; `DatasetError` with
    ogb's reason on one line for files it cannot read."""
    try:
        with _ogb_offline_and_quiet():
            dataset = _dataset_class()(name=name, root=str(root))
            split = dataset.get_idx_split()
            graph_dict, raw_labels = dataset[0]
    except DatasetError:
        raise
    except Exception as e:  # malformed csv/npz/cache: report ogb's reason on one line
        raise DatasetError(f"{ds_dir}: ogb could not read the dataset "
                           f"({type(e).__name__}: {one_line(e)[:300]})") from None
    return split, graph_dict, raw_labels


def _node_features(graph_dict: dict, n: int, edge_index: np.ndarray, directed: bool,
                   ds_dir: Path, notes: list[str]) -> Any:
    """ogb's node features, else the mean of each node's incoming edges' features (said in
    ``notes``), else None; first the graph's declared size is checked to fit in memory."""
    feats = graph_dict.get("node_feat")
    edge_feat = graph_dict.get("edge_feat") if feats is None else None
    width = (feats.shape[1] if isinstance(feats, np.ndarray) and feats.ndim == 2 else
        edge_feat.shape[1] if isinstance(edge_feat, np.ndarray) and edge_feat.ndim == 2 else
        DEFAULT_FEATURES)
    check_graph_size(str(ds_dir), n, edge_index.shape[1] * (1 if directed else 2), width)
    if feats is None and edge_feat is not None:
        edge_feat = _numeric(edge_feat, ds_dir, "edge_feat")
        feats = mean_incoming(edge_index, edge_feat, n, str(ds_dir))
        notes.append(f"node features: the mean of each node's incoming edges' "
                     f"{edge_feat.shape[1]} features (as OGB's example)")
    return feats


def _labels(raw_labels: Any, meta: dict, n: int, ds_dir: Path,
            notes: list[str]) -> tuple[np.ndarray, int]:
    """(labels, classes or tasks): binary tasks as an int8 node×task matrix (ogbn-proteins),
    else one class per node; NaN (no label) as -1, counted in ``notes``."""
    tasks = int(meta["num tasks"])
    y = _numeric(raw_labels, ds_dir, "labels")
    if tasks > 1:  # binary tasks (ogbn-proteins): 0, 1, NaN where missing
        if y.shape != (n, tasks):
            raise DatasetError(f"{ds_dir}: labels have shape {y.shape}, expected ({n}, {tasks})")
        labels = task_labels(y, n, str(ds_dir))
        if (labels < 0).any():
            notes.append(f"{int((labels < 0).sum())} (node, task) labels are missing (NaN in "
                         "ogb): left out of the loss and the metric")
        return labels, tasks
    y = y.astype(np.float64).reshape(-1)
    if y.shape[0] != n:
        raise DatasetError(f"{ds_dir}: {y.shape[0]} labels for {n} nodes")
    unlabelled = np.isnan(y)
    labels = np.where(unlabelled, -1, np.nan_to_num(y, nan=-1.0)).astype(np.int64)
    if unlabelled.any():
        notes.append(f"{int(unlabelled.sum())} nodes have no label (NaN in ogb) -> -1")
    return labels, int(meta["num classes"])


def _split_masks(split: Any, n: int, ds_dir: Path) -> list[np.ndarray]:
    """The train, valid and test masks of ogb's split, its node ids checked."""
    if not isinstance(split, dict):
        raise DatasetError(f"{ds_dir}: the split is a {type(split).__name__}, not a dict")
    masks = []
    for part in ("train", "valid", "test"):
        idx = _numeric(split.get(part), ds_dir, f"split '{part}'", "iu").reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise DatasetError(f"{ds_dir}: split '{part}' has node ids outside [0, {n - 1}]")
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        masks.append(mask)
    return masks


def mean_incoming(edge_index: np.ndarray, edge_feat: np.ndarray, n: int,
                  where: str) -> np.ndarray:
    """Each node's mean of the features of the edges that point to it (0 without one), float32
    (N, F): OGB's ogbn-proteins example's node features (``adj_t.mean(dim=1)`` on the edge
    features; every stored edge counts). One feature column at a time: the temporaries are one
    float64 value per edge and one per node."""
    if edge_feat.ndim != 2 or edge_feat.shape[0] != edge_index.shape[1]:
        raise DatasetError(f"{where}: edge_feat has shape {edge_feat.shape}, expected "
                           f"({edge_index.shape[1]}, F)")
    dst = edge_index[1]
    count = np.maximum(np.bincount(dst, minlength=n), 1)
    out = np.empty((n, edge_feat.shape[1]), dtype=np.float32)
    for k in range(edge_feat.shape[1]):
        out[:, k] = np.bincount(dst, weights=edge_feat[:, k], minlength=n) / count
    if not np.isfinite(out).all():
        raise DatasetError(f"{where}: edge_feat holds NaN or Inf values")
    return out


def _numeric(value: Any, ds_dir: Path, what: str, kinds: str = "biuf") -> np.ndarray:
    """``value`` as a numpy array of one of ``kinds``; `DatasetError` for anything else."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
        kind = (f"array of {value.dtype}" if isinstance(value, np.ndarray) else
            type(value).__name__)
        raise DatasetError(f"{ds_dir}: {what} is a {kind}, expected numbers"
                           f"{' (node ids)' if kinds == 'iu' else ''}; a cache under "
                           f"{ds_dir} may be damaged (delete processed/ to rebuild it)")
    return value


def _checked_graph(graph_dict: Any, ds_dir: Path) -> tuple[dict, int, np.ndarray]:
    """(graph dict, node count, edge_index) of what ogb returned, checked before use."""
    if not isinstance(graph_dict, dict):
        raise DatasetError(f"{ds_dir}: ogb returned a {type(graph_dict).__name__} for the graph, "
                           "not a dict; delete processed/ to rebuild it from raw/")
    n = graph_dict.get("num_nodes")
    if isinstance(n, np.ndarray) and n.shape == () and n.dtype.kind in "iu":
        n = n.item()
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise DatasetError(f"{ds_dir}: num_nodes is {one_line(repr(n))[:100]}, expected a "
                           "non-negative integer")
    n = int(n)
    edge_index = _numeric(graph_dict.get("edge_index"), ds_dir, "edge_index", "iu")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"{ds_dir}: edge_index has shape {edge_index.shape}, expected (2, E)")
    check_coo(edge_index[0], edge_index[1], (n, n), str(ds_dir), "edge_index")
    return graph_dict, n, edge_index


def check_files(name: str, root: str | os.PathLike) -> Path:
    """Raise `DatasetError` unless OGB dataset ``name`` can be loaded from ``root`` offline
    (cheap: file existence only); returns its directory."""
    return _check_offline(name, Path(root).expanduser(), ogb_meta(name))
