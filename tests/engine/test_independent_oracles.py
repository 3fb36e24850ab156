"""Tests that fail when the code is wrong (issue 46 item 6): each compares with an oracle
written here, independently of the module under test — the documented dropout hash
reimplemented in plain Python with its constants written out, hand-computed optimizer steps
and early-stopping epochs, fake clocks and fake CUDA events, a mocked GPU memory query. Every
test here kills a mutant of ``benchmarks/mutants.py`` (benchmarks/results/mutation_round5.md
names which)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

from plexus.engine import masks, pieces, timing
from plexus.engine.config import TrainConfig
from plexus.engine.trainer import Trainer

# ---- the dropout hash, as documented (plexus.engine.masks), constants written out ------------
M32, MUL, GOLDEN, KEY0, EDGE_STREAM = 0xFFFFFFFF, 0x45D9F3B, 0x61C88647, 0x2545F491, 0xA77E


def fmix(x: int) -> int:
    x = (((x >> 16) ^ x) * MUL) & M32
    x = (((x >> 16) ^ x) * MUL) & M32
    return (x >> 16) ^ x


def key(*parts: int) -> int:
    k = KEY0
    for p in parts:
        k = fmix((k + (p & M32) * GOLDEN) & M32)
    return k


def feature_uniform(seed: int, step: int, layer: int, row: int, col: int) -> int:
    """The unsigned 16-bit uniform of element (row, col), top bit flipped: kept when >=
    round(p·65536)."""
    k_row = key(seed, step, layer)
    k_col = key(k_row, 1)
    h = fmix((row & M32) ^ k_row) ^ fmix(((col // 2) * GOLDEN & M32) ^ k_col)
    for _ in range(2):
        h = (h * MUL) & M32
        h ^= h >> 16
    half = (h >> 16) if col % 2 else (h & 0xFFFF)
    return half ^ 0x8000


def edge_uniform(seed: int, step: int, layer: int, head: int, dst: int, src: int) -> int:
    """The 24-bit uniform of edge src -> dst for ``head``: kept when >= round(p·2**24)."""
    k = key(seed, step, layer, EDGE_STREAM)
    k_src = key(k, 1)
    h = fmix((dst & M32) ^ k)
    h = fmix(h ^ fmix((src * GOLDEN & M32) ^ k_src))
    return fmix(h ^ key(k, 2, head)) >> 8


# ids past 2**32 (only their low 32 bits count) and below it
ROWS = [0, 1, 7, 12345, 2**31 + 5, 2**32 - 1, 2**32 + 3, 2**40 + 77, 3 * 2**33 + 1]
CASES = [(0, 0, 0), (5, 17, 1), (2**33 + 2, 7919, 3)]


@pytest.mark.parametrize("seed, step, layer", CASES)
def test_feature_masks_equal_the_documented_hash(seed, step, layer):
    cols, col_start = 9, 3
    for p in (0.3, 0.5):
        got = masks.dropout_keep(seed, step, layer, torch.tensor(ROWS), col_start, cols, p)
        want = [[feature_uniform(seed, step, layer, r, col_start + c) >= round(p * 65536)
                 for c in range(cols)] for r in ROWS]
        assert got.tolist() == want


@pytest.mark.parametrize("seed, step, layer", CASES)
def test_edge_masks_equal_the_documented_hash(seed, step, layer):
    dst = ROWS + [3, 2**32 + 9]
    src = list(reversed(ROWS)) + [2**35 + 1, 4]
    for heads, p in ((1, 0.3), (3, 0.6)):
        got = masks.edge_keep(seed, step, layer, heads, torch.tensor(dst), torch.tensor(src), p)
        want = [[edge_uniform(seed, step, layer, k, d, s) >= round(p * 2**24)
                 for k in range(heads)] for d, s in zip(dst, src)]
        assert got.tolist() == want


def test_an_id_and_the_same_id_plus_2_to_the_32_share_a_mask():
    a = masks.dropout_keep(1, 2, 3, torch.tensor([5, 5 + 2**32, 5 + 2**40]), 0, 64, 0.5)
    assert torch.equal(a[0], a[1]) and torch.equal(a[0], a[2])
    e = masks.edge_keep(1, 2, 3, 4, torch.tensor([9, 9 + 2**32]), torch.tensor([2, 2]), 0.5)
    assert torch.equal(e[0], e[1])


def test_an_element_exactly_at_the_threshold_is_kept():
    """p chosen so that one element's uniform equals the threshold: kept (>=), as documented."""
    seed, step, layer, row, col = 3, 4, 1, 2**32 + 11, 6
    u = feature_uniform(seed, step, layer, row, col)
    keep = masks.dropout_keep(seed, step, layer, torch.tensor([row]), col, 1, u / 65536)
    assert keep.item() is True
    assert masks.dropout_keep(seed, step, layer, torch.tensor([row]), col, 1,
                              (u + 1) / 65536).item() is False
    dst, src = 2**33 + 5, 17
    u = edge_uniform(seed, step, layer, 0, dst, src)
    keep = masks.edge_keep(seed, step, layer, 1, torch.tensor([dst]), torch.tensor([src]),
                           u / 2**24)
    assert keep.item() is True
    assert masks.edge_keep(seed, step, layer, 1, torch.tensor([dst]), torch.tensor([src]),
                           (u + 1) / 2**24).item() is False


