"""Test helpers (helpers.py, cli_helpers.py, engine_checks.py, nn_layers.py) live in this folder,
above the subject folders; make them importable by name, from every folder and in the ranks of
local worlds (spawned, they inherit sys.path). Every plexus-train run of the session keeps its
cached shard stores in one temporary directory (never the user's ~/.cache), shared by the
session's runs as a user's runs share theirs."""

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True, scope="session")
def _session_store_cache():
    from plexus.train.cache import CACHE_ENV

    yield from _private_folder_in(CACHE_ENV, "plexus-test-cache-")


@pytest.fixture(autouse=True, scope="session")
def _session_user_key():
    """The session's seals are made with a key of its own (`plexus_datasets.base.owned`), never the
    user's ~/.config/plexus/secret.key."""
    from plexus_datasets.base.owned import CONFIG_ENV

    yield from _private_folder_in(CONFIG_ENV, "plexus-test-config-")


def _private_folder_in(variable: str, prefix: str):
    """A fresh temporary folder named by ``variable`` for the session; the variable's old
    value back afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        saved = os.environ.get(variable)
        os.environ[variable] = folder
        try:
            yield folder
        finally:
            if saved is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = saved


@pytest.fixture(autouse=True, scope="session")
def _no_user_calibration():
    """The session's predictions use the calibration each test gives, never a file the user's
    $PLEXUS_CALIBRATION names (every tool reads it)."""
    from plexus.perfmodel import CALIBRATION_ENV

    saved = os.environ.pop(CALIBRATION_ENV, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[CALIBRATION_ENV] = saved


@pytest.fixture(autouse=True, scope="session")
def _no_machine_measurement():
    """--grid auto on a CPU measures this machine once and keeps it in the user's cache
    (`plexus.perfmodel.machine`): the session's runs price with the built-in rates, as their
    expectations do, unless a test turns the measurement on in a folder of its own."""
    from plexus.perfmodel.machine import MACHINE_CACHE_ENV, OFF

    saved = os.environ.get(MACHINE_CACHE_ENV)
    os.environ[MACHINE_CACHE_ENV] = OFF
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MACHINE_CACHE_ENV, None)
        else:
            os.environ[MACHINE_CACHE_ENV] = saved


# ---- the shared worlds (tests/worlds.py): a world runs the checks of the selected files only --
def pytest_collection_finish(session):
    import worlds

    worlds.select({str(item.path) for item in session.items})


# ---- `./run test`'s workers (tests/workers.py): the shared worlds in one worker; files whole ----
@pytest.hookimpl(optionalhook=True)  # xdist's hook: `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    import workers

    return workers.scheduler(config, log)


# ---- the slow rule at run time (tests/slow_rule.py): a fast test starts no world, no tool -----
_WATCH = pytest.StashKey[list]()


def _fast(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    if _fast(item):  # from the set-up on: a module's shared world started for it counts
        import slow_rule

        item.stash[_WATCH] = slow_rule.begin()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    result = yield
    record = item.stash.get(_WATCH, None)
    if record is not None:
        import slow_rule

        bad = slow_rule.breaks_the_rule(record)
        if bad:
            pytest.fail("a fast test started " + "; ".join(bad[:3]) + " (mark it "
                        "@pytest.mark.slow: the fast subset starts no world and no tool)",
                        pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item):
    try:
        return (yield)
    finally:
        record = item.stash.get(_WATCH, None)
        if record is not None:
            import slow_rule

            slow_rule.end(record)
