"""Plexus: distributed full-graph GCN training with 3D tensor parallelism."""

__version__ = "0.1.0"