def test_the_triton_kernels_take_the_hash_constants_from_maskhash():
    """The kernels hold no copy of the constants (the source of plexus.core.maskhash is the one
    place): no integer literal of the multipliers in triton_masks.py, and it reads them from
    maskhash (the module is read as text: Triton need not be installed)."""
    path = Path(masks.__file__).with_name("triton_masks.py")
    tree = ast.parse(path.read_text())
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                and isinstance(n.value, int)}
    assert not literals & {MUL, GOLDEN, KEY0}, "a hash constant is copied into the kernels"
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and n.module == "plexus.core.maskhash"]
    assert {a.name for i in imports for a in i.names} >= {"MUL", "GOLDEN"}


# ---- the CUDA piece budget (a mocked driver query) -----------------------------------------
def test_the_cuda_piece_budget_is_an_eighth_of_the_free_memory(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * gib, 80 * gib))
    assert pieces.piece_budget(torch.device("cuda", 0), local_ranks=2) == 3 * gib / 8 / 2
    assert pieces.piece_budget(torch.device("cuda", 0), local_ranks=1) == 3 * gib / 8


# ---- timers (a fake clock; fake CUDA events) -----------------------------------------------
def test_the_cpu_timer_adds_up_its_regions(monkeypatch):
    ticks = iter([100.0, 101.0, 200.0, 202.5, 300.0, 300.25])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    t = timing.Timers(torch.device("cpu"))
    for name in ("spmm", "spmm", "gemm"):
        with t(name):
            pass
    assert dict(t.seconds) == {"spmm": 3.5, "gemm": 0.25}


class FakeEvent:
    """A CUDA event on one in-order stream: complete only once synchronized (it or a later
    one); reading the time of an incomplete one is an error, as on CUDA."""

    clock = 0.0
    recorded: list["FakeEvent"] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.at, self.done = None, False

    def record(self) -> None:
        FakeEvent.clock += 1.5
        self.at = FakeEvent.clock
        FakeEvent.recorded.append(self)

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        for e in FakeEvent.recorded[:FakeEvent.recorded.index(self) + 1]:
            e.done = True

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.done and end.done, "elapsed_time of an event not yet complete"
        return (end.at - self.at) * 1e3


def test_the_cuda_timer_waits_for_its_last_event(monkeypatch):
    FakeEvent.clock, FakeEvent.recorded = 0.0, []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    t = timing.Timers(torch.device("cuda"))
    for name in ("a", "b", "a"):
        with t(name):
            FakeEvent.clock += 1.0  # the region's work: 1 s between its events' records
    assert not any(e.done for e in FakeEvent.recorded)  # recording waited for nothing
    assert dict(t.seconds) == {"a": 5.0, "b": 2.5}  # (1.5 + 1.0) per region


