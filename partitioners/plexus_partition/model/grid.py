"""The shape of an X×Y×Z process grid, as one value: parse, format, rank ↔ coordinates.

Rank order is ``rank = (x·Y + y)·Z + z``: z is the innermost axis, so the Z ranks of one (x, y)
are consecutive and share a node when a job is launched node by node. Everything that names a
grid (command lines, shard stores, checkpoints, logs, the performance model) goes through
`GridShape`, so the text form, the world size and the coordinates have one definition.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator, Mapping
from typing import Any

AXES = ("x", "y", "z")

# ASCII digits only: "\d" would also accept other scripts' digits (e.g. full-width "２").
_GRID_TEXT = re.compile(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*")


#: Most ranks a grid may have (2^20): beyond any machine, and every question about a world size
#: (its factorizations, the performance model's ranking) is answered at once up to it.
from .bounds import MAX_WORLD_SIZE  # noqa: E402 (the one table of bounds)


class GridError(ValueError):
    """A malformed grid, or one whose size does not match the job (a one-line message)."""


def _size(axis: str, value: Any) -> int:
    """A positive axis size; numpy integers are accepted, floats, bools and strings are not."""
    try:
        size = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        size = None
    if size is None or size < 1:
        raise GridError(f"grid axis {axis} must be a positive integer, got {value!r}")
    return int(size)


def check_world_size(world_size: Any, what: str = "world size") -> int:
    """``world_size`` as an int in [1, `MAX_WORLD_SIZE`]; raises `GridError` otherwise."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise GridError(f"{what} must be a positive integer, got {world_size!r}")
    if world_size > MAX_WORLD_SIZE:
        raise GridError(f"{what} has {world_size} ranks; at most {MAX_WORLD_SIZE} are supported")
    return world_size


def parse_world_sizes(text: str, largest: int = MAX_WORLD_SIZE,
                      most: int | None = None) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4): comma-separated world sizes, in the order given, repeats and empty
    items dropped. Raises `GridError` (its text reads after the option's name, "--world-sizes
    must ...") unless each is a whole number in [1, ``largest``] and at most ``most`` are
    given."""
    items = [t for t in text.split(",") if t.strip()]
    try:
        sizes = tuple(dict.fromkeys(int(t) for t in items))
    except ValueError:
        sizes = ()
    if (not sizes or min(sizes) < 1 or max(sizes) > largest
            or (most is not None and len(items) > most)):
        limit = f", at most {most} of them," if most is not None else ""
        raise GridError(f"must be whole numbers in [1, {largest}]{limit} separated by commas, "
                        f"got {text[:80]!r}")
    return sizes


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (trial division up to sqrt(n))."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


class GridShape(Mapping[str, int]):
    """Axis sizes of a 3D grid; a read-only mapping ``{"x": X, "y": Y, "z": Z}``.

    ``str(shape)`` is ``"XxYxZ"``, `parse` reads it back; `dims` is the (X, Y, Z) tuple.
    """

    __slots__ = ("_dims",)

    def __init__(self, x: int, y: int, z: int) -> None:
        self._dims: tuple[int, int, int] = (_size("x", x), _size("y", y), _size("z", z))
        check_world_size(self.world_size, f"grid {self}")

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "GridShape":
        """``"2x2x4"`` -> GridShape(2, 2, 4). Raises `GridError` naming the expected form."""
        m = _GRID_TEXT.fullmatch(text) if isinstance(text, str) else None
        if not m or min(int(g) for g in m.groups()) < 1:
            raise GridError(f"bad grid {text!r}: expected XxYxZ with positive integers, "
                            "e.g. 2x2x4")
        return cls(*(int(g) for g in m.groups()))

    @classmethod
    def of(cls, value: "GridShape | str | Mapping[str, int] | tuple[int, int, int] | list[int]"
           ) -> "GridShape":
        """A GridShape from any of its forms: itself, ``"2x2x4"``, ``{"x": 2, ...}``, (2, 2, 4)."""
        if isinstance(value, GridShape):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, Mapping):
            try:
                return cls(*(value[a] for a in AXES))
            except KeyError as e:
                raise GridError(f"grid {dict(value)!r} lacks axis {e.args[0]}") from None
        values = tuple(value)
        if len(values) != 3:
            raise GridError(f"a grid has 3 axis sizes, got {values!r}")
        return cls(*values)

    @classmethod
    def factorizations(cls, world_size: int) -> list["GridShape"]:
        """Every grid of ``world_size`` ranks (ordered X·Y·Z = world_size), x-major order."""
        check_world_size(world_size)
        divisors = _divisors(world_size)
        return [cls(x, y, world_size // (x * y)) for x in divisors for y in divisors
                if (world_size // x) % y == 0 and world_size % x == 0]

    # ---- views ----------------------------------------------------------------------------
    @property
    def dims(self) -> tuple[int, int, int]:
        """(X, Y, Z)."""
        return self._dims

    @property
    def world_size(self) -> int:
        """X·Y·Z ranks."""
        x, y, z = self._dims
        return x * y * z

    def as_dict(self) -> dict[str, int]:
        """A plain dict ``{"x": X, "y": Y, "z": Z}`` (JSON-ready)."""
        return dict(zip(AXES, self._dims))

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` (rank = (x·Y + y)·Z + z)."""
        if not 0 <= rank < self.world_size:
            raise GridError(f"rank {rank} is outside grid {self} ({self.world_size} ranks)")
        _, y, z = self._dims
        return {"x": rank // (y * z), "y": (rank // z) % y, "z": rank % z}

    def rank(self, coords: Mapping[str, int]) -> int:
        """The rank at ``coords`` (the inverse of `coords`)."""
        _, y, z = self._dims
        return (coords["x"] * y + coords["y"]) * z + coords["z"]

    def check_world(self, world_size: int, who: str = "the job has") -> None:
        """Raise `GridError` unless this grid has exactly ``world_size`` ranks (``who`` names
        where that size comes from: "the launcher started", ...)."""
        if self.world_size != world_size:
            raise GridError(f"grid {self} has {self.world_size} ranks but {who} {world_size}; "
                            "make X·Y·Z equal the world size")

    # ---- Mapping protocol and value semantics ---------------------------------------------
    def __getitem__(self, axis: str) -> int:
        try:
            return self._dims[AXES.index(axis)]
        except ValueError:
            raise KeyError(axis) from None

    def __iter__(self) -> Iterator[str]:
        return iter(AXES)

    def __len__(self) -> int:
        return 3

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, GridShape):
            return self._dims == other._dims
        if isinstance(other, Mapping):
            return dict(self) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._dims)

    def __str__(self) -> str:
        return "x".join(map(str, self._dims))

    def __repr__(self) -> str:
        return f"GridShape({self})"

    def __reduce__(self):  # picklable despite __slots__ (shards cross process boundaries)
        return (GridShape, self._dims)
