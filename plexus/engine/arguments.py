"""The arguments of the public API's entries checked before anything is built (issue 56, item
5): a wrong type or a value out of the one table of bounds (`plexus_partition.model.bounds`) is
one line naming the argument, what it must be and what was given, never a bare
``AttributeError`` from deep inside, a page of c10d's C++ stack, or a silent acceptance.
"""

from __future__ import annotations

import keyword
import math
from typing import Any

from plexus_partition.model.bounds import MAX_TIMEOUT_S


class ArgumentError(TypeError, ValueError):
    """An argument of a public API call of the wrong type or out of its bounds (one line);
    both a `TypeError` and a `ValueError`, so either ``except`` catches it."""


def shown(value: Any) -> str:
    """``value`` as a message shows it: its type, and its text cut at 40 characters."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def check_kind(value: Any, kinds: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` when it is an instance of ``kinds``; `ArgumentError` ("``where``: ``what``
    must be ..., got ...") otherwise."""
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in (
            kinds if isinstance(kinds, tuple) else (kinds,)):
        names = " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise ArgumentError(f"{where}: {what} must be a {names}, got {shown(value)}")
    return value


def check_callable(fn: Any, where: str, what: str = "fn") -> Any:
    """``fn`` when it can be called; `ArgumentError` otherwise."""
    if not callable(fn):
        raise ArgumentError(f"{where}: {what} must be a function, got {shown(fn)}")
    return fn


def check_timeout(timeout_s: Any, where: str) -> float:
    """A timeout in seconds: a finite number > 0 and at most `MAX_TIMEOUT_S` (the table's)."""
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
            or not math.isfinite(timeout_s) or not 0 < timeout_s <= MAX_TIMEOUT_S):
        raise ArgumentError(f"{where}: timeout_s must be a number of seconds > 0 and at most "
                            f"{MAX_TIMEOUT_S}, got {shown(timeout_s)}")
    return float(timeout_s)


def check_name(name: Any, taken: Any, where: str) -> str:
    """A parameter's name: a Python identifier (it becomes ``self.<name>``; never a path such
    as ``"../x"``), not a keyword, not ``taken`` already (declared twice)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ArgumentError(f"{where}: a parameter's name must be a Python identifier (it "
                            f"becomes self.<name>), got {shown(name)}")
    if name in taken:
        raise ArgumentError(f"{where}: parameter {name!r} is declared twice; give each its "
                            "own name")
    return name


def check_model_and_config(model: Any, cfg: Any) -> None:
    """`plexus.engine.trainer.Trainer`'s arguments: a model with parameters to train (a
    `Network`, a `GraphModel`, a serial model: its ``named_shards``) and a `TrainConfig`."""
    from .config import TrainConfig  # noqa: PLC0415

    if not callable(getattr(model, "named_shards", None)):
        raise ArgumentError("Trainer: model must be a plexus model (a Network, GraphModel or "
                            f"SerialModel: it has no named_shards()), got {shown(model)}")
    check_kind(cfg, TrainConfig, "Trainer", "cfg")
