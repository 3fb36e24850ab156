"""The tolerance every exactness check shares: a distributed result against its reference (the
serial model, `plexus.testing.exactness`; 1x1x1, `plexus.nn.check_layer`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# float32 on both sides; the reductions run in another order on a grid than serially
RTOL, ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class Difference:
    """How far a tensor is from its reference: the largest absolute difference, the tolerance
    it is held to (`ATOL` in units of the reference's largest value once that exceeds 1, as
    float32 rounding grows with the size of what is summed) and whether every element is
    within ``RTOL``·|reference| + that. A shape mismatch is never close."""

    max_abs: float
    scale: float
    close: bool
    shape_error: str = ""

    def message(self, name: str) -> str:
        """One line saying how ``name`` differs ('' when it is close)."""
        if self.shape_error:
            return f"{name}: {self.shape_error}"
        if self.close:
            return ""
        return f"{name}: max abs error {self.max_abs:.3g} (largest value {self.scale:.3g})"


def difference(got: torch.Tensor, want: torch.Tensor) -> Difference:
    """`Difference` of ``got`` from ``want`` (any devices; compared in float64 on the CPU)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if got.shape != want.shape:
        return Difference(float("inf"), 1.0, False,
                          f"shape {tuple(got.shape)} != {tuple(want.shape)}")
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    max_abs = (got - want).abs().max().item() if want.numel() else 0.0
    return Difference(max_abs, scale, torch.allclose(got, want, rtol=RTOL, atol=ATOL * scale))


def close(name: str, got: torch.Tensor, want: torch.Tensor) -> list[str]:
    """[] when ``got`` is close to ``want`` (see `Difference`), else the one failure message."""
    message = difference(got, want).message(name)
    return [message] if message else []
