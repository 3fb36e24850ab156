"""The published sizes of the OGB node datasets Plexus loads, for pricing a run without the data
(``plexus-model --dataset ogbn-papers100M`` on a laptop).

Source: the OGB dataset pages (ogb.stanford.edu/docs/nodeprop) and ogb's ``master.csv``
(num nodes, num edges as stored, feature width, classes or tasks, whether ogb adds inverse
edges). ``edges`` is what ogb's raw files hold; the loaders keep the citation graphs directed
and store both directions of the others (`plexus_datasets.ogb_loader.load_ogb`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OgbSizes:
    """One OGB node dataset's sizes as published."""

    name: str
    num_nodes: int
    edges: int  # edge pairs in the raw files (one direction for the undirected graphs)
    num_features: int
    num_classes: int  # classes; binary tasks when ``multilabel``
    directed: bool  # kept directed by the loader (ogb adds no inverse edges)
    multilabel: bool = False

    @property
    def gcn_nnz(self) -> int:
        """Non-zeros of Â as `plexus_datasets.gcn_nnz` counts them once loaded: the stored edges
        (both directions for an undirected graph) plus one self loop per node (an upper bound
        where the raw list repeats an edge)."""
        return self.edges * (1 if self.directed else 2) + self.num_nodes


OGB_SIZES: dict[str, OgbSizes] = {s.name: s for s in (
    OgbSizes("ogbn-arxiv", 169_343, 1_166_243, 128, 40, directed=True),
    OgbSizes("ogbn-products", 2_449_029, 61_859_140, 100, 47, directed=False),
    OgbSizes("ogbn-proteins", 132_534, 39_561_252, 8, 112, directed=False, multilabel=True),
    OgbSizes("ogbn-papers100M", 111_059_956, 1_615_685_872, 128, 172, directed=True),
)}


def ogb_sizes(spec: str) -> OgbSizes | None:
    """The published sizes of the OGB dataset ``spec`` names (case-insensitive), else None."""
    key = spec.strip().lower()
    return next((s for name, s in OGB_SIZES.items() if name.lower() == key), None)
