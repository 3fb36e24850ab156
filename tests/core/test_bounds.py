"""The one table of bounds (`plexus_partition.model.bounds`): every numeric option of every tool is
in it, every tool refuses a number past it in one line before anything starts, and the launchers'
variables are read through it (issue 46 item 3). The limits are written here by hand, not read from
the table."""

from __future__ import annotations

import argparse
import socket

import pytest

from cli_helpers import tool_here, train
from helpers import assert_one_line
from plexus_partition.model.bounds import BOUNDS, BoundError, check_bound
from plexus_partition.launch.env import JobEnv, LaunchError, detect_environment


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from plexus_partition.cli import build_parser as partition_parser
    from plexus.perfmodel.benchcli import BenchCommand, bench_parser
    from plexus.perfmodel.cli import _model_parser
    from plexus.bench.check import add_arguments
    from plexus.studies.cli import report_parser, sweep_parser
    from plexus.train.parser import build_parser

    check = BenchCommand("check", "", "", add_arguments, lambda a: 0)
    return {"plexus-train": build_parser(), "plexus-partition": partition_parser(),
            "plexus-model": _model_parser(), "plexus-bench": bench_parser([check]),
            "plexus-sweep": sweep_parser(), "plexus-report": report_parser()}


def _numeric_dests(parser: argparse.ArgumentParser) -> set[str]:
    found = set()
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                found |= _numeric_dests(sub)
        elif action.type in (int, float):
            found.add(action.dest)
    return found


def test_every_numeric_option_of_every_tool_is_in_the_table():
    for prog, parser in _parsers().items():
        missing = _numeric_dests(parser) - set(BOUNDS)
        assert not missing, f"{prog}: numeric options without a bound: {sorted(missing)}"


@pytest.mark.parametrize("name, good, bad", [
    ("threads", [1, 1024], [0, 1025, 100000]),
    ("agg_chunks", [1, 65536], [0, 10**12]),
    ("cache_max_gb", [1e-3, 2.0**30], [0.0, -1.0, 1e300, float("nan"), float("inf")]),
    ("MASTER_PORT", [1, 65535], [0, 65536, 99999]),
    ("lr", [1e-9, 1000.0], [0.0, 1000.5, float("nan")]),
    ("dropout", [0.0, 0.999], [1.0, -0.1]),
    ("epochs", [0, 10**9], [-1, 10**9 + 1]),
    ("seed", [0, 2**63 - 1], [-1, 2**63]),
])
def test_the_table_holds_the_limits_written_here(name, good, bad):
    for value in good:
        assert check_bound(name, value) == value
    for value in bad:
        with pytest.raises(BoundError) as e:
            check_bound(name, value, f"--{name}")
        assert_one_line(e, f"--{name} must be")
    with pytest.raises(BoundError):
        check_bound(name, True)  # a bool is no number


# ---- the findings: each refused in one line, status 2, before anything starts --------------
PAST_THE_TABLE = [
    ("plexus-train", ["--threads", "100000"], "--threads must be at most 1024, got 100000"),
    ("plexus-partition", ["--dataset", "cora", "--grid", "1x1x1", "--layers", "2",
                          "--threads", "100000"], "--threads must be at most 1024"),
    ("plexus-train", ["--cache-max-gb", "1e300"], "--cache-max-gb must be a number of GiB"),
    ("plexus-train", ["--agg-chunks", "1000000000000"], "--agg-chunks must be at most 65536"),
    ("plexus-model", ["--world-size", "4", "--nodes", "100", "--nnz", "500", "--features",
                      "8", "--classes", "3", "--hidden", "100000000"], "--hidden must be at most"),
    ("plexus-sweep", ["--dataset", "cora", "--out", "/nonexistent/x", "--threads", "5000"],
     "--threads must be at most 1024"),
    ("plexus-bench", ["check", "--steps", "0"], "--steps must be >= 1"),
]


@pytest.mark.parametrize("prog, args, needle", PAST_THE_TABLE)
def test_numbers_past_the_table_are_one_line_and_status_2(prog, args, needle):
    """Each tool's main called here (on main, --threads 100000 was a segfault, exit 139, and
    --cache-max-gb 1e300 an OverflowError traceback: either would fail this test too); the
    console script's own process: the test below."""
    assert_one_line(tool_here(prog, *args), needle, prog=prog)


@pytest.mark.slow
@pytest.mark.parametrize("prog, args, needle", PAST_THE_TABLE[:2])
def test_a_number_past_the_table_is_one_line_and_status_2_in_a_process(prog, args, needle):
    """End to end, as a user sees it (exit status, stderr): the table's segfault case in the
    engine's console script and in the partitioner's (each project starts its tools in its own
    `run_tool`)."""
    proc = train(*args, launcher=(prog,), timeout=120)
    assert_one_line(proc, needle, prog=prog)


_TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
_SRUN = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
         "MASTER_ADDR": "127.0.0.1"}


@pytest.mark.parametrize("env, needle", [
    ({**_TORCHRUN, "MASTER_PORT": "99999"}, "MASTER_PORT must be at most 65535, got 99999"),
    ({**_TORCHRUN, "MASTER_PORT": "http"}, "MASTER_PORT='http' is not an integer"),
    ({**_TORCHRUN, "RANK": "2"}, "RANK=2 is not a rank of a job of WORLD_SIZE=2 ranks"),
    ({**_TORCHRUN, "RANK": "-1"}, "RANK must be >= 0"),
    ({**_TORCHRUN, "WORLD_SIZE": "0"}, "WORLD_SIZE must be >= 1"),
    ({**_TORCHRUN, "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=3"),
    ({**_SRUN, "SLURM_PROCID": "3"}, "SLURM_PROCID=3 is not a rank of a job of SLURM_NTASKS=2"),
    ({**_SRUN, "SLURM_NTASKS": "99999999"}, "SLURM_NTASKS must be at most 1048576"),
])
def test_launcher_variables_out_of_bounds_are_refused_up_front(env, needle):
    with pytest.raises(LaunchError) as e:
        detect_environment(env)
    assert_one_line(e, needle)


def test_good_launcher_variables_still_describe_the_job():
    job = detect_environment({**_TORCHRUN, "RANK": "1", "MASTER_PORT": "65535"})
    assert (job.rank, job.world_size, job.master_port) == (1, 2, 65535)
    job = detect_environment({**_SRUN, "SLURM_PROCID": "1", "SLURM_TASKS_PER_NODE": "2"})
    assert (job.kind, job.rank, job.local_world_size) == ("slurm", 1, 2)


def test_a_launcher_variable_past_the_table_is_one_line_on_the_command_line(monkeypatch, capsys):
    from plexus.train import main

    for key, value in {**_SRUN, "SLURM_PROCID": "3"}.items():
        monkeypatch.setenv(key, value)
    assert main(["--grid", "1x2x1", "--epochs", "1"]) == 2
    assert_one_line(capsys.readouterr().err, "SLURM_PROCID=3", prog="plexus-train")


def test_a_peer_that_never_joins_is_one_launch_error():
    """(On main: torch's DistStoreError traceback after the timeout.)"""
    from plexus_partition.launch.group import init_process_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = JobEnv("single", 0, 2, 0, 1, "127.0.0.1", port)  # tcp://, rank 1 never comes
    with pytest.raises(LaunchError) as e:
        init_process_group(env, 1.0, cpu=True, threads=1)
    assert_one_line(e, "could not join the job of 2 ranks at 127.0.0.1:", "within 1 s")
