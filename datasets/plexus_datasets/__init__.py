"""Graph datasets for Plexus: one `Graph` type, many loaders, one spec string to choose them."""

from .errors import DatasetError, RootMissing
from .graph import AGGREGATIONS, Graph, gcn_normalize, gcn_nnz, edges_to_csr, normalize
from .spec import load_dataset, spec_paths, SPEC_FORMS
from .planetoid import load_planetoid, read_planetoid
from .npz import load_npz
from .mtx import load_mtx
from .edgelist import load_edgelist
from .rmat import rmat_graph, rmat_edges, parse_rmat_params
from .synthetic import random_features, degree_bucket_labels, random_split


def load_ogb(name: str, root: str | None) -> Graph:
    """Load an OGB node dataset offline (see `plexus_datasets.ogb_loader.load_ogb`).

    A wrapper so that ``import plexus_datasets`` does not import ogb/torch/pandas.
    """
    from .ogb_loader import load_ogb as _load_ogb

    return _load_ogb(name, root)


__all__ = [
    "AGGREGATIONS", "Graph", "DatasetError", "RootMissing", "gcn_normalize", "gcn_nnz", "edges_to_csr", "normalize",
    "load_dataset", "spec_paths", "SPEC_FORMS",
    "load_planetoid", "read_planetoid", "load_ogb", "load_npz", "load_mtx", "load_edgelist",
    "rmat_graph", "rmat_edges", "parse_rmat_params",
    "random_features", "degree_bucket_labels", "random_split",
]
