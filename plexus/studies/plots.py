"""The figures of a scaling study, from report rows (matplotlib on the Agg backend, PNG files):

- ``strong_scaling.png``  epoch time vs ranks G: every grid with quartile bars and every repeat
  as a point (a repeat spread above the threshold ringed and labelled), the best grid per G
  joined, the ideal T(G0)·G0/G; the performance model's pick marked
- ``breakdown.png``       seconds per epoch per grid, stacked: SpMM, GEMM, each collective, other
- ``comm_share.png``      share of the epoch in compute, communication and other, per grid,
  beside the model's predicted communication share
- ``memory.png``          memory per rank vs G (strong-scaling runs): measured max and mean over
  ranks, predicted
- ``weak_scaling.png``    weak-scaling efficiency T(1)/T(G) of the best grid per G
- ``predicted_vs_measured.png``  measured vs model-predicted epoch time, Spearman's ρ

Every figure reads the same epochs of each run, every one but the first (`plexus.studies.collect`),
and says so in its title, with where the predictions' machine rates come from: a calibration, or
the model's built-in GPU rates (then the title says the predictions are uncalibrated). A figure
with nothing to draw (no weak-scaling runs, no memory figures, ...) is not written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

from plexus.bench.output import pyplot, save_figure

from .stats import (PredictionStats, Row, ScalingCheck, best_per_world, by_dataset,
                    check_scaling, configs, predicted_configs, prediction_stats)
from plexus_datasets.base import owned

FIGURES = ("strong_scaling.png", "breakdown.png", "comm_share.png", "memory.png",
           "weak_scaling.png", "predicted_vs_measured.png")
MIB = 2.0**20
COLLECTIVE_COLOURS = {"x": "Blues", "y": "Oranges", "z": "Greens"}


def log_scale(ax: Any, which: str = "y") -> None:
    """A log axis labelled at 1, 2, 5 per decade (more when less than a decade is shown) in plain
    numbers, with no crowded minor labels. Call it once the data are drawn."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
    narrow = lo > 0 and hi / lo < 10  # less than a decade shown: label more values
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def world_axis(ax: Any, worlds: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(worlds), [str(w) for w in worlds])
    ax.minorticks_off()
    ax.set_xlabel("ranks G = X·Y·Z")


def crowded_legend(ax: Any) -> None:
    """The legend entry of the hollow marks: runs whose ranks x threads exceed the host's
    cores (`Config.oversubscribed`), whose times measure the sharing, not the grid."""
    ax.plot([], [], "o", color="gray", mfc="none", ms=5,
            label="hollow: ranks x threads > the host's cores (oversubscribed: times the "
                  "sharing)")


