"""torch.optim's Adam, AdamW and SGD without importing torch._dynamo (seconds of CPU).

torch.optim decorates an optimizer's ``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` so that torch.compile never traces them, wraps ``step`` in a function that
turns gradients off around graph breaks, and times ``step`` and ``zero_grad`` with the
profiler's ``record_function``; each of these imports torch._dynamo on its first call, which
costs a first epoch about 2 s of CPU (more than everything else a small run does). Eager
training never compiles, so the classes here call the undecorated functions (``__wrapped__``,
which the decorators set) and run the step hooks themselves: the very same update code runs, so
the numbers are torch.optim's bit for bit. Where a torch version has no ``__wrapped__`` the
decorated function runs, as before (slower to start, same numbers).
"""

from __future__ import annotations

import inspect
from itertools import chain
from typing import Any, Callable

import torch
import torch.optim.optimizer as _torch_optimizer


def _plain(cls: type, name: str) -> Callable[..., Any]:
    """``cls.name`` without the decorators torch.optim wraps it in (profiling hooks, dynamo's)."""
    return inspect.unwrap(getattr(cls, name))


class _Eager:
    """Mixin before a torch.optim class: its methods without torch._dynamo."""

    defaults: dict[str, Any]
    param_groups: list[dict[str, Any]]
    _optimizer_step_pre_hooks: dict[int, Callable[..., Any]]
    _optimizer_step_post_hooks: dict[int, Callable[..., Any]]

    def _patch_step_function(self) -> None:
        # torch.optim wraps the class's step in a profiled one here; `step` below runs the hooks
        self._zero_grad_profile_name = f"Optimizer.zero_grad#{type(self).__name__}.zero_grad"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _plain(torch.optim.Optimizer, "add_param_group")(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:  # zeroing in place: torch.optim's own (rare; imports dynamo)
            torch.optim.Optimizer.zero_grad(self, set_to_none)  # type: ignore[arg-type]
            return
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return _plain(torch.optim.Optimizer, "state_dict")(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _plain(torch.optim.Optimizer, "load_state_dict")(self, state_dict)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """torch.optim's step with its hooks (global, then this optimizer's), gradients off
        unless the optimizer is differentiable, as torch.optim's step wrapper does."""
        args: tuple = (self,) if closure is None else (self, closure)
        kwargs: dict[str, Any] = {}
        for hook in chain(getattr(_torch_optimizer, "_global_optimizer_pre_hooks", {}).values(),
                          self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                args, kwargs = result
        base = next(c for c in type(self).__mro__[1:]
                    if c.__module__.startswith("torch.optim") and "step" in vars(c))
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            out = _plain(base, "step")(*args, **kwargs)
        for hook in chain(self._optimizer_step_post_hooks.values(),
                          getattr(_torch_optimizer, "_global_optimizer_post_hooks", {}).values()):
            hook(self, args, kwargs)
        return out


class Adam(_Eager, torch.optim.Adam):
    """torch.optim.Adam, constructed and stepped without importing torch._dynamo."""


class AdamW(_Eager, torch.optim.AdamW):
    """torch.optim.AdamW, constructed and stepped without importing torch._dynamo."""


class SGD(_Eager, torch.optim.SGD):
    """torch.optim.SGD, constructed and stepped without importing torch._dynamo."""
