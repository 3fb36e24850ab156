"""The shard store's manifest read and checked: every field a reader relies on with its type,
older manifests read in today's terms, and what it records of the store's Â and model kind.
The one error of a store's readers and writer, `ShardStoreError`, is defined here, below both."""

from __future__ import annotations

import json
import os
from pathlib import Path

from plexus_partition.model.ops import KINDS
from plexus_datasets.base.gate import UnsafeTargetError, open_trusted
from plexus_datasets.base.values import is_count, one_line
from plexus_datasets.graph import AGGREGATIONS

from .storeformat import FORMAT, MANIFEST, MAX_MANIFEST_BYTES, VERSION, gnn_layers


class ShardStoreError(ValueError):
    """A shard store is missing, corrupt, or was cut for another configuration (one line)."""


def read_manifest(store_dir: str | os.PathLike) -> dict:
    """The manifest of a store, read as this user's own state (`open_trusted`: no file another
    user could have chosen); `ShardStoreError` when it is missing, refused or not a store's."""
    path = Path(store_dir) / MANIFEST
    try:
        with open_trusted(path, "r") as f:  # the gate: no manifest another user could choose
            size = os.fstat(f.fileno()).st_size
            if size > MAX_MANIFEST_BYTES:
                raise ShardStoreError(f"{path}: {size} bytes, more than a manifest has "
                                      f"({MAX_MANIFEST_BYTES}); the store is damaged")
            manifest = json.load(f)
    except ShardStoreError:
        raise
    except FileNotFoundError:
        raise ShardStoreError(f"{path}: missing; {store_dir} is not a shard store") from None
    except UnsafeTargetError as e:
        raise ShardStoreError(f"shard store {e}") from None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: absurdly nested JSON
        raise ShardStoreError(f"{path}: unreadable manifest ({type(e).__name__}: "
                              f"{one_line(e)[:200]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShardStoreError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise ShardStoreError(f"{path}: format version {manifest.get('version')}, this reader "
                              f"supports {VERSION}; re-run plexus-partition")
    _upgrade_manifest(manifest)
    _check_manifest_fields(manifest, path)
    return manifest


def _upgrade_manifest(manifest: dict) -> None:
    """A manifest written before the store recorded stages and GNN layers apart named its stage
    count ``num_layers``: read it as ``num_stages``. One that records no model kind records no
    GNN layers either: the ``gnn_layers`` stores of that time wrote came from a guess of the
    kind from the aggregation (GIN's for "sum", wrong for GraphConv), so it is dropped and the
    kind that trains says how many layers the stages make."""
    if "num_stages" not in manifest and "num_layers" in manifest:
        manifest["num_stages"] = manifest.pop("num_layers")
    if "model" not in manifest:
        manifest.pop("gnn_layers", None)


# Every field a reader relies on, with its JSON type.
_MANIFEST_FIELDS = {"grid": dict, "num_stages": int, "orders": list, "permutation": dict,
                    "seed": int, "dataset": str, "graph_sha256": str, "num_nodes": int,
                    "nodes_padded": int, "nnz": int, "num_features": int, "num_classes": int,
                    "block_keys": list, "ranks": list}


#: What a store whose manifest names no aggregation holds (written before the manifest recorded
#: it): GCN's normalized Â, the only one those partitioners cut.
LEGACY_AGGREGATION = "gcn"


def store_aggregation(manifest: dict) -> str:
    """The aggregation a store's Â is normalized for ("gcn", "mean" or "sum"; see
    `plexus_datasets.graph.AGGREGATIONS`): the manifest's, or GCN's for an older store."""
    return str(manifest.get("aggregation", LEGACY_AGGREGATION))


def store_model(manifest: dict) -> str | None:
    """The model kind a store was cut for (`plexus_partition.model.ops.KINDS`), None where it
    records none (a store of Â and orders only: `plexus.train.cache`'s, and those written before
    kinds were recorded)."""
    model = manifest.get("model")
    return None if model is None else str(model)


