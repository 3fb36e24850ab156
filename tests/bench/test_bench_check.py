"""``plexus-bench check``, the first-run check of a machine: it passes here (gloo on the CPU), a
model that differs from the serial one is reported as FAIL with status 1, and bad input is one
line with status 2."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from cli_helpers import cli_env
from helpers import assert_one_line

LINE = re.compile(r"^(PASS|FAIL)  (\S+) +(gcn|gat) +(undirected|directed) +max abs diff: "
                  r"logits (\S+), loss (\S+), grads (\S+)  gloo cpu  this check \+([\d.]+ \w+)/rank "
                  r"\(peak RSS ([\d.]+ \w+)\)  "
                  r"step ([\d.]+ \w+)(  \[.*\])?$")
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def size(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["plexus-bench", *args], env=cli_env(), capture_output=True,
                          text=True, timeout=timeout)


def checks(stdout: str) -> list[re.Match]:
    found = [LINE.match(line) for line in stdout.splitlines()
             if line.startswith(("PASS", "FAIL"))]
    assert all(found), stdout
    return found  # type: ignore[return-value]


@pytest.mark.slow
def test_check_passes_on_two_cpu_ranks():
    proc = bench("check", "--world-size", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = checks(proc.stdout)
    # every grid of 1 and 2 ranks x 2 models x 2 graphs, each a line, each passed
    assert [(m[2], m[3], m[4]) for m in found] == [
        (grid, model, graph) for grid in ("1x1x1", "2x1x1", "1x2x1", "1x1x2")
        for graph in ("undirected", "directed") for model in ("gcn", "gat")]
    assert all(m[1] == "PASS" for m in found)
    for m in found:  # figures, not placeholders: differences within the tolerance, a step time
        assert all(0 <= float(m[k]) < 1e-4 for k in (5, 6, 7)), m[0]
        assert not m[9].startswith("0 ") and not m[10].startswith("0 "), m[0]
        assert size(m[8]) <= size(m[9]), m[0]  # the check's own growth, within its peak
    assert proc.stdout.splitlines()[-1].startswith(
        "plexus-bench check: 16 of 16 checks passed (gloo on cpu; world sizes 1, 2; ")


@pytest.mark.slow
def test_a_model_that_differs_from_the_serial_one_fails_with_status_1():
    # one weight of rank 0's distributed model shifted: what an engine bug looks like
    proc = bench("check", "--world-size", "1", "--device", "cpu", "--inject-mismatch")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = checks(proc.stdout)
    assert len(found) == 4 and all(m[1] == "FAIL" for m in found)
    for m in found:
        assert max(float(m[k]) for k in (5, 7)) > 1e-3, m[0]  # the differences are shown
        assert "rank 0: " in m[11] and "max abs error" in m[11], m[0]
    assert "0 of 4 checks passed" in proc.stdout.splitlines()[-1]


def test_check_grids_cover_every_axis_of_each_world_size():
    from plexus.bench.check import check_grids

    assert check_grids(1) == [(1, 1, 1)]
    assert check_grids(2) == [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2)]
    assert check_grids(4)[4:] == [(2, 2, 1), (2, 1, 2), (1, 2, 2)]
    assert check_grids(6)[-3:] == [(3, 2, 1), (3, 1, 2), (2, 3, 1)]


@pytest.mark.parametrize("args, message", [
    (["check", "--world-size", "0"], "--world-size must be in [1, 1048576], got 0"),
    (["check", "--steps", "0", "--device", "cpu"], "--steps must be >= 1"),
    (["check", "--world-size", "64", "--device", "cpu"], "no grid of 64 ranks fits"),
    (["check", "--world-size", "two"], "invalid int value"),
    (["check", "--device", "tpu"], "invalid choice"),
    ([], "choose a command: calibrate, check"),
])
def test_bad_input_is_one_line_and_status_2(args, message, capsys):
    from plexus.bench.cli import bench_main

    assert bench_main(args) == 2
    err = capsys.readouterr().err
    assert_one_line(err, prog="plexus-bench")
    assert message in err, err


def test_cuda_asked_for_without_cuda_is_status_2(capsys):
    from plexus.bench.cli import bench_main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert bench_main(["check", "--device", "cuda"]) == 2
    assert "--device cuda: device cuda asked for, but CUDA is not available" in \
        capsys.readouterr().err