def strong_scaling(plt: Any, rows: Sequence[Row], subtitle: str,
                   check: ScalingCheck | None = None) -> Any | None:
    """The strong-scaling figure; ``check``'s warnings (threads per rank that differ, speed-ups
    past the ideal) are written on it and its super-linear points ringed."""
    groups = by_dataset(configs(rows, "strong"))
    if not groups:
        return None
    check = check if check is not None else check_scaling(rows)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    flagged = crowded = False
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    worlds_seen: set[int] = set()
    for k, (ds, cs) in enumerate(groups.items()):
        col = colours[k % len(colours)]
        last: dict[int, float] = {}  # the lowest label so far per G: labels must not overlap
        for c in sorted(cs, key=lambda c: -(c.median() or 0.0)):
            t, lh = c.median(), c.low_high()
            if t is None:
                continue
            worlds_seen.add(c.world)
            err = [[max(t - lh[0], 0.0)], [max(lh[1] - t, 0.0)]] if lh else None
            ax.errorbar([c.world], [t], yerr=err, fmt="*" if c.auto else "o",
                        ms=11 if c.auto else 5, color=col, alpha=0.7, capsize=3,
                        mfc="none" if c.oversubscribed else col)
            crowded = crowded or c.oversubscribed
            reps = c.repeats()
            if len(reps) > 1:  # every repeat, not one median
                ax.scatter([c.world] * len(reps), reps, marker="_", s=90, color=col, zorder=3)
            if c.flagged:
                flagged = True
                ax.scatter([c.world], [t], s=260, facecolors="none", edgecolors="tab:red",
                           linewidths=1.5, zorder=4)
                ax.annotate(f"repeats differ {c.spread:.1f}x", (c.world, max(reps)),
                            xytext=(4, 6), textcoords="offset points", fontsize=7,
                            color="tab:red")
            y = min(t, last[c.world] / 1.09) if c.world in last else t
            last[c.world] = y
            ax.annotate(c.grid, (c.world, y), xytext=(c.world * 1.03, y), fontsize=7,
                        color=col, va="center")
        best = best_per_world(cs)
        if not best:
            continue
        w = list(best)
        ax.plot(w, [best[x].median() for x in w], "-", color=col, label=f"{ds}: best grid per G")
        w0 = w[0]
        t0 = best[w0].median()
        ax.plot(w, [t0 * w0 / x for x in w], "--", color=col, alpha=0.5,
                label=f"{ds}: ideal T(G={w0})·{w0}/G")
        for x in w:
            if (ds, x) in check.superlinear:
                speedup, ideal = check.superlinear[(ds, x)]
                ax.scatter([x], [best[x].median()], s=320, marker="s", facecolors="none",
                           edgecolors="tab:red", linewidths=1.5, zorder=4)
                ax.annotate(f"{speedup:.1f}x > ideal {ideal:g}x", (x, best[x].median()),
                            xytext=(4, -14), textcoords="offset points", fontsize=7,
                            color="tab:red")
    if worlds_seen:
        world_axis(ax, sorted(worlds_seen))
        log_scale(ax, "y")
        ax.plot([], [], "*", color="gray", ms=11, label="grid picked by the model (auto)")
        ax.plot([], [], "o", color="gray", ms=5, label="other grid (bars: quartiles of the epoch times)")
        ax.scatter([], [], marker="_", s=90, color="gray", label="each repeat's median")
        if crowded:
            crowded_legend(ax)
        if flagged:
            ax.scatter([], [], s=120, facecolors="none", edgecolors="tab:red",
                       label="repeats disagree (spread above the threshold): median unreliable")
        ax.legend(fontsize=7, loc="best")
        ax.grid(True, which="both", alpha=0.3)
    warnings = check.messages()
    if warnings:  # on the figure itself: a figure travels without the report's text
        ax.text(0.01, 0.01, "\n".join(f"WARNING: {m}" for m in warnings), wrap=True,
                transform=ax.transAxes, fontsize=6, color="tab:red", va="bottom",
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "tab:red"})
    ax.set_ylabel("epoch time (s, median of the timed epochs)")
    ax.set_title(f"Strong scaling: epoch time vs ranks\n{subtitle}", fontsize=8)
    return fig


def breakdown_parts(rows: Sequence[Row]) -> list[str]:
    names = {k[2:-7] for r in rows for k in r if k.startswith("t_") and k.endswith("_mean_s")}
    coll = sorted((n for n in names if ":" in n), key=lambda n: (n.split(":")[1], n))
    return [n for n in ("spmm", "gemm") if n in names] + coll


def part_colour(plt: Any, name: str, index: int) -> Any:
    if name == "spmm":
        return "tab:purple"
    if name == "gemm":
        return "tab:red"
    axis = name.split(":")[1]
    return plt.get_cmap(COLLECTIVE_COLOURS.get(axis, "Greys"))(0.45 + 0.18 * (index % 3))


