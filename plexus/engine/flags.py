"""The engine's own command-line options, shared by every tool that runs or prices the engine
(``plexus-train``, ``plexus-model``, ``plexus-sweep``): how it holds the model (``--dtype``,
``--recompute``) and what a run sends (``--comm-dtype``, ``--sparse-comm``). The model's options
(``--model``, ``--layers``, ...) are the partitioner's, `plexus_partition.model.modelopts`: a
store is cut for them. Plain argparse, no torch: a tool's ``--help`` stays fast.
"""

from __future__ import annotations

import argparse

from plexus_partition.model.cli import UsageError
from plexus_partition.model.model import DEFAULT_DTYPE, DTYPE_BYTES, DTYPES
from plexus_partition.model.schedule import SPARSE_MODES


def add_precision_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--dtype`` and ``--recompute``: how the engine holds the model (both tools)."""
    parser.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE,
                        help="activations and communication in this precision; weights, loss "
                             f"and optimizer stay fp32 (default {DEFAULT_DTYPE})")
    parser.add_argument("--recompute", action="store_true",
                        help="recompute each layer's activations in backward instead of "
                             "keeping them (saves what a layer keeps beyond its input: "
                             "BatchNorm's, GIN's and GAT's)")


def add_comm_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--comm-dtype`` (the precision messages travel in) and ``--sparse-comm`` (the
    aggregation's sums as sparse exchanges): what a run sends, for plexus-train and the
    performance model alike (`comm_dtype_bytes` checks them)."""
    parser.add_argument("--comm-dtype", choices=DTYPES, default=DEFAULT_DTYPE,
                        help="activation, gradient and gathered-weight messages rounded to "
                             "this precision for the wire and summed in fp32 on arrival, under "
                             "--dtype fp32; statistics (loss, metric, BatchNorm, attention) "
                             f"and master weights stay fp32 (default {DEFAULT_DTYPE}: as "
                             "computed, bit for bit)")
    parser.add_argument("--sparse-comm", choices=SPARSE_MODES, default="auto",
                        help="send only the rows each rank's block of Â touches in the "
                             "aggregation's sums (all-to-all + all-gather): auto (default: per "
                             "layer, where that moves fewer bytes), on, off (all-reduces)")


def comm_dtype_bytes(args: argparse.Namespace) -> int:
    """Bytes per element of the run's messages (``--comm-dtype`` under ``--dtype``); raises
    `UsageError` where --comm-dtype asks for a precision other than a non-fp32 --dtype's."""
    if args.comm_dtype != DEFAULT_DTYPE and args.dtype not in (DEFAULT_DTYPE, args.comm_dtype):
        raise UsageError(f"--comm-dtype {args.comm_dtype} needs --dtype fp32 (under --dtype "
                         f"{args.dtype} the messages are {args.dtype} already); drop one")
    return DTYPE_BYTES[args.comm_dtype if args.dtype == DEFAULT_DTYPE else args.dtype]
