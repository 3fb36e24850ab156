"""What the study figures say about how far to trust them (issue 59): the machine's cores and
the runs that oversubscribed them, a caveat on rank correlations over few configurations, and no
absolute path of the machine that drew them. Oracles: hand-built log environments and counts."""

from __future__ import annotations

from pathlib import Path

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