def breakdown(plt: Any, rows: Sequence[Row], subtitle: str) -> Any | None:
    cs = [c for c in configs(rows) if c.median("epoch_time_mean_s") is not None]
    parts = breakdown_parts(rows)
    if not cs or not parts:  # no timers in these logs (runs with --no-timers?)
        return None
    fig, ax = plt.subplots(figsize=(max(6.5, 0.55 * len(cs) + 2.5), 4.8))
    labels = [c.grid if len(by_dataset(cs)) == 1 else f"{c.grid}\n{c.dataset}" for c in cs]
    bottom = [0.0] * len(cs)
    for i, name in enumerate(parts + ["other"]):
        key = f"t_{name}_mean_s" if name != "other" else "other_mean_s"
        vals = [c.median(key) or 0.0 for c in cs]
        colour = "lightgray" if name == "other" else part_colour(plt, name, i)
        ax.bar(range(len(cs)), vals, bottom=bottom, color=colour, label=name, width=0.7,
               edgecolor="white", linewidth=0.3)
        bottom = [b + v for b, v in zip(bottom, vals)]
    slow = [sum(c.median(f"t_{n}_max_s") or 0.0 for n in parts) for c in cs]
    ax.scatter(range(len(cs)), slow, marker="_", s=300, color="black", zorder=3,
               label="timers of the slowest rank (max), summed")
    ax.set_xticks(range(len(cs)), labels, fontsize=8, rotation=0 if len(cs) < 10 else 60)
    ax.set_ylabel("seconds per epoch (mean over ranks)")
    ax.set_xlabel("grid X×Y×Z")
    ax.set_title("Where an epoch goes, per grid (mean over the timed epochs; other = epoch "
                 f"minus timers)\n{subtitle}", fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def comm_share(plt: Any, rows: Sequence[Row], subtitle: str) -> Any | None:
    cs = [c for c in configs(rows) if c.median("epoch_time_mean_s")]
    if not cs or not breakdown_parts(rows):  # no epoch times, or no timers to split them by
        return None
    fig, ax = plt.subplots(figsize=(7, max(3.5, 0.38 * len(cs) + 1.8)))
    comp, comm, other, model = [], [], [], []
    for c in cs:
        total = c.median("epoch_time_mean_s") or 1.0
        a, b = c.median("compute_mean_s") or 0.0, c.median("comm_mean_s") or 0.0
        comp.append(100 * a / total)
        comm.append(100 * b / total)
        other.append(max(100 - 100 * (a + b) / total, 0.0))
        model.append(c.median("predicted_comm_share"))
    y = range(len(cs))
    ax.barh(y, comp, color="tab:purple", label="compute (SpMM + GEMM)")
    ax.barh(y, comm, left=comp, color="tab:green", label="communication (all collectives)")
    ax.barh(y, other, left=[a + b for a, b in zip(comp, comm)], color="lightgray",
            label="other (elementwise, loss, Adam, waiting outside collectives)")
    pts = [(i, 100 * m) for i, m in enumerate(model) if m is not None]
    if pts:
        ax.scatter([p[1] for p in pts], [p[0] for p in pts], marker="D", color="black",
                   zorder=3, s=22, label="model: predicted communication share")
    ax.set_yticks(list(y), [f"{c.grid} ({c.dataset})" if len(by_dataset(cs)) > 1 else c.grid
                            for c in cs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the epoch (%, mean over ranks)")
    ax.set_title(f"Compute vs communication per grid\n{subtitle}", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def memory(plt: Any, rows: Sequence[Row], subtitle: str) -> Any | None:
    cs = configs(rows, "strong")
    if not any(c.median(k) is not None for c in cs for k in
               ["predicted_memory_bytes"] + [f"mem_{m}_max_bytes" for m in
                                             ("peak_rss", "tracked_peak", "cuda_peak")]):
        return None  # no memory figures in these logs
    fig, ax = plt.subplots(figsize=(7, 4.8))  # one graph: the weak series' graphs grow with G
    kinds = [("peak_rss", "peak RSS"), ("tracked_peak", "tracked tensors"),
             ("cuda_peak", "CUDA peak")]
    measured = False
    worlds = sorted({c.world for c in cs})
    styles = {"max": ("o", "-"), "mean": ("s", ":")}
    colours = {"peak_rss": "tab:blue", "tracked_peak": "tab:orange", "cuda_peak": "tab:red"}
    for kind, label in kinds:
        for stat in ("max", "mean"):
            key = f"mem_{kind}_{stat}_bytes"
            pts = [(c.world, c.median(key)) for c in cs if c.median(key) is not None]
            if not pts:
                continue
            measured = True
            marker, _ = styles[stat]
            ax.scatter([p[0] for p in pts], [p[1] / MIB for p in pts], marker=marker,
                       facecolors=colours[kind] if stat == "max" else "none",
                       edgecolors=colours[kind], label=f"measured {label}, {stat} over ranks")
    pred = [(c.world, c.median("predicted_memory_bytes") / MIB) for c in cs  # type: ignore
            if c.median("predicted_memory_bytes") is not None]
    if pred:
        ax.scatter([p[0] for p in pred], [p[1] for p in pred], marker="x", color="black",
                   label="predicted per rank (performance model), each grid")
        lowest: dict[int, float] = {}
        for w, v in pred:
            lowest[w] = min(v, lowest.get(w, math.inf))
        ax.plot(list(lowest), list(lowest.values()), "-", color="black", alpha=0.5,
                label="predicted, best grid per G")
    if not measured:
        ax.text(0.02, 0.02, "measured memory per rank: not in these logs (only predictions)",
                transform=ax.transAxes, fontsize=8, color="tab:red")
    world_axis(ax, worlds)
    log_scale(ax, "y")
    ax.set_ylabel("MiB per rank (log scale)")
    names = ", ".join(sorted({c.dataset for c in cs}))
    ax.set_title(f"Memory per rank vs ranks, strong scaling of {names}\n{subtitle}",
                 fontsize=8)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="both", alpha=0.3)
    return fig


def weak_scaling(plt: Any, rows: Sequence[Row], subtitle: str, series: Sequence[dict],
                 found: dict[str, float] | None = None) -> Any | None:
    """The weak-scaling figure (None without weak-scaling runs from G=1); ``found`` receives
    "G=<g>" -> efficiency of each point drawn."""
    cs = configs(rows, "weak")
    if not cs:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.6))
    drawn = crowded = False
    worlds_seen: set[int] = set()
    for s in series or [{"base": "weak", "datasets": {}}]:
        datasets = set(s.get("datasets", {}).values())
        mine = [c for c in cs if not datasets or c.spec in datasets]
        best = best_per_world(mine)
        if 1 not in best:
            continue
        t1 = best[1].median()
        w = list(best)
        eff = [t1 / best[x].median() for x in w]  # type: ignore[operator]
        line, = ax.plot(w, eff, "-", label=f"best grid per G, base {s.get('base')}")
        ax.scatter(w, eff, color=line.get_color(), zorder=3,
                   facecolors=["none" if best[x].oversubscribed else line.get_color()
                               for x in w])
        crowded = crowded or any(best[x].oversubscribed for x in w)
        if found is not None:
            found.update({f"G={x}": e for x, e in zip(w, eff)})
        for x, e in zip(w, eff):
            ax.annotate(f"{best[x].grid}\n{best[x].dataset}", (x, e), textcoords="offset points",
                        xytext=(5, 4), fontsize=6)
        for c in mine:
            t = c.median()
            if t is not None and c is not best.get(c.world):
                ax.scatter([c.world], [t1 / t], color="gray", s=12, alpha=0.6,  # type: ignore
                           facecolors="none" if c.oversubscribed else "gray")
                crowded = crowded or c.oversubscribed
        worlds_seen |= set(w)
        drawn = True
    if not drawn:  # weak runs, but none at G=1 to compare with
        plt.close(fig)
        return None
    ax.axhline(1.0, linestyle="--", color="gray", label="ideal (constant time per epoch)")
    ax.scatter([], [], color="gray", s=12, label="other grids")
    if crowded:
        crowded_legend(ax)
    world_axis(ax, sorted(worlds_seen))
    ax.set_ylim(0, max(1.2, ax.get_ylim()[1]))
    ax.set_ylabel("weak-scaling efficiency T(1) / T(G)")
    ax.set_title(f"Weak scaling: work per rank fixed, graph grows with G\n{subtitle}",
                 fontsize=8)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, alpha=0.3)
    return fig


