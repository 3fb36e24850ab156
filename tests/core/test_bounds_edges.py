"""The bounds table's edges (issue 58 item 3): integer-ness, signs, open ends and how the
launchers' environment numbers parse (`plexus_partition.model.bounds`). Every limit and every
expected value is written here by hand."""

from __future__ import annotations

import math

import pytest

from plexus_partition.model.bounds import BoundError, check_bound, env_number


# ---- integer-ness --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["epochs", "threads", "layers", "hidden", "seed", "patience",
                                  "agg_chunks", "MASTER_PORT"])
def test_an_integer_bound_refuses_fractions_and_takes_whole_floats_as_ints(name):
    got = check_bound(name, 3.0)
    assert got == 3 and type(got) is int
    for bad in (2.5, 3.000001, 1e-9 + 3):
        with pytest.raises(BoundError, match="must be an integer"):
            check_bound(name, bad)


@pytest.mark.parametrize("name", ["lr", "weight_decay", "dropout", "momentum", "cache_max_gb"])
def test_a_real_bound_keeps_fractions_and_their_type(name):
    got = check_bound(name, 0.25)
    assert got == 0.25 and type(got) is float


@pytest.mark.parametrize("value", [True, False, "3", [3], 3j])
def test_a_flag_or_text_is_no_number(value):
    with pytest.raises(BoundError):
        check_bound("epochs", value)


# ---- signs and ends, one step past each ------------------------------------------------------
@pytest.mark.parametrize("name, good, bad", [
    ("weight_decay", [0.0, 1e-12, 1e3], [-1e-12, -0.01, 1e3 * (1 + 1e-15) + 1e-9]),
    ("lr_min", [0.0, 1e3], [-1e-300, 1000.001]),
    ("momentum", [0.0, math.nextafter(1.0, 0.0)], [-1e-12, 1.0]),
    ("lr_gamma", [1e-300, math.nextafter(1.0, 0.0)], [0.0, 1.0, -0.5]),
    ("dropout", [0.0, math.nextafter(1.0, 0.0)], [-1e-300, 1.0]),
    ("clip_grad_norm", [1e-300, 1e30], [0.0, -1.0, 1.0000001e30]),
    ("negative_slope", [-1e6, 0.0, 1e6], [-1e6 - 1, 1e6 + 1]),
    ("epochs", [0, 10**9], [-1, 10**9 + 1]),
    ("eval_every", [0], [-1]),
    ("patience", [1], [0]),
    ("lr_patience", [0], [-1]),
    ("RANK", [0, (1 << 20) - 1], [-1, 1 << 20]),
    ("WORLD_SIZE", [1, 1 << 20], [0, (1 << 20) + 1]),
    ("timeout", [1e-9, 365 * 86400], [0.0, 365 * 86400 + 1]),
    ("heartbeat", [0.0, 365 * 86400], [-1e-9, 365 * 86400 + 1]),
    ("spread_threshold", [1.0, 1e6], [math.nextafter(1.0, 0.0), 1e6 + 1]),
])
def test_each_end_holds_at_its_value_and_breaks_one_step_past(name, good, bad):
    for value in good:
        assert check_bound(name, value) == value, value
    for value in bad:
        with pytest.raises(BoundError):
            check_bound(name, value)


# ---- the environment's numbers ---------------------------------------------------------------
@pytest.mark.parametrize("name, text, want", [
    ("WORLD_SIZE", "8", 8),
    ("WORLD_SIZE", " 8\n", 8),  # launchers' padding
    ("WORLD_SIZE", "+8", 8),
    ("RANK", "0", 0),
    ("MASTER_PORT", "65535", 65535),
    ("OMP_NUM_THREADS", "1024", 1024),
    ("PLEXUS_CACHE_MAX_GB", "2.5", 2.5),
    ("PLEXUS_CACHE_MAX_GB", "1e3", 1000.0),
    ("PLEXUS_CACHE_MAX_GB", " 4 ", 4.0),
])
def test_an_environment_number_parses_as_its_bound_says(name, text, want):
    got = env_number({name: text}, name)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("name, text", [
    ("WORLD_SIZE", "8.0"),  # an integer variable is written as one
    ("WORLD_SIZE", "8.5"),
    ("WORLD_SIZE", "1e3"),
    ("WORLD_SIZE", "0x10"),
    ("WORLD_SIZE", "eight"),
    ("WORLD_SIZE", "0"),
    ("WORLD_SIZE", "-4"),
    ("RANK", "-1"),
    ("MASTER_PORT", "65536"),
    ("OMP_NUM_THREADS", "1025"),
    ("PLEXUS_CACHE_MAX_GB", "0"),  # open at 0
    ("PLEXUS_CACHE_MAX_GB", "-1"),
    ("PLEXUS_CACHE_MAX_GB", "nan"),
    ("PLEXUS_CACHE_MAX_GB", "inf"),
    ("PLEXUS_CACHE_MAX_GB", "2GB"),
])
def test_an_environment_number_past_its_bound_or_not_a_number_is_refused_naming_it(name, text):
    with pytest.raises(BoundError) as e:
        env_number({name: text}, name)
    message = str(e.value)
    assert f"environment variable {name}" in message and "\n" not in message


@pytest.mark.parametrize("environ", [{}, {"WORLD_SIZE": ""}, {"WORLD_SIZE": "   "}])
def test_an_unset_or_empty_variable_is_its_default(environ):
    assert env_number(environ, "WORLD_SIZE", 5) == 5
    assert env_number(environ, "WORLD_SIZE") is None
