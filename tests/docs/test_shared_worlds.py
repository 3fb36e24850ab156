"""The session's shared worlds (`tests/worlds.py`): on a rank, every declared family runs and
reports its own result; one that raises fails with its traceback and leaves the others' results
as they are; a family nobody declared is an error, not an empty result."""

from __future__ import annotations

import pytest

import worlds


def _sum(a: int, b: int) -> int:
    return a + b


def _raises(message: str) -> None:
    raise ValueError(message)


def test_a_rank_runs_every_family_and_one_failure_stays_its_own():
    got = worlds.run_families([("first", _sum, (2, 3)), ("broken", _raises, ("planted-58",)),
                               ("after", _sum, (10, -4))])
    assert got["first"] == ("ok", 5) and got["after"] == ("ok", 6), got
    status, tb = got["broken"]
    assert status == "error" and "ValueError: planted-58" in tb and "_raises" in tb, got


def test_an_undeclared_family_is_an_error():
    with pytest.raises(KeyError, match="no family 'nobody-58' declared for a world of 1 ranks"):
        worlds.ranks(1, "nobody-58")
