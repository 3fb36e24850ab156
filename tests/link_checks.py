"""Link prediction's checks inside a gloo world (tests/engine/test_link_grid.py): on every grid,
the distributed encoder with the pair operator against the serial model (dropout in the encoder
and in the MLP decoder; the grid scoring in batches of 7 pairs, the serial model all at once),
the ledger's pair collectives against `plexus_partition.model.pairs`, their sizes counted
here from the pairs themselves, and each rank's tracked tensor peak of a training step against
the memory model's (`plexus.testing.linkmemory`, on an R-MAT graph of 4096 nodes). Each function
returns {check name: [failures]} for this rank."""

from __future__ import annotations

import numpy as np
import torch

from engine_checks import on_every_grid
from plexus_datasets.graph import Graph
from plexus_datasets.linksplit import random_edge_split
from plexus_datasets.graph import gcn_nnz
from plexus_partition.model.pairs import pair_collectives
from plexus.engine.config import EngineConfig, ModelConfig
from plexus.engine.grid import Grid
from plexus.engine.link import LinkTask, fit
from plexus.engine.pairs import LinkDecoder, negative_pairs
from plexus.perfmodel.linkcost import LinkOptions, estimate_link
from plexus.perfmodel.spec import ModelSpec
from plexus.testing.exactness import build_pair
from plexus.testing.exactness import close as _close
from plexus.testing.linkmemory import link_peak

OUT = 7  # embedding columns: no axis size divides it (padded blocks)
BATCH = 7  # pairs per batch on the grid
DECODERS = ("dot", "mlp")
#: The memory check's graph: large enough that a step's tensors dwarf the fixed ones.
MEMORY_GRAPH = "rmat:scale=12,edge_factor=32,features=128,classes=8,seed=0"
MEMORY_TOLERANCE = 0.15  # the "within 15 % of the tracked peak", on every rank


def _tasks(grid: Grid, g: Graph, decoder: str, engine: EngineConfig | None = None):
    split = random_edge_split(g, (0.7, 0.1, 0.2), seed=2)
    eg = split.encoder_graph(OUT)
    cfg = ModelConfig(2, 6, 0.5)
    dist_model, serial, _ = build_pair(grid, eg, cfg, "double", engine or EngineConfig())
    pos = torch.from_numpy(split.pos["train"])
    tasks = []
    for model, on_grid in ((dist_model, True), (serial, False)):
        dec = LinkDecoder(decoder, OUT, hidden=5, layers=3, dropout=0.3, seed=5)
        task = LinkTask(model, dec, pos, g.num_nodes, seed=5, grid=on_grid)
        if on_grid:
            task.budget = BATCH * task.per_pair
        tasks.append(task)
    return split, tasks[0], tasks[1]


def check_step(grid: Grid, g: Graph, decoder: str) -> list[str]:
    """One training step (dropout on, step 3): the loss and every gradient, the encoder's
    shards and the decoder's replicated parameters."""
    _, dist_task, serial_task = _tasks(grid, g, decoder)
    ld, ls = dist_task.train_step(3), serial_task.train_step(3)
    fails = _close("loss", ld.cpu(), ls)
    enc = dist_task.encoder
    want = serial_task.encoder.named_shards()
    for name, p in enc.named_shards().items():
        fails += _close(f"grad {name}", p.grad, enc.shard_of(name, want[name].grad))
    theirs = dict(serial_task.decoder.named_parameters())
    for name, p in dist_task.decoder.named_parameters():
        fails += _close(f"grad decoder.{name}", p.grad.cpu(), theirs[name].grad)
    if decoder == "mlp" and all(float(p.grad.abs().sum()) == 0
                                for p in dist_task.decoder.parameters()):
        fails.append("the decoder has no gradient: the check would show nothing")
    return fails


def check_training(grid: Grid, g: Graph, decoder: str, epochs: int = 3) -> list[str]:
    """``epochs`` steps of Adam: the loss curve, then the test pairs' scores."""
    split, dist_task, serial_task = _tasks(grid, g, decoder)
    fails = _close("loss curve", torch.tensor(fit(dist_task, epochs)),
                   torch.tensor(fit(serial_task, epochs)))
    pairs = torch.from_numpy(np.hstack([split.pos["test"], split.neg["test"]]))
    fails += _close("test scores", dist_task.scores(pairs).cpu(), serial_task.scores(pairs))
    return fails


def _want(task: LinkTask, batches: list[np.ndarray], phase: str, itemsize: int) -> dict:
    """The pair collectives of ``batches`` (each 2 × P), their ends counted here."""
    enc = task.encoder
    out: dict = {}
    for pairs in batches:
        ends = len(np.unique(pairs))
        for c in pair_collectives(enc.plans[-1], enc.comm.grid.shape, enc.pad.widths_padded[-1],
                                  pairs.shape[1], ends, task.decoder.kind, phase):
            out[c.key(itemsize)] = out.get(c.key(itemsize), 0) + 1
    return out


