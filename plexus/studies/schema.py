"""The shapes of the JSON a study reads back: a sweep's manifest and plexus-train's JSON log.

Both are files a user may edit, truncate or copy from elsewhere, so they are parsed strictly
(`parse_json`: no NaN or Infinity, which JSON does not have) and checked against a small schema
before any field is used; the first mismatch is one line naming the file and the field, e.g.
``OUT/manifest.json: runs.x: expected an object, got a str``.

A schema is a Python value: a type (``int``, ``str``, ``bool``, ``float`` for any finite number,
``dict``/``list`` for any object/array, ``None`` for null), a tuple of alternatives, a
`Obj` (named fields, required and optional; other fields allowed), a `DictOf` (any keys, one
value schema) or a `ListOf`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable


class SchemaError(ValueError):
    """A JSON document that does not have the expected shape (a one-line message)."""


@dataclass(frozen=True)
class Obj:
    """A JSON object with ``required`` and ``optional`` fields (others are allowed)."""

    required: dict[str, Any] = field(default_factory=dict)
    optional: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DictOf:
    """A JSON object whose values all match ``value``."""

    value: Any


@dataclass(frozen=True)
class ListOf:
    """A JSON array whose items all match ``item``."""

    item: Any


Number = float  # any finite number (an int too)
Maybe = lambda schema: (schema, None)  # noqa: E731 - a schema or null

_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer",
          float: "a number", bool: "true or false", type(None): "null"}


def _name(schema: Any) -> str:
    if isinstance(schema, tuple):
        return " or ".join(_name(s) for s in schema)
    if schema is None:
        return "null"
    if isinstance(schema, (Obj, DictOf)):
        return "an object"
    if isinstance(schema, ListOf):
        return "an array"
    return _NAMES.get(schema, str(schema))


def _got(value: Any) -> str:
    kind = _NAMES.get(type(value), type(value).__name__)
    text = json.dumps(value)[:40] if not isinstance(value, (dict, list)) else ""
    return f"{kind} ({text})" if text else kind


def _matches_type(value: Any, schema: Any) -> bool:
    if schema is None:
        return value is None
    if schema is bool:
        return isinstance(value, bool)
    if schema is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if schema is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
    return isinstance(value, schema)


def _first(checks: Iterable[tuple[Any, Any, str]]) -> str | None:
    """The first problem among (value, schema, where) checks, in their order (None: none)."""
    return next(filter(None, (problem(v, s, w) for v, s, w in checks)), None)


def problem(value: Any, schema: Any, where: str = "") -> str | None:
    """The first place where ``value`` does not match ``schema`` (None: it matches)."""
    at = where or "the document"
    if isinstance(schema, tuple):
        found = [problem(value, s, where) for s in schema]
        if any(p is None for p in found):
            return None
        shallow = [p for s, p in zip(schema, found) if _shallow_ok(value, s)]
        return shallow[0] if shallow else f"{at}: expected {_name(schema)}, got {_got(value)}"
    if isinstance(schema, (Obj, DictOf)) and not isinstance(value, dict):
        return f"{at}: expected an object, got {_got(value)}"
    if isinstance(schema, Obj):
        for key, sub in schema.required.items():
            if key not in value:
                return f"{at}: the field {key!r} is missing"
        return _first((value[key], sub, f"{where}.{key}" if where else key)
                      for key, sub in {**schema.required, **schema.optional}.items()
                      if key in value)
    if isinstance(schema, DictOf):
        return _first((item, schema.value, f"{where}.{key}" if where else str(key))
                      for key, item in value.items())
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            return f"{at}: expected an array, got {_got(value)}"
        return _first((item, schema.item, f"{where}[{i}]") for i, item in enumerate(value))
    if not _matches_type(value, schema):
        return f"{at}: expected {_name(schema)}, got {_got(value)}"
    return None


def _shallow_ok(value: Any, schema: Any) -> bool:
    """Whether ``value`` has the outer type of ``schema`` (which alternative was meant)."""
    if isinstance(schema, (Obj, DictOf)):
        return isinstance(value, dict)
    if isinstance(schema, ListOf):
        return isinstance(value, list)
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, where: str) -> Any:
    """``text`` as strict JSON (NaN and Infinity refused); `SchemaError` naming ``where``."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise SchemaError(f"{where}: nested too deeply to be a results file") from None
    except ValueError as e:
        raise SchemaError(f"{where}: not valid JSON ({' '.join(str(e).split())[:120]})") from None


def check(value: Any, schema: Any, where: str) -> Any:
    """``value`` when it matches ``schema``; otherwise `SchemaError` naming ``where``."""
    found = problem(value, schema)
    if found:
        raise SchemaError(f"{where}: {found}")
    return value


# ---- the documents ----------------------------------------------------------------------------
Strings = ListOf(str)

#: One run's record in a sweep's manifest (`plexus.studies.sweep.merge` writes it).
RUN_RECORD = Obj(
    required={"dataset": str, "grid": str, "world_size": int, "repeat": int, "studies": Strings,
              "picked_by": Strings, "log": str, "state": str},
    optional={"command": Strings, "launcher": str, "exit_status": int, "wall_s": float,
              "script": str})

#: A sweep's manifest.json.
MANIFEST = Obj(
    required={"format": int, "common": Obj(required={"epochs": int, "model": dict}),
              "requests": ListOf(Obj(optional={"time": str, "argv": Strings, "launcher": str,
                                               "request": dict})),
              "runs": DictOf(RUN_RECORD),
              "weak_series": ListOf(Obj(required={"base": str, "datasets": DictOf(str)}))})

_MAYBE_NUMBER = (float, None)
_PER_RANK = (ListOf((float, None)), None)  # bytes per rank (int or float)

#: An epoch record of a plexus-train JSON log (the fields a report reads).
EPOCH_RECORD = Obj(
    required={"epoch": int},
    optional={"loss": _MAYBE_NUMBER, "train_acc": _MAYBE_NUMBER, "val_acc": _MAYBE_NUMBER,
              "test_acc": _MAYBE_NUMBER, "epoch_time_s": _MAYBE_NUMBER,
              "eval_time_s": _MAYBE_NUMBER})

#: The summary record that ends a plexus-train JSON log (the fields a report reads).
SUMMARY_RECORD = Obj(
    required={"summary": bool, "grid": str, "epochs": int},
    optional={
        "dataset": (str, None), "epochs_run": int, "world_size": int,
        "final": (Obj(optional={"loss": _MAYBE_NUMBER}), None),
        "graph": (Obj(required={"nodes": int, "nnz": int, "features": int, "classes": int}),
                  None),
        "model": (Obj(optional={"layers": int, "hidden": int, "orders": Strings, "bias": bool,
                                "learnable_features": bool, "perm": str}), None),
        "timers": (DictOf(Obj(required={"max": float, "mean": float})), None),
        "timers_timed": (Obj(required={"epochs": int, "timers": DictOf(Obj(
            required={"max": float, "mean": float}))}), None),
        "comm_bytes": (DictOf(float), None), "comm_bytes_max_rank": (DictOf(float), None),
        "comm_bytes_declared_max_rank": (DictOf(float), None), "sparse_comm": (str, None),
        "memory": (Obj(optional={"peak_rss_bytes": _PER_RANK, "tracked_peak_bytes": _PER_RANK,
                                 "cuda_peak_bytes": _PER_RANK,
                                 "predicted_bytes": _MAYBE_NUMBER}), None),
        "environment": (dict, None)})