# ---- the loop (a one-parameter model: every step computed by hand) -------------------------
class LinearModel:
    """loss = c·w: the gradient is c at every step. ``vals``: the validation metric of each
    evaluation, scripted."""

    def __init__(self, vals=()) -> None:
        self.w = nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
        self.c = torch.tensor([0.5, -1.0], dtype=torch.float64)
        self.vals, self.evaluated = list(vals), 0

    def __call__(self, step=None):
        return self.w

    def loss(self, logits, mask="train"):
        return (logits * self.c).sum()

    def metrics(self, logits):
        self.evaluated += 1
        return {"train": 0.0, "val": self.vals[self.evaluated - 1], "test": 0.0}

    def named_shards(self):
        return {"w": self.w}

    def full_parameter(self, name, t):
        return t.detach()

    def shard_of(self, name, full):
        return full

    def named_stats(self):
        return {}

    def parameter_layer(self, name):
        return 0

    def grad_norm(self):
        return self.w.grad.norm()

    def train(self):
        pass

    def eval(self):
        pass


def test_sgd_applies_its_momentum():
    lr, m = 0.1, 0.9
    t = Trainer(LinearModel(), TrainConfig(epochs=2, lr=lr, weight_decay=0.0, optimizer="sgd",
                                           momentum=m, eval_every=0))
    t.fit()
    # v1 = c, w1 = w0 - lr·c; v2 = m·c + c, w2 = w1 - lr·(1 + m)·c
    want = torch.tensor([1.0, 2.0], dtype=torch.float64) - lr * (2 + m) * t.model.c
    assert torch.allclose(t.w if hasattr(t, "w") else t.model.w.detach(), want, atol=1e-12)


VALS = [0.5, 0.6, 0.6, 0.55, 0.6, 0.4, 0.3, 0.2, 0.1]


def test_early_stopping_stops_patience_epochs_after_the_best():
    """Best 0.6 at epoch 2 (the earliest of the ties); patience 3 stops at epoch 2 + 3 = 5."""
    t = Trainer(LinearModel(VALS), TrainConfig(epochs=9, lr=0.01, patience=3))
    history = t.fit()
    assert (len(history), t.stopped, t.best.epoch, t.best.val_acc) == (5, 5, 2, 0.6)


def test_a_resumed_run_keeps_its_early_stop_and_best_epoch():
    cfg = TrainConfig(epochs=9, lr=0.01, patience=3)
    t = Trainer(LinearModel(VALS), cfg)
    t.fit()
    again = Trainer(LinearModel(VALS), cfg)
    again.load_full_state(t.full_state())
    assert (again.stopped, again.best.epoch, again.best.val_acc, again.epoch) == (5, 2, 0.6, 5)
    assert again.fit() == []  # it had stopped: nothing more to train


def test_a_cosine_resume_with_other_epochs_is_refused():
    from plexus.engine.config import ModelConfig
    from plexus.train import checkpoint as ckpt

    payload = ckpt.make_checkpoint({"epoch": 3, "params": {}, "adam": {}}, ModelConfig(),
                                   TrainConfig(epochs=10, lr_schedule="cosine"),
                                   ckpt.DatasetInfo("cora", 2708, 1433, 7))
    ckpt.check_loop(payload, TrainConfig(epochs=10, lr_schedule="cosine"))
    with pytest.raises(ckpt.CheckpointError, match="--epochs 10 .now 20; the cosine"):
        ckpt.check_loop(payload, TrainConfig(epochs=20, lr_schedule="cosine"))


# ---- the performance model -----------------------------------------------------------------
def test_group_link_takes_the_nearest_measured_world():
    from plexus.perfmodel.calibration import Calibration

    cal = Calibration(groups=((2, 2, 1e-5, 1e-9), (4, 2, 2e-5, 2e-9), (16, 2, 9e-5, 9e-9)))
    assert cal.group_link(4, 2) == (2e-5, 2e-9)
    assert cal.group_link(3, 2) == (2e-5, 2e-9)  # |log 4/3| < |log 2/3|
    assert cal.group_link(1, 2) == (1e-5, 1e-9)
    assert cal.group_link(64, 2) == (9e-5, 9e-9)


