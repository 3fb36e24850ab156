"""Report helpers of benchmarks and studies: atomic CSV/JSON/text/PNG writers, the machine a
figure was taken on, and the statistics of repeated measurements."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from plexus_datasets.base.atomic import atomic_file
from plexus.core.timing import loadavg, median  # noqa: F401 (the reports' statistics)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_file(path, "w") as f:
        f.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (non-JSON values via ``str``)."""
    return write_text(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_csv(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]],
              fields: Sequence[str] | None = None) -> Path:
    """Write dict rows as CSV atomically; columns are ``fields`` or the union of the rows' keys
    in first-seen order."""
    if fields is None:
        fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_value(v) for k, v in r.items()})
    return write_text(path, buf.getvalue())


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v)
    return v


#: The PNG text key holding a figure's words (`figure_text`): what a test of a committed figure
#: reads, since the pixels cannot be
FIGURE_TEXT_KEY = "Description"


def figure_text(fig: Any) -> str:
    """Every word a matplotlib figure shows, one piece a line: its titles, axis labels, legend
    entries, annotations and texts."""
    pieces = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) else []
    for ax in fig.axes:
        pieces += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        legend = ax.get_legend()
        if legend is not None:
            pieces += [t.get_text() for t in legend.get_texts()]
        pieces += [t.get_text() for t in ax.texts]
    return "\n".join(p for p in pieces if p)


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG atomically, its words (`figure_text`) in the PNG's
    `FIGURE_TEXT_KEY` text chunk."""
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight",
                    metadata={FIGURE_TEXT_KEY: figure_text(fig)})
    return Path(path)


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, or None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


class Tee:
    """Print to stdout and keep a copy, so the printed report can also be saved to a file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: host, cores, load, library versions."""
    import numpy
    import scipy
    import torch

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {"host": platform.node(), "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in load],
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "scipy": scipy.__version__,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how noisy repeated measurements were."""
    m = median(values)
    return (max(values) - min(values)) / m if values and m > 0 else float("nan")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width text table; first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                               for i, c in enumerate(r)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ranks_of(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    from scipy.stats import rankdata  # noqa: PLC0415

    return [float(r) for r in rankdata(values)]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation of two equally long sequences (NaN if fewer than 2)."""
    if len(a) < 2:
        return float("nan")
    from scipy.stats import spearmanr  # noqa: PLC0415

    return float(spearmanr(a, b).statistic)
