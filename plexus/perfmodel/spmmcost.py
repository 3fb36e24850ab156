"""A float32 SpMM's time measured as a memory-bound kernel: bytes per non-zero at the local
width (`SpmmCost`), the form a calibration or profile holds under ``spmm_cost``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import CalibrationError


@dataclass(frozen=True)
class SpmmCost:
    """A float32 SpMM's time as a memory-bound kernel, measured by sweeping the local width:
    each of a block's non-zeros costs ``per_nnz`` + ``per_column``·w bytes of traffic at
    ``bandwidth`` bytes/s for a dense operand w columns wide, plus the narrow-column extra of
    ``narrow`` ((w, bytes per non-zero), by increasing w): short rows leave warps idle,
    measured at a few widths, interpolated linearly between them, the first value below the
    first width, falling to 0 at twice the last (where the measurement shows none left)."""

    bandwidth: float
    per_nnz: float
    per_column: float
    narrow: tuple[tuple[float, float], ...] = ()

    def extra(self, width: float) -> float:
        """The narrow-column bytes per non-zero at local width ``width``."""
        points = list(self.narrow)
        if not points:
            return 0.0
        points.append((2 * points[-1][0], 0.0))
        if width <= points[0][0]:
            return points[0][1]
        for (w0, b0), (w1, b1) in zip(points, points[1:]):
            if width <= w1:
                return b0 + (b1 - b0) * (width - w0) / (w1 - w0)
        return 0.0

    def seconds(self, nnz: float, width: float) -> float:
        """Seconds of one SpMM over ``nnz`` non-zeros with a dense operand ``width`` wide."""
        return nnz * (self.per_nnz + self.per_column * width + self.extra(width)) / self.bandwidth

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `from_dict` reads."""
        return {"bandwidth": self.bandwidth, "per_nnz": self.per_nnz,
                "per_column": self.per_column,
                "narrow": {str(int(w)) if float(w).is_integer() else str(w): b
                           for w, b in self.narrow}}

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> "SpmmCost":
        """The byte model in ``raw`` (bandwidth, per_nnz and per_column: positive numbers;
        narrow: {width digits: bytes}), checked; `CalibrationError` names the bad key."""
        keys = {"bandwidth", "per_nnz", "per_column"}
        if (not isinstance(raw, Mapping) or not keys <= set(raw)
                or not set(raw) <= keys | {"narrow"}):
            raise CalibrationError(f"{source}: spmm_cost must be an object with bandwidth, "
                                   "per_nnz, per_column and narrow {\"16\": bytes, ...}")

        def num(d: Mapping[str, Any], key: str, where: str) -> float:
            value = d[key]
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value <= 0):
                raise CalibrationError(f"{source}: {where}{key} must be a positive number, "
                                       f"got {value!r}")
            return float(value)

        narrow = raw.get("narrow", {}) or {}
        if not isinstance(narrow, Mapping):
            raise CalibrationError(f"{source}: spmm_cost.narrow must be {{width: bytes}}")
        points = []
        for width in narrow:
            if not re.fullmatch(r"[1-9][0-9]{0,5}", str(width)):
                raise CalibrationError(f"{source}: spmm_cost.narrow.{width} must be a width "
                                       "(digits)")
            points.append((float(width), num(narrow, width, "spmm_cost.narrow.")))
        return cls(*(num(raw, k, "spmm_cost.") for k in ("bandwidth", "per_nnz", "per_column")),
                   tuple(sorted(points)))