#: What `store_split` says of a store whose manifest records no split (written before stores
#: recorded it): it still loads and trains on the split it holds
UNRECORDED_SPLIT = ("split not recorded (a store written before stores recorded theirs; "
                    "plexus-partition again records it)")


def store_split(manifest: dict) -> str:
    """The train/val/test split a store carries, in words: its nodes per part and where the
    split came from (the dataset's own, an npz file's masks, a seeded stand-in), or
    `UNRECORDED_SPLIT` for an older store."""
    split = manifest.get("split")
    if split is None:
        return UNRECORDED_SPLIT
    return (f"train/val/test {split['train']}/{split['val']}/{split['test']} nodes, "
            f"{split['origin']}")


def store_aggregation_of(model: str | None, aggregation: str | None) -> str:
    """The Â a store is cut for: the ``model`` kind's (declared in `plexus_partition.model.ops`),
    else ``aggregation``, else GCN's; `ShardStoreError` when both are given and disagree."""
    if model is not None and model in KINDS:
        wanted = KINDS[model].aggregation
        if aggregation is not None and aggregation != wanted:
            raise ShardStoreError(f"the {model} model aggregates with {wanted}'s Â, not "
                                  f"{aggregation}'s; give one of the two")
        return wanted
    return aggregation or LEGACY_AGGREGATION


def _check_manifest_fields(manifest: dict, path: Path) -> None:
    """`ShardStoreError` naming the first missing or mistyped field of a manifest."""
    def bad(what: str) -> ShardStoreError:
        return ShardStoreError(f"{path}: {what}; the manifest is damaged, re-run "
                               "plexus-partition")

    for key, kind in _MANIFEST_FIELDS.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or (kind is int and not is_count(value)):
            raise bad(f"field {key!r} missing or not a {'non-negative ' if kind is int else ''}"
                      f"{kind.__name__}")
    if manifest.get("aggregation", LEGACY_AGGREGATION) not in AGGREGATIONS:
        raise bad(f"aggregation {manifest.get('aggregation')!r:.40} is not one of "
                  f"{', '.join(AGGREGATIONS)}")
    model = manifest.get("model")
    if model is not None:
        if model not in KINDS or KINDS[model].aggregation != store_aggregation(manifest):
            raise bad(f"model {model!r:.40} is not a kind of {store_aggregation(manifest)}'s Â "
                      f"({', '.join(k for k in KINDS)})")
        layers = manifest.get("gnn_layers")
        if not is_count(layers) or layers != gnn_layers(manifest["num_stages"], model):
            raise bad(f"gnn_layers {layers!r:.40} does not match {manifest['num_stages']} "
                      f"stages of {model}")
    split = manifest.get("split")
    if split is not None and not (isinstance(split, dict) and isinstance(split.get("origin"), str)
                                  and all(is_count(split.get(k)) for k in ("train", "val", "test"))):
        raise bad("split must hold train, val and test counts and its origin")
    grid, perm = manifest["grid"], manifest["permutation"]
    if (not all(is_count(grid.get(a)) and grid[a] >= 1 for a in ("x", "y", "z"))
            or not isinstance(perm.get("kind"), str) or not is_count(perm.get("seed"))):
        raise bad("bad grid or permutation")
    if not all(isinstance(o, str) for o in manifest["orders"] + manifest["block_keys"]):
        raise bad("orders and block_keys must be lists of strings")
    for entry in manifest["ranks"]:
        coords = entry.get("coords") if isinstance(entry, dict) else None
        if not (isinstance(coords, dict) and all(is_count(coords.get(a)) for a in "xyz")
                and isinstance(entry.get("file"), str) and is_count(entry.get("size"))
                and isinstance(entry.get("sha256"), str)):
            raise bad("a 'ranks' entry lacks coords {x, y, z}, file, size or sha256")
