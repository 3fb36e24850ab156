"""What the study figures say about how far to trust them (issue 59): the machine's cores and
the runs that oversubscribed them, a caveat on rank correlations over few configurations, and no
absolute path of the machine that drew them. Oracles: hand-built log environments and counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plexus.studies.cli import shown_source
from plexus.studies.collect import oversubscribed
from plexus.studies.stats import FEW_CONFIGURATIONS, PredictionStats


def test_oversubscribed_is_ranks_times_threads_over_the_cores():
    cpu = {"device": "cpu", "threads_per_rank": 1, "cpus_on_host": 2}
    assert oversubscribed({**cpu, "ranks_per_host": {"h": 4}}) is True  # 4 ranks on 2 cores
    assert oversubscribed({**cpu, "ranks_per_host": {"h": 2}}) is False
    assert oversubscribed({**cpu, "threads_per_rank": 2, "ranks_per_host": {"h": 2}}) is True
    assert oversubscribed({**cpu, "ranks_per_host": {"a": 2, "b": 1}}) is False  # busiest host
    assert oversubscribed({"device": "cuda", "ranks_per_host": {"h": 8}}) is False
    assert oversubscribed({"device": "cpu", "ranks_per_host": {"h": 4}}) is None  # not logged


def test_a_rank_correlation_over_few_configurations_says_so():
    few = PredictionStats(3, 1.0, 0.9, 1.1, 3, 1.0)
    assert few.spearman_line().startswith("Spearman ρ = 1.00 over 3 configurations (too few")
    enough = PredictionStats(FEW_CONFIGURATIONS, 1.0, 0.9, 1.1, 8, 0.93)
    assert enough.spearman_line() == "Spearman ρ = 0.93 over 8 configurations"
    assert FEW_CONFIGURATIONS == 8


def test_a_calibration_is_named_without_the_machines_path(tmp_path):
    inside = tmp_path / "calibration.json"
    assert shown_source(str(inside), tmp_path) == "calibration.json"
    assert shown_source(str(tmp_path / "cal" / "x.json"), tmp_path) == str(Path("cal/x.json"))
    assert shown_source("/somewhere/else/rates.json", tmp_path) == "rates.json"
    assert shown_source("defaults", tmp_path) == "defaults"
    assert shown_source("profile perlmutter-a100", tmp_path) == "profile perlmutter-a100"


# ---- the figures as drawn, and as committed -------------------------------------------------
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
STUDY = RESULTS / "scaling_study" / "report"
#: every committed figure plexus-report drew: the scaling study's and the mixed-threads one
COMMITTED = [*sorted(STUDY.glob("*.png")), RESULTS / "sweep_rmat13_threads_mixed.png"]


def png_words(path: Path) -> str:
    """The figure's words as `plexus.bench.output.save_figure` keeps them: the PNG's text chunk
    under `FIGURE_TEXT_KEY` (tEXt, or iTXt where they are not Latin-1), read here by the PNG
    format's own layout, not by the library that wrote it."""
    import struct
    import zlib

    from plexus.bench.output import FIGURE_TEXT_KEY

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    at, found = 8, {}
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + size]
        at += 12 + size
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _, _, rest = rest.partition(b"\0")  # language tag
            _, _, value = rest.partition(b"\0")  # translated keyword
            found[key.decode("latin-1")] = (zlib.decompress(value) if compressed
                                            else value).decode("utf-8")
    assert FIGURE_TEXT_KEY in found, f"{path.name}: drawn before figures kept their words"
    return found[FIGURE_TEXT_KEY]


def _row(grid: str, world: int, seconds: float, crowded: bool, study: str = "strong",
         dataset: str = "g") -> dict:
    return {"dataset": dataset, "spec": dataset, "grid": grid, "world_size": world,
            "studies": study, "epoch_time_median_s": seconds, "predicted_time_s": seconds / 2,
            "oversubscribed": str(crowded)}


def test_every_figure_marks_the_oversubscribed_runs_it_draws():
    """Hand-made rows, G = 4 on a machine of 2 cores: the strong- and weak-scaling and the
    predicted-vs-measured figures draw those points hollow and say what hollow means; without
    such a run, none says it."""
    from plexus.bench.output import figure_text, pyplot
    from plexus.studies import plots

    plt = pyplot()
    if plt is None:
        pytest.skip("matplotlib is not installed")
    crowded = [_row("1x1x1", 1, 1.0, False), _row("1x2x1", 2, 0.6, False),
               _row("2x2x1", 4, 0.9, True)]
    weak = [_row(g, w, t, c, "weak", f"g{w}") for g, w, t, c in
            (("1x1x1", 1, 1.0, False), ("1x2x1", 2, 1.1, False), ("2x2x1", 4, 1.5, True))]
    drawn = {"strong": plots.strong_scaling(plt, crowded, "sub"),
             "weak": plots.weak_scaling(plt, weak, "sub", []),
             "predicted": plots.predicted_vs_measured(plt, crowded, "sub", "defaults")}
    for name, fig in drawn.items():
        assert "hollow: ranks x threads > the host's cores" in figure_text(fig), name
        hollow = [fc for coll in fig.axes[0].collections
                  for fc in getattr(coll, "get_facecolors", lambda: [])() if len(fc) and fc[3] == 0]
        assert name == "strong" or hollow, f"{name}: no hollow point drawn"
        plt.close(fig)
    calm = [r for r in crowded if r["world_size"] < 4]
    for fig in (plots.strong_scaling(plt, calm, "sub"),
                plots.predicted_vs_measured(plt, calm, "sub", "defaults")):
        assert "hollow" not in figure_text(fig)
        plt.close(fig)


@pytest.mark.parametrize("figure", COMMITTED, ids=lambda p: p.name)
def test_a_committed_study_figure_says_how_far_to_trust_it(figure):
    """Issue 59: the committed figures were drawn before their captions were fixed. Each states
    the machine's cores and names no absolute path; one that draws runs of more ranks than the
    cores (the sweeps ran G up to 4 at one thread per rank, README's commands) marks them; a
    rank correlation over fewer than 8 configurations carries its caveat."""
    words = png_words(figure)
    cores = re.search(r", CPU, (\d+) cores", words)
    assert cores, f"{figure.name} does not state the machine's cores:\n{words}"
    assert not re.search(r"(?:^|[\s(\"'])/[\w.]", words, re.M), \
        f"{figure.name} names an absolute path:\n{words}"
    if figure.name in ("strong_scaling.png", "weak_scaling.png", "predicted_vs_measured.png",
                       "sweep_rmat13_threads_mixed.png") and 4 > int(cores[1]):
        assert "oversubscribed" in words, f"{figure.name}: its G=4 runs are not marked"
    spearman = re.search(r"Spearman ρ = [-\d.]+ over (\d+) configurations(.*)", words)
    if figure.name == "predicted_vs_measured.png":
        assert spearman, words
    if spearman:
        assert ("too few to judge" in spearman[2]) == (int(spearman[1]) < 8), spearman[0]
