"""Graph datasets for Plexus: one `Graph` type, many loaders, one spec string to choose them."""

from .graph import Graph, DatasetError, gcn_normalize

__all__ = ["Graph", "DatasetError", "gcn_normalize"]
