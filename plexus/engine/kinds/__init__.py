"""Every built-in kind's torch code: one `KindLayer` per operator of
`plexus_partition.model.ops` (which holds each kind's torch-free spec), its stage on the grid
written with the stage toolkit and its serial reference. Adding a kind: its spec module in
`plexus_partition.model.ops` (listed in its ``MODULES``) and its layer module here, listed in
`MODULES` (ARCHITECTURE.md, "Where to add").
"""

from __future__ import annotations

from . import appnp, batchnorm, dense, gat, gatv2, gcn, gcn2, gin, graphconv, sage
from .base import KindLayer

#: The registry: each module's `KindLayer` subclasses with a name, one per operator.
MODULES = (gcn, sage, gin, dense, gat, gatv2, appnp, gcn2, graphconv, batchnorm)

LAYERS: dict[str, KindLayer] = {layer.name: layer for layer in (
    v() for m in MODULES for v in vars(m).values()
    if isinstance(v, type) and issubclass(v, KindLayer) and v.__module__ == m.__name__
    and v.name)}


class MissingLayerError(LookupError):
    """An operator declared in `plexus_partition.model.ops` with no torch code here."""


def layer_of(op: str) -> KindLayer:
    """Operator ``op``'s torch code; `MissingLayerError` where only its spec exists."""
    try:
        return LAYERS[op]
    except KeyError:
        raise MissingLayerError(
            f"operator {op!r} has a spec (plexus_partition.model.ops) but no torch code: add "
            "its KindLayer to plexus.engine.kinds.MODULES") from None


__all__ = ["LAYERS", "KindLayer", "MissingLayerError", "MODULES", "layer_of"]
