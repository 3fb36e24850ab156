"""The statistics a study's report states, computed once: its printed text and its figures
both read them (`plexus.studies.cli.report_main`, `plexus.studies.plots`).

- `configs`: the report rows grouped by (dataset, grid), repeats pooled, each configuration's
  median of its runs' median epoch times;
- `prediction_stats`: predicted over measured epoch time per configuration (median, range,
  within 3x) and Spearman's rank correlation;
- `check_scaling`: what makes a speed-up figure misleading: runs whose threads per rank
  differ, and a best grid faster than the ideal T(G0)·G0/G.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from plexus.bench.output import spearman

Row = dict[str, Any]


def num(v: Any) -> float | None:
    """A finite float, or None (empty CSV cells, missing figures)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class Config:
    """The runs of one (dataset, grid): repeats pooled."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        r0 = rows[0]
        self.dataset, self.grid, self.world = r0["dataset"], r0["grid"], int(r0["world_size"])
        self.spec = r0.get("spec") or r0["dataset"]  # the sweep's spec; the log's name if unknown
        self.auto = any("auto" in (r.get("picked_by") or "") for r in rows)
        self.flagged = any(str(r.get("spread_flagged")) == "True" for r in rows)
        self.oversubscribed = any(str(r.get("oversubscribed")) == "True" for r in rows)
        self.spread = num(r0.get("repeat_spread"))

    def repeats(self) -> list[float]:
        """Each repeat's median epoch time."""
        return [v for v in (num(r.get("epoch_time_median_s")) for r in self.rows)
                if v is not None]

    def median(self, key: str = "epoch_time_median_s") -> float | None:
        values = [v for v in (num(r.get(key)) for r in self.rows) if v is not None]
        return statistics.median(values) if values else None

    def low_high(self) -> tuple[float, float] | None:
        """The spread bar: from the lowest first quartile to the highest third quartile of the
        runs' timed epochs (one outlier epoch does not hide the rest)."""
        lo = [v for v in (num(r.get("epoch_time_p25_s")) for r in self.rows) if v is not None]
        hi = [v for v in (num(r.get("epoch_time_p75_s")) for r in self.rows) if v is not None]
        return (min(lo), max(hi)) if lo and hi else None


def configs(rows: Sequence[Row], study: str | None = None) -> list[Config]:
    """Rows grouped by (dataset, grid), of one study if given, in order of G and grid."""
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if study is None or study in (r.get("studies") or "strong").split():
            groups[(str(r.get("spec") or r["dataset"]), str(r["grid"]))].append(r)
    out = [Config(g) for g in groups.values()]
    return sorted(out, key=lambda c: (c.dataset, c.world, c.grid))


def by_dataset(cs: Sequence[Config]) -> dict[str, list[Config]]:
    out: dict[str, list[Config]] = defaultdict(list)
    for c in cs:
        out[c.dataset].append(c)
    return dict(out)


def best_per_world(cs: Sequence[Config]) -> dict[int, Config]:
    best: dict[int, Config] = {}
    for c in cs:
        t = c.median()
        if t is not None and (c.world not in best or t < (best[c.world].median() or math.inf)):
            best[c.world] = c
    return dict(sorted(best.items()))


#: below this many configurations a rank correlation says little (3 points: ρ = 1 one time in 6)
FEW_CONFIGURATIONS = 8


@dataclass(frozen=True)
class PredictionStats:
    """Predicted over measured epoch time, one value per configuration (repeats pooled)."""

    configurations: int
    median: float
    low: float
    high: float
    within_3x: int
    spearman: float  # measured vs predicted (NaN with fewer than two configurations)

    def spearman_line(self) -> str:
        """Spearman's ρ with how many configurations it ranks, and a caveat under
        `FEW_CONFIGURATIONS` (3 points rank perfectly by chance one time in six)."""
        text = f"Spearman ρ = {self.spearman:.2f} over {self.configurations} configurations"
        if self.configurations < FEW_CONFIGURATIONS:
            text += (f" (too few to judge the ranking: fewer than {FEW_CONFIGURATIONS}, a "
                     "perfect ρ comes by chance)")
        return text

    def line(self) -> str:
        """The sentence the report prints and the figure's title repeats."""
        return (f"predicted / measured epoch time: median {self.median:.3g} "
                f"({self.low:.3g}..{self.high:.3g}) over {self.configurations} configurations; "
                f"within 3x for {self.within_3x} of {self.configurations}")


def predicted_configs(rows: Sequence[Row]) -> list[Config]:
    """The configurations with both a measured and a predicted epoch time."""
    return [c for c in configs(rows) if c.median() is not None
            and c.median("predicted_time_s") is not None]


def prediction_stats(rows: Sequence[Row]) -> PredictionStats | None:
    """The prediction statistics of a report (None: no configuration has a prediction)."""
    cs = predicted_configs(rows)
    if not cs:
        return None
    pred = [c.median("predicted_time_s") for c in cs]
    meas = [c.median() for c in cs]
    ratios = [p / m for p, m in zip(pred, meas)]  # type: ignore[operator]
    return PredictionStats(len(cs), statistics.median(ratios), min(ratios), max(ratios),
                           sum(1 / 3 <= r <= 3 for r in ratios),
                           spearman(pred, meas))  # type: ignore[arg-type]


@dataclass
class ScalingCheck:
    """What makes a study's speed-ups misleading, as warnings (one line each)."""

    # (dataset, G) -> (speed-up over the smallest G, ideal speed-up) of a best grid past ideal
    superlinear: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    # threads per rank -> the grids run with it, when runs differ
    threads: dict[int, list[str]] = field(default_factory=dict)

    def messages(self) -> list[str]:
        out = []
        if self.threads:
            parts = "; ".join(f"{t} on {', '.join(sorted(set(g)))}"
                              for t, g in sorted(self.threads.items()))
            out.append(f"threads per rank differ across runs ({parts}): the speed-ups compare "
                       "threads as well as ranks; rerun with plexus-sweep --threads T (the same "
                       "for every grid)")
        for (ds, world), (speedup, ideal) in sorted(self.superlinear.items()):
            out.append(f"{ds}: G={world} runs {speedup:.2f}x faster than the smallest G, past "
                       f"the ideal {ideal:g}x: the runs do not compare like with like (threads "
                       "per rank, other jobs on the machine, caches)")
        return out


def check_scaling(rows: Sequence[Row]) -> ScalingCheck:
    """`ScalingCheck` of the strong-scaling runs of a report."""
    check = ScalingCheck()
    threads: dict[int, list[str]] = defaultdict(list)
    for r in rows:
        t = num(r.get("threads_per_rank"))
        if t is not None:
            threads[int(t)].append(str(r["grid"]))
    if len(threads) > 1:
        check.threads = dict(threads)
    for ds, cs in by_dataset(configs(rows, "strong")).items():
        best = best_per_world(cs)
        if len(best) < 2:
            continue
        w0 = min(best)
        t0 = best[w0].median()
        for w, c in best.items():
            t = c.median()
            if w == w0 or not t or not t0:
                continue
            speedup, ideal = t0 / t, w / w0
            if speedup > ideal:
                check.superlinear[(ds, w)] = (speedup, ideal)
    return check