def predicted_vs_measured(plt: Any, rows: Sequence[Row], subtitle: str, calibration: str,
                          stats: PredictionStats | None = None) -> Any | None:
    """Measured vs predicted epoch time per configuration; its title states ``stats`` (the
    report's `prediction_stats`, which the report also prints)."""
    cs = predicted_configs(rows)
    stats = stats if stats is not None else prediction_stats(rows)
    if len(cs) < 2 or stats is None:  # fewer than two runs with a prediction
        return None
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    pred = [c.median("predicted_time_s") for c in cs]
    meas = [c.median() for c in cs]
    for k, (group, cg) in enumerate(by_dataset(cs).items()):
        col = f"C{k}"
        ax.scatter([c.median("predicted_time_s") for c in cg], [c.median() for c in cg],
                   label=group, s=24, color=col,
                   facecolors=["none" if c.oversubscribed else col for c in cg])
        for c in cg:
            ax.annotate(c.grid, (c.median("predicted_time_s"), c.median()),
                        textcoords="offset points", xytext=(4, 2), fontsize=7)
    lo, hi = min(pred + meas), max(pred + meas)  # type: ignore[operator]
    ax.plot([lo, hi], [lo, hi], "--", color="gray", label="measured = predicted")
    if any(c.oversubscribed for c in cs):
        crowded_legend(ax)
    log_scale(ax, "x")
    log_scale(ax, "y")
    ax.set_xlabel(f"model-predicted epoch time (s; rates: {calibration})")
    ax.set_ylabel("measured epoch time (s, median)")
    ax.set_title(f"Measured vs predicted epoch time: {stats.spearman_line()}\n"
                 f"{stats.line()}\n{subtitle}", fontsize=8)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="both", alpha=0.3)
    return fig


