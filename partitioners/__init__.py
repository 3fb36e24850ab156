"""Load-balancing permutations and 3D shards of a graph for the Plexus engine."""

from .balance import balanced_orders
from .permutations import PERMUTATIONS, Permutation, make_permutation
from .plan import RankShard, shard_graph
from .stats import LayerBalance, balance_report, format_report, layer_balance
from .store import ShardStoreError, is_store, read_manifest, read_shard, write_store

__all__ = [
    "PERMUTATIONS", "Permutation", "make_permutation", "balanced_orders",
    "RankShard", "shard_graph",
    "LayerBalance", "layer_balance", "balance_report", "format_report",
    "ShardStoreError", "write_store", "read_shard", "read_manifest", "is_store",
]
