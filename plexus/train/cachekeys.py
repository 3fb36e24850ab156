"""The keys of the shard-store cache (`plexus.train.cache`): a graph's source as the cache knows
it without loading it (`Source`: spec, files' sizes and times or content, seeds, options, store
format and Plexus version), what a build records about its graph (`Sizes`), how a store cuts it
(`Partition`), and a store's directory name from both."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plexus_partition.model.grid import GridShape
from plexus_partition.model.model import ModelConfig
from plexus_datasets import DatasetError, Graph, gcn_nnz, load_dataset, spec_paths
from plexus_datasets.spec import MAX_SOURCE_FILES, content_key, source_fingerprint
from plexus_partition.store import FORMAT as STORE_FORMAT, VERSION as STORE_VERSION, graph_hash

from .errors import CacheError

if TYPE_CHECKING:
    from .plan import RunRequest


def key_digest(value: Any) -> str:
    """The sha256 of a key (a JSON value, its keys sorted)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Source:
    """The graph a run trains on, as the cache knows it without loading it."""

    spec: str
    root: str | None
    seed: int  # the permutation's (--seed), and the dataset's unless data_seed is given
    symmetrize: bool
    data_seed: int | None = None  # --split-seed: the dataset's seeded parts (None: seed)
    features: str = "auto"  # --features (plexus_datasets.FEATURE_MODES)

    @classmethod
    def of_run(cls, run: RunRequest) -> Source:
        """A run's graph (`plexus.train.plan.RunRequest`): its dataset with the run's seed,
        --split-seed, --symmetrize and --features, what loads it (``load``, ``small``) and
        keys its cached stores."""
        return cls(run.dataset, run.root, run.train.seed, run.symmetrize, run.split_seed,
                   run.features)

    @property
    def dataset_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    def key(self) -> dict:
        """What identifies the graph: a change to any of it gives another graph (or may)."""
        from plexus import __version__  # noqa: PLC0415

        try:
            files = source_fingerprint(spec_paths(self.spec, self.root), MAX_SOURCE_FILES)
        except DatasetError as e:
            raise CacheError(f"{e}; partition it once with plexus-partition and train from "
                             "--shards, or use --no-cache") from None
        except OSError as e:
            raise CacheError(f"{self.spec}: cannot read its files ({e.strerror or e})") from None
        try:  # a one-file format is keyed by its content: not its path, name or time stamp
            content = content_key(self.spec, self.root)
        except OSError as e:
            raise CacheError(f"{self.spec}: cannot read its file ({e.strerror or e})") from None
        named = ({"spec": self.spec.strip(), "files": files} if content is None else
            {"content": content})
        key = {**named, "seed": self.seed, "symmetrize": self.symmetrize,
               "store": [STORE_FORMAT, STORE_VERSION], "plexus": __version__}
        # only where given: the stores of runs from before these options keep their keys
        if self.data_seed is not None:
            key["data_seed"] = self.data_seed
        if self.features != "auto":
            key["features"] = self.features
        return key

    def load(self) -> Graph:
        """The graph (the whole of it: only the builder does this)."""
        graph = load_dataset(self.spec, self.root, seed=self.dataset_seed,
                             features=self.features)
        return graph.to_undirected() if self.symmetrize else graph

    def small(self) -> Graph | None:
        """The graph when its files are small (`plexus.train.checks.precheck_dataset`), else
        None."""
        from .checks import precheck_dataset  # noqa: PLC0415

        graph = precheck_dataset(self.spec, self.root, self.dataset_seed, self.features)
        return graph.to_undirected() if graph is not None and self.symmetrize else graph


@dataclass(frozen=True)
class Sizes:
    """What the cache records about a source's graph."""

    name: str
    num_nodes: int
    num_features: int
    num_classes: int
    nnz: int  # of the GCN-normalized Â (`plexus_datasets.gcn_nnz`)
    graph_sha256: str

    @classmethod
    def of(cls, graph: Graph) -> "Sizes":
        return cls(graph.name, graph.num_nodes, graph.num_features, graph.num_classes,
                   gcn_nnz(graph), graph_hash(graph))


@dataclass(frozen=True)
class Partition:
    """How a store cuts the graph (the second half of its key)."""

    grid: GridShape
    model: ModelConfig
    perm: str
    seed: int

    def fields(self, sizes: Sizes) -> dict:
        return {"grid": self.grid.as_dict(), "stages": self.model.num_stages,
                "orders": self.model.orders(sizes.num_features, sizes.num_classes),
                "perm": self.perm, "perm_seed": self.seed,
                "aggregation": self.model.aggregation}


def store_name(source_key: dict, partition: Partition, sizes: Sizes) -> str:
    """The directory name of a store in the cache: readable, then the key's hash."""
    key = key_digest({"source": source_key, "partition": partition.fields(sizes)})
    slug = re.sub(r"[^A-Za-z0-9]+", "-", sizes.name).strip("-")[:40] or "graph"
    return f"{slug}-{partition.grid}-{key[:20]}"