UNCALIBRATED = "defaults"  # `Calibration.source` of the model's built-in rates


def caption(calibration: str) -> str:
    """The line every figure's title carries: which epochs, and which machine rates."""
    rates = ("predictions UNCALIBRATED: the model's built-in GPU rates, not this machine's "
             "(plexus-report --calibration FILE)" if calibration == UNCALIBRATED else
             f"predictions calibrated by {_file_name(calibration)}")
    return f"timed epochs: all but the first (warm-up) of each run\n{rates}"


def _file_name(source: str) -> str:
    """A calibration's source as a figure shows it: the file's name, not its folder (a committed
    figure names no absolute path of the machine that drew it)."""
    path, sep, rest = source.partition(" (")
    return Path(path).name + sep + rest


def write_figures(rows: Sequence[Row], folder: Path, subtitle: str,
                  weak_series: Sequence[dict], calibration: str,
                  say: Callable[[str], None] = print,
                  target: Callable[[Path], Path] = lambda p: p,
                  stats: PredictionStats | None = None,
                  check: ScalingCheck | None = None) -> dict[str, Any]:
    """Every figure that has something to draw as a PNG in ``folder`` (an older one of a figure
    not drawn now is removed); returns {"files": [...], "skipped": [...],
    "weak_efficiency": {"G=2": e, ...}} (no files when matplotlib is missing). ``target``
    checks each file's path before it is written (`ResultsFolder.target`); ``calibration`` is
    the `Calibration.source` of the predictions; ``stats`` and ``check``: the report's
    `prediction_stats` and `check_scaling` (computed here when not given)."""
    plt = pyplot()
    if plt is None:
        say("matplotlib is not installed: no figures (pip install matplotlib)")
        return {"files": [], "skipped": list(FIGURES), "weak_efficiency": {}}
    subtitle = f"{subtitle}\n{caption(calibration)}"
    weak: dict[str, float] = {}
    stats = stats if stats is not None else prediction_stats(rows)
    figs = {"strong_scaling.png": strong_scaling(plt, rows, subtitle, check),
            "breakdown.png": breakdown(plt, rows, subtitle),
            "comm_share.png": comm_share(plt, rows, subtitle),
            "memory.png": memory(plt, rows, subtitle),
            "weak_scaling.png": weak_scaling(plt, rows, subtitle, weak_series, weak)}
    figs["predicted_vs_measured.png"] = predicted_vs_measured(plt, rows, subtitle, calibration,
                                                              stats)
    files, skipped = [], []
    for name, f in figs.items():
        path = target(folder / name)
        if f is None:
            skipped.append(name)
            owned.remove_file(path)  # a figure of an earlier report would mislead
            continue
        files.append(save_figure(f, path))
        plt.close(f)
    return {"files": files, "skipped": skipped, "weak_efficiency": weak}
