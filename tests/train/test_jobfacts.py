"""The run (`RunRequest`/`ResolvedRun`) holds what the user asked; the launch's facts, the cache's
store and a test's fault travel beside it as `JobFacts` (issue 57 item 5)."""

from __future__ import annotations

from dataclasses import fields

from plexus.train.faults import Fault
from plexus.train.jobfacts import JobFacts
from plexus.train.plan import ResolvedRun, RunRequest


def test_the_request_carries_no_launch_fact_hook_or_cache_outcome():
    for cls in (RunRequest, ResolvedRun):
        names = {f.name for f in fields(cls)}
        assert not names & {"launched_at", "setup_script_s", "cache", "fault"}, cls
    assert {f.name for f in fields(JobFacts)} == {"launched_at", "setup_script_s", "cache",
                                                   "fault"}


def test_where_start_up_counts_from():
    assert JobFacts().startup_origin() == "this rank's process start"
    assert JobFacts(launched_at=1.0).startup_origin() == "the command's start"
    # ./run's set-up is named from 0.05 s on, and left out of the start-up
    assert JobFacts(launched_at=1.0, setup_script_s=0.049).startup_origin() == \
        "the command's start"
    assert JobFacts(launched_at=1.0, setup_script_s=2.5).startup_origin() == \
        "the command's start, after ./run's set-up (2.50 s, not counted)"


def test_facts_are_frozen_values_a_worker_receives_whole():
    import pickle

    facts = JobFacts(3.0, 0.5, {"built": True, "store": "/x"}, Fault.parse("raise:1:2"))
    assert pickle.loads(pickle.dumps(facts)) == facts


def test_ranks_prove_the_options_they_share_and_not_their_own():
    from plexus.train.cli import build_parser
    from cli_helpers import launched
    from plexus.train.peercheck import run_options

    def options(*argv: str) -> dict[str, str]:
        return run_options(launched(build_parser().parse_args(
            ["--grid", "1x1x2", "--epochs", "3", *argv])))

    base = options()
    assert options("--quiet", "--threads", "1") == base  # a rank's console and threads
    assert options("--lr", "0.5") != base  # an option of the run every rank must share
    assert base["train.epochs"] == "3"