def check_ledger(grid: Grid, g: Graph, decoder: str) -> list[str]:
    """The collectives the ledger records for the pairs (the loss's in a training step, the
    evaluation's when scoring test pairs) are those `pair_collectives` declares, one by one,
    and their bytes per axis are what the declaration prices."""
    split, task, _ = _tasks(grid, g, decoder)
    ledger, itemsize = task.encoder.comm.ledger, 4
    ledger.reset()
    step = 1
    task.train_step(step)
    pos = split.pos["train"]
    P = pos.shape[1]
    neg = negative_pairs(5, step, g.num_nodes, P).numpy()
    batches = []
    for s in range(0, P, BATCH):
        batches += [pos[:, s:s + BATCH], neg[:, s:s + BATCH]]
    fails = []
    got = {k: v for k, v in ledger.collectives.items() if k[1] == "loss"}  # the encoder's:
    # "forward" and "backward"
    want = _want(task, batches, "loss", itemsize)
    if got != want:
        fails.append(f"training step: ledger {got} != declared {want}")
    pairs = np.hstack([split.pos["test"], split.neg["test"]])
    with torch.no_grad():
        H = task.encoder.eval()()
    ledger.reset()  # from here on the pairs' collectives only
    task.scores(torch.from_numpy(pairs), H)
    got = dict(ledger.collectives)
    eval_batches = [pairs[:, s:s + BATCH] for s in range(0, pairs.shape[1], BATCH)]
    want = _want(task, eval_batches, "eval", itemsize)
    if got != want:
        fails.append(f"scoring: ledger {got} != declared {want}")
    enc = task.encoder
    decl = [c for b in eval_batches for c in pair_collectives(
        enc.plans[-1], enc.comm.grid.shape, enc.pad.widths_padded[-1], b.shape[1],
        len(np.unique(b)), decoder, "eval")]
    per_axis = {a: sum(c.bytes(itemsize) for c in decl if c.axis == a) for a in "xyz"}
    moved = ledger.per_axis("bytes")
    fails += [f"axis {a}: ledger bytes {moved[a]} != declared {per_axis[a]}" for a in "xyz"
              if abs(moved[a] - per_axis[a]) > 1e-6 * max(1.0, per_axis[a])]
    return fails


def check_step_bytes(grid: Grid, g: Graph, decoder: str) -> list[str]:
    """A whole training step's bytes per axis, every collective the ledger counts (the
    encoder's forward and backward, the pairs'), are what ``plexus-model --task link`` prices
    for it (`plexus.perfmodel.linkcost.estimate_link`, dense exchanges: the model estimates a
    sparse exchange's rows from sizes alone), and so are its collectives, one by one."""
    split, task, _ = _tasks(grid, g, decoder, EngineConfig(sparse_comm="off"))
    ledger, enc = task.encoder.comm.ledger, task.encoder
    ledger.reset()
    task.train_step(1)
    eg = split.encoder_graph(OUT)
    spec = ModelSpec(eg.num_nodes, gcn_nnz(eg), eg.num_features, OUT, ModelConfig(2, 6, 0.5),
                     sparse_comm="off", symmetric=not g.directed)
    pos = split.pos["train"]
    neg = negative_pairs(5, 1, g.num_nodes, pos.shape[1]).numpy()
    ends = tuple(len(np.unique(pairs[:, s:s + BATCH])) for s in range(0, pos.shape[1], BATCH)
                 for pairs in (pos, neg))  # each batch's, counted here from its pairs
    link = LinkOptions(pos.shape[1], decoder, 5, 3, task.budget, ends)
    shape = dict(grid.shape.items())
    p = estimate_link(spec, shape, orders=[q.order for q in enc.plans], link=link)
    got, want = ledger.per_axis("bytes"), p.volume.per_axis("bytes")
    fails = [f"axis {a}: ledger {got[a]:.0f} B != priced {want[a]:.0f} B" for a in "xyz"
             if abs(got[a] - want[a]) > 1e-6 * max(1.0, want[a])]
    priced: dict = {}
    for c in p.volume.collectives:
        key = c.key(c.itemsize or 4)
        priced[key] = priced.get(key, 0) + 1
    if dict(ledger.collectives) != priced:
        extra = sorted(set(ledger.collectives.items()) ^ set(priced.items()), key=str)[:6]
        fails.append(f"collectives: ledger and price differ in {extra}")
    return fails


def check_memory(grid: Grid, split, decoder: str) -> list[str]:
    """This rank's tracked tensor peak over two training steps (batches of 4 MiB) against the
    memory model's figure for its grid coordinates: within `MEMORY_TOLERANCE`."""
    peak = link_peak(grid, split, decoder, hidden=128, out_channels=64, budget=4 << 20)
    if abs(peak.ratio - 1) <= MEMORY_TOLERANCE:
        return []
    return [f"coords {peak.coords}: predicted {peak.predicted / 2**20:.2f} MiB, tracked "
            f"{peak.tracked / 2**20:.2f} MiB ({peak.ratio:.3f}x)"]


def run_link_checks(grids: list[tuple[int, int, int]]) -> dict[str, list[str]]:
    """Every link check on every grid of ``grids`` (one world size), both graphs and both
    decoders."""
    from plexus_datasets import load_dataset  # noqa: PLC0415

    memory_split = random_edge_split(load_dataset(MEMORY_GRAPH, None, seed=0),
                                     (0.85, 0.05, 0.1), seed=0)

    def checks(grid: Grid, tag: str, graphs: dict[str, Graph]) -> dict[str, list[str]]:
        out = {f"{tag}/memory/{dec}": check_memory(grid, memory_split, dec)
               for dec in DECODERS}
        for gname, g in graphs.items():
            for dec in DECODERS:
                key = f"{tag}/{gname}/{dec}"
                out[f"{key}/step"] = check_step(grid, g, dec)
                out[f"{key}/train"] = check_training(grid, g, dec)
                out[f"{key}/ledger"] = check_ledger(grid, g, dec)
                out[f"{key}/bytes"] = check_step_bytes(grid, g, dec)
        return out

    return on_every_grid(grids, checks)
