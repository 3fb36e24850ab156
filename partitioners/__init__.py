"""Load-balancing permutations and 3D shards of a graph for the Plexus engine."""

from .permutations import PERMUTATIONS, Permutation, make_permutation
from .plan import RankShard, shard_graph

__all__ = ["PERMUTATIONS", "Permutation", "make_permutation", "RankShard", "shard_graph"]
