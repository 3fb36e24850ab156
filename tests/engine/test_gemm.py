"""The GEMM tuner: every formulation computes a @ b, and each call site keeps the fastest one."""

from __future__ import annotations

import time

import pytest
import torch

from plexus.engine.gemm import FORMULATIONS, GemmTuner, default_formulation


def operands() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The layouts the engine multiplies: contiguous, transposed views (dB = aᵀ·dY, dA = dY·Wᵀ)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 5, generator=g), torch.randn(5, 3, generator=g)
    big = torch.randn(5, 37, generator=g)
    return [(a, b), (big.T, b), (a, torch.randn(3, 5, generator=g).T), (a.T, torch.randn(37, 2))]


@pytest.mark.parametrize("name", sorted(FORMULATIONS))
def test_every_formulation_is_the_product(name):
    for a, b in operands():
        torch.testing.assert_close(FORMULATIONS[name](a, b), a @ b)


def test_the_tuner_keeps_each_sites_fastest_formulation(monkeypatch):
    fake = {"direct": 3.0, "transposed": 1.0, "contiguous": 2.0}
    timed = []

    def time_it(self, f, a, b):
        name = next(n for n, g in FORMULATIONS.items() if g is f)
        timed.append(name)
        return fake[name]

    monkeypatch.setattr(GemmTuner, "_time", time_it)
    tuner = GemmTuner(enabled=True)
    a, b = operands()[1]
    for _ in range(3):
        torch.testing.assert_close(tuner.mm("site", a, b), a @ b)
    assert sorted(timed) == sorted(FORMULATIONS)  # timed once, on the first call
    assert tuner.choice == {("site", (37, 5), (5, 3), a.stride(), b.stride()): "transposed"}
    tuner.mm("site", a.contiguous(), b)  # another layout is another choice
    assert len(tuner.choice) == 2 and len(timed) == 2 * len(FORMULATIONS)


def test_untuned_products_follow_a_fixed_rule_without_timing(monkeypatch):
    monkeypatch.setattr(GemmTuner, "_time", lambda *args: pytest.fail("timed"))
    tuner = GemmTuner()
    for a, b in operands():
        torch.testing.assert_close(tuner.mm("site", a, b), a @ b)
    assert tuner.choice == {}
    g = torch.randn(100, 8)
    wide = torch.randn(100, 16)
    act = torch.randn(100, 32)
    assert default_formulation(act.T, g) == "transposed"  # dW = AGGᵀ·dOUT, narrow: the cliff
    assert default_formulation(act.T, wide) == "direct"
    assert default_formulation(act, torch.randn(32, 8)) == "direct"  # row-major left operand


def test_the_tuner_avoids_a_slow_formulation(monkeypatch):
    """The real clock: a formulation that burns 50 ms more CPU than the others is not chosen."""

    def slow_direct(a, b):
        end = time.process_time() + 0.05  # the tuner times CPU products by process CPU time
        while time.process_time() < end:
            pass
        return a @ b

    monkeypatch.setitem(FORMULATIONS, "direct", slow_direct)
    tuner = GemmTuner(enabled=True)
    a, b = operands()[0]
    tuner.mm("site", a, b)
    assert list(tuner.choice.values()) in (["transposed"], ["contiguous"])
