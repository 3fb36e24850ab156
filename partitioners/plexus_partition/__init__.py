"""Load-balancing permutations and 3D shards of a graph for the Plexus engine."""

from .balance import balanced_orders
from .permutations import PERMUTATIONS, Permutation, make_permutation
from .plan import RankShard, shard_graph
from .stats import LayerBalance, balance_report, format_report, layer_balance
from .store import (ShardStoreError, is_store, read_manifest, read_shard, store_aggregation,
                    store_model, store_split, write_store)
from .streamjob import PartitionError, PartitionInterrupted


def partition_to_store(*args, **kwargs) -> dict:
    """Partition a dataset into a shard store in bounded memory, on one or many processes (see
    `plexus_partition.pipeline.partition_to_store`, whose arguments it takes)."""
    from .pipeline import partition_to_store as _partition  # noqa: PLC0415

    return _partition(*args, **kwargs)


__all__ = [
    "PERMUTATIONS", "Permutation", "make_permutation", "balanced_orders",
    "RankShard", "shard_graph",
    "LayerBalance", "layer_balance", "balance_report", "format_report",
    "ShardStoreError", "write_store", "read_shard", "read_manifest", "is_store",
    "store_aggregation", "store_model", "store_split",
    "PartitionError", "PartitionInterrupted", "partition_to_store",
]