# ---- plexus.nn's checks ------------------------------------------------------------------------
def test_the_exactness_tolerance_fails_a_small_relative_error():
    """1e-3 relative off is far outside float32 reordering (1e-4): it must FAIL; 1e-6 passes."""
    from plexus.engine.tolerance import difference

    want = torch.linspace(-3, 3, 50, dtype=torch.float64)
    assert not difference(want * (1 + 1e-3), want).close
    assert not difference(want + 2e-3, want).close
    assert difference(want * (1 + 1e-6), want).close


def test_a_parameter_used_directly_on_a_laid_tensor_is_refused():
    from plexus.nn.layouts import LayoutError, laid

    x = laid(torch.ones(3, 2), "nodes×in")
    w = nn.Parameter(torch.ones(2))
    with pytest.raises(LayoutError, match="a parameter shard used directly"):
        x * w
    # a plain tensor is fine
    assert torch.equal(torch.as_tensor(x * torch.ones(2)), torch.ones(3, 2))


def test_the_fused_kernel_module_has_no_hash_of_its_own():
    """kernels.dropout's CPU-side arguments (keys, thresholds) come from masks: the kernel is
    handed the reference's keys, so a changed constant there reaches it (the Triton side reads
    maskhash, test above)."""
    src = inspect.getsource(masks.masked) + inspect.getsource(masks.edge_mask)
    assert "feature_keys" in src and "edge_keys" in src


def _layer_graph(order: str):
    """A `LayerGraph` on a stand-in stage: the checks run before the stage is called, and the
    stand-in answers any operation with a zero tensor."""
    from types import SimpleNamespace

    from plexus.nn.graph import LayerGraph

    stage = SimpleNamespace(plan=SimpleNamespace(order=order), comm=None)
    for op in ("aggregate", "head_sums", "attention", "sddmm", "to_rows"):
        setattr(stage, op, lambda *a, **k: torch.zeros(4, 2))
    return LayerGraph(stage, "MyLayer")


def test_per_edge_operations_are_refused_in_an_agg_layer():
    from plexus.nn.layouts import LayoutError, laid

    g = _layer_graph("agg")
    with pytest.raises(LayoutError, match="per-edge scores need the transformed"):
        g.attention(laid(torch.ones(4, 2), "Â-rows×heads"),
                    laid(torch.ones(4, 2), "nodes×heads"))
    with pytest.raises(LayoutError, match="per-edge scores need the transformed"):
        g.sddmm(laid(torch.ones(4, 2), "Â-rows×out"), laid(torch.ones(4, 2), "nodes×out"), 1, 2)
    # the same call in a combine layer is accepted
    _layer_graph("combine").attention(laid(torch.ones(4, 2), "Â-rows×heads"),
                                      laid(torch.ones(4, 2), "nodes×heads"))


@pytest.mark.parametrize("order, bad, good", [
    ("combine", ["nodes×in", "Â-rows×in", "edges"], ["nodes×out", "Â-rows×out"]),
    ("agg", ["nodes×in", "nodes×out", "Â-rows×in", "edges"], ["Â-rows×out"]),
])
def test_head_sums_takes_only_the_output_layouts(order, bad, good):
    from plexus.nn.layouts import LayoutError, laid, param_view

    g = _layer_graph(order)
    a = param_view(torch.ones(2), "vector", "a")  # a declared vector: only X's layout is wrong
    for layout in bad:
        with pytest.raises(LayoutError, match="g.head_sums: x"):
            g.head_sums(laid(torch.ones(4, 2), layout), a, 1, 2)
    for layout in good:
        g.head_sums(laid(torch.ones(4, 2), layout), a, 1, 2)


def test_aggregate_checks_the_layout_of_its_values():
    from plexus.nn.layouts import LayoutError, laid

    g = _layer_graph("combine")
    x = laid(torch.ones(4, 2), "nodes×out")
    for values in (laid(torch.ones(4, 1), "nodes×out"), laid(torch.ones(4, 1), "Â-rows×out"),
                   torch.ones(4, 1)):
        with pytest.raises(LayoutError, match="g.aggregate: values"):
            g.aggregate(x, values)
    g.aggregate(x, laid(torch.ones(6, 1), "edges"))
