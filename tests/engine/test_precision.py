"""Two memory options of the engine (`plexus.engine.config.EngineConfig`).

- ``dtype`` "bf16"/"fp16": activations, Â and messages in a lower precision, float32 master
  weights, loss and gradients. Logits stay close to float32's (Cora's accuracy:
  tests/engine/test_bf16_accuracy.py).
- ``recompute``: each stage recomputed in backward from its saved input. Logits, loss, every
  gradient and the BatchNorm running statistics equal those without it (dropout on, directed and
  undirected graphs, 1 and 4 ranks), and a step holds fewer tensor bytes at its peak.

One world per world size runs every check of that size (worlds are slow to start: the session's
shared world of that size, `tests/worlds.py`), as in tests/engine/test_engine.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import worlds
from engine_checks import HIDDEN, build, directed_toy_graph, toy_graph
from plexus.engine.config import EngineConfig, ModelConfig, TrainConfig
from plexus.engine.grid import Grid
from plexus.engine.trainer import Trainer
from plexus.perfmodel import ModelSpec, epoch_memory

# Norm-wise relative differences from float32 allowed to (logits, every gradient). bf16 keeps
# 8 significant bits (2^-8 = 0.4 % per rounding): three layers of it stay within 3 %. Gradients
# pass every activation's rounding and ReLU masks that flip near 0, and BatchNorm's backward
# subtracts nearly equal terms on a 37-node graph: up to 13 % measured for bf16.
TOLERANCES = {"bf16": (3e-2, 0.2), "fp16": (5e-3, 1e-2)}
RECOMPUTE_ATOL = 1e-6

PRECISION_MODELS = {
    "gcn-mixed": ModelConfig(3, HIDDEN, 0.5, order="agg,combine,agg"),
    "gcn-batchnorm": ModelConfig(3, HIDDEN, 0.5, norm="batch"),
    "sage": ModelConfig(2, HIDDEN, 0.5, kind="sage"),
    "gin-learnable": ModelConfig(2, HIDDEN, 0.5, kind="gin", order="combine",
                                 learnable_features=True),
    "gcn-residual": ModelConfig(3, HIDDEN, 0.5, order="agg,combine,agg", residual=True),
}
RECOMPUTE_MODELS = {
    "gcn-batchnorm-mixed": ModelConfig(3, HIDDEN, 0.5, order="agg,combine,agg", norm="batch"),
    "sage-batchnorm": ModelConfig(3, HIDDEN, 0.5, kind="sage", norm="batch"),
    "gin-learnable": ModelConfig(2, HIDDEN, 0.5, kind="gin", learnable_features=True),
}


def _step(grid: Grid, g, cfg: ModelConfig, engine: EngineConfig):
    """One training step with dropout (step 3), then an evaluation forward: logits, loss,
    gradients, running statistics, evaluation logits and the bytes per message element."""
    model, _, _ = build(grid, g, cfg, "double", engine)
    model.train()
    model.comm.ledger.reset()
    z = model(step=3)
    loss = model.loss(z)
    loss.backward()
    bytes_ = model.comm.ledger.per_axis("bytes")
    elements = model.comm.ledger.per_axis("elements")
    model.eval()
    with torch.no_grad():
        evaluated = model()
    return {"logits": z.detach(), "loss": loss.detach(), "eval": evaluated,
            "grads": {k: p.grad for k, p in model.named_shards().items()},
            "stats": {k: b.clone() for k, b in model.named_stats().items()},
            "bytes_per_element": {a: bytes_[a] / elements[a] for a in "xyz" if elements[a]}}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-12))


def check_precision(grid: Grid) -> list[str]:
    """bf16 and fp16 against float32 on every model of `PRECISION_MODELS`, both graphs."""
    fails = []
    for (gname, g), (name, cfg) in itertools.product(
            (("undirected", toy_graph()), ("directed", directed_toy_graph())),
            PRECISION_MODELS.items()):
        ref = _step(grid, g, cfg, EngineConfig())
        for dtype, (rtol, grad_rtol) in TOLERANCES.items():
            got = _step(grid, g, cfg, EngineConfig(dtype=dtype))
            tag = f"{gname}/{name}/{dtype}"
            if got["logits"].dtype != torch.float32:
                fails.append(f"{tag}: logits are {got['logits'].dtype}, not float32")
            for key in ("logits", "eval"):
                if _rel(got[key], ref[key]) > rtol:
                    fails.append(f"{tag}: {key} differ by {_rel(got[key], ref[key]):.3g}")
            if abs(float(got["loss"] - ref["loss"])) > rtol * float(ref["loss"]):
                fails.append(f"{tag}: loss {float(got['loss'])} vs {float(ref['loss'])}")
            for k, grad in got["grads"].items():
                if grad.dtype != torch.float32 or not torch.isfinite(grad).all():
                    fails.append(f"{tag}: grad {k} is {grad.dtype} or not finite")
                elif _rel(grad, ref["grads"][k]) > grad_rtol:
                    fails.append(f"{tag}: grad {k} differs by {_rel(grad, ref['grads'][k]):.3g}")
            # the messages: every collective carries 2-byte elements but BatchNorm's sums
            # and the loss's, which are float32
            for axis, b in got["bytes_per_element"].items():
                if not b < 4:
                    fails.append(f"{tag}: axis {axis} sends {b} bytes per element")
    return fails


def check_recompute(grid: Grid) -> list[str]:
    """With and without recomputation: the same step to float rounding, both graphs."""
    fails = []
    for gname, g in (("undirected", toy_graph()), ("directed", directed_toy_graph())):
        for name, cfg in RECOMPUTE_MODELS.items():
            ref = _step(grid, g, cfg, EngineConfig())
            got = _step(grid, g, cfg, EngineConfig(recompute=True))
            pairs = [("logits", got["logits"], ref["logits"]), ("loss", got["loss"], ref["loss"]),
                     ("eval", got["eval"], ref["eval"])]
            pairs += [(f"grad {k}", got["grads"][k], ref["grads"][k]) for k in ref["grads"]]
            pairs += [(f"stat {k}", got["stats"][k], ref["stats"][k]) for k in ref["stats"]]
            if set(got["grads"]) != set(ref["grads"]):
                fails.append(f"{gname}/{name}: parameters differ")
            for what, a, b in pairs:
                if not torch.allclose(a, b, rtol=0, atol=RECOMPUTE_ATOL):
                    err = float((a - b).abs().max())
                    fails.append(f"{gname}/{name}: {what} differs by {err:.3g}")
    return fails


def peak_step_bytes(engine: EngineConfig, norm: str) -> int:
    """Tracked tensor peak of one training step (forward, backward, Adam) of a 3-layer GCN
    (with ``norm``) on an R-MAT graph of 4096 nodes, 1 rank, as plexus-train counts it."""
    from plexus.api import distributed_model
    from plexus_datasets import load_dataset
    from plexus.runtime.memstats import TensorTracker, resident_storages

    g = load_dataset("rmat:scale=12,edge_factor=8,features=64,classes=8,seed=0")
    cfg = ModelConfig(3, 64, 0.5, norm=norm)
    model = distributed_model(g, Grid.create((1, 1, 1)), cfg, seed=0, engine=engine)
    if engine.dtype != "fp32":  # as plexus.train.session: the model has its own copies
        model.shard.release_values()
    trainer = Trainer(model, TrainConfig(epochs=1, eval_every=0))
    trainer.train_step()  # Adam's moments exist from here on: the second step is the steady one
    tracker = TensorTracker(resident_storages(model, model.shard))
    with tracker:
        trainer.train_step()
    return tracker.peak_bytes


def run_checks(dims: tuple[int, int, int], precision: bool, recompute: bool) -> dict:
    grid = Grid.create(dims)
    out: dict = {}
    if precision:
        out["precision"] = check_precision(grid)
    if recompute:
        out["recompute"] = check_recompute(grid)
    if dims == (1, 1, 1):
        out["peak"] = {f"{name}/{norm}": peak_step_bytes(engine, norm)
                       for name, engine in (("fp32", EngineConfig()),
                                            ("bf16", EngineConfig(dtype="bf16")),
                                            ("recompute", EngineConfig(recompute=True)))
                       for norm in ("none", "batch")}
    return out


WORLDS = {1: ((1, 1, 1), True, True), 2: ((2, 1, 1), True, False), 4: ((1, 2, 2), False, True)}
worlds.declare("precision", __file__, {size: (run_checks, args) for size, args in WORLDS.items()})


def world(size: int) -> list[dict]:
    """Every rank's results of the world of ``size`` ranks (run once, in the session's shared
    world of that size: `tests/worlds.py`)."""
    return worlds.ranks(size, "precision")


def _failures(size: int, key: str) -> list[str]:
    return [f"rank {r}: {m}" for r, res in enumerate(world(size)) for m in res[key]]


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 2])
def test_low_precision_logits_are_close_and_gradients_float32(size):
    fails = _failures(size, "precision")
    assert not fails, "\n".join(fails[:20])


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 4])
def test_recompute_equals_keeping_activations(size):
    fails = _failures(size, "recompute")
    assert not fails, "\n".join(fails[:20])


@pytest.mark.slow
def test_recompute_and_bf16_hold_fewer_bytes_at_the_peak():
    peak = world(1)[0]["peak"]
    for norm in ("none", "batch"):  # measured: -16 % and -18 %
        assert peak[f"recompute/{norm}"] < 0.9 * peak[f"fp32/{norm}"], peak
    # measured: -35 %; with BatchNorm, whose statistics and saved tensors are float32, -15 %
    assert peak["bf16/none"] < 0.75 * peak["fp32/none"], peak
    assert peak["bf16/batch"] < 0.95 * peak["fp32/batch"], peak


@pytest.mark.parametrize("device,ratio", [("cuda", 0.6), ("cpu", 0.65)])
def test_memory_model_prices_activations_in_the_compute_precision(device, ratio):
    """bf16 about halves a step's tensors; on CPUs the dropout mask's 32-bit hash words (the
    same in every precision: no fused kernel there) take a little of that back."""
    spec = dict(num_nodes=1 << 16, nnz=2_000_000, num_features=128, num_classes=16,
                num_layers=3, hidden=256, device=device)
    fp32 = epoch_memory(ModelSpec.of(**spec), (1, 1, 1))
    bf16 = epoch_memory(ModelSpec.of(**spec, dtype_bytes=2), (1, 1, 1))
    assert bf16.activations + bf16.workspace < ratio * (fp32.activations + fp32.workspace)
    assert bf16.adjacency < fp32.adjacency and bf16.features < fp32.features
    assert bf16.optimizer == fp32.optimizer  # Adam's moments stay float32
    assert fp32.weights < bf16.weights < 1.5 * fp32.weights  # float32 master + 2-byte casts


def test_engine_config_refuses_an_unknown_dtype_and_scipy_in_bf16():
    from plexus.engine.spmm import check_backend

    with pytest.raises(ValueError, match="unknown compute dtype 'fp8'"):
        EngineConfig(dtype="fp8")
    with pytest.raises(ValueError, match="float32 only"):
        check_backend("scipy", torch.device("cpu"), torch.bfloat16)


def test_command_line_flags_reach_the_engine_config():
    from plexus_partition.launch.env import JobEnv
    from plexus.train.cli import build_plan, build_parser

    env = JobEnv("torchrun", 0, 1, 0, 1, "127.0.0.1", 29500)  # a launched rank: cheap checks
    opts = build_plan(build_parser().parse_args(["--grid", "1x1x1"]), env)
    assert (opts.engine.dtype, opts.engine.recompute) == ("fp32", False)
    argv = ["--grid", "1x1x1", "--dtype", "bf16", "--recompute"]
    opts = build_plan(build_parser().parse_args(argv), env)
    assert (opts.engine.dtype, opts.engine.recompute) == ("bf16", True)
