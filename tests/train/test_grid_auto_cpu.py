"""--grid auto on a CPU (issue 48 item 6): this machine's rates, measured once and kept in the
user's private cache, price the grids instead of a GPU node's; the line says which term decided
against the runner-up."""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import pytest

from helpers import assert_one_line
from plexus.perfmodel import CalibrationError, ModelSpec, rank_configs
from plexus.perfmodel import machine
from plexus.perfmodel.machine import MACHINE_CACHE_ENV, machine_cache_dir, machine_rates
from plexus.train.cli import build_parser
from cli_helpers import launched
from plexus.train.plan import deciding_term

#: a measurement's document as plexus-bench calibrate writes it, with rates no default has
DOC = {"version": 1, "spmm_flops": 3.0e8, "gemm_flops": 2.0e10, "elementwise_rate": 1.0e8,
       "alpha": 1.0e-3, "beta": 1.0e-9, "threads": 1, "cores": 2}


class FakeMeasure:
    """Counts the measurements asked for (each real one takes a minute on this machine)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, **kwargs) -> dict:
        self.calls.append(kwargs)
        return dict(DOC)


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    """The rates' bound counts this process's cores: two here, as on the machine the issue ran
    on (a world of 4 is then the largest measured), whatever this machine has."""
    monkeypatch.setattr(machine, "available_cores", lambda: 2)


@pytest.mark.parametrize("world", [5, 100_000, 0])
def test_a_world_past_two_ranks_per_core_is_refused_before_anything_is_measured(world, tmp_path):
    fake = FakeMeasure()
    with pytest.raises(CalibrationError) as e:
        machine_rates(world, tmp_path / "m", measure=fake)
    assert_one_line(e, f"--grid auto for {world} ranks", "at most 4 ranks (2 per core of 2)",
                    "--calibration FILE")
    assert fake.calls == [] and not (tmp_path / "m").exists()


def test_plexus_train_grid_auto_world_100000_is_one_line_exit_2(capsys, tmp_path, monkeypatch):
    from plexus.train.cli import main

    monkeypatch.setenv(MACHINE_CACHE_ENV, str(tmp_path / "m"))  # this machine's rates, as a user
    assert main(["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3", "--grid",
                 "auto", "--world-size", "100000", "--epochs", "1", "--quiet",
                 "--no-cache"]) == 2
    assert_one_line(capsys.readouterr().err, "--grid auto for 100000 ranks",
                    prog="plexus-train")
    assert not (tmp_path / "m").exists()  # nothing measured


def test_the_cache_folder_is_the_users_or_off():
    assert machine_cache_dir({MACHINE_CACHE_ENV: "off"}) is None
    assert str(machine_cache_dir({MACHINE_CACHE_ENV: "/x/m"})) == "/x/m"
    assert str(machine_cache_dir({"XDG_CACHE_HOME": "/c"})) == "/c/plexus/machine"


def test_rates_are_measured_once_kept_private_and_read_back(tmp_path):
    folder, fake = tmp_path / "m", FakeMeasure()
    first = machine_rates(4, folder, measure=fake)
    assert len(fake.calls) == 1 and fake.calls[0] == {"world_size": 4, "threads": 1,
                                                      "quick": True}
    assert first.measured_s is not None and "measured now" in first.said
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
    again = machine_rates(4, folder, measure=fake)
    assert len(fake.calls) == 1 and again.measured_s is None and "measured before" in again.said
    assert (again.calibration.spmm_flops, again.calibration.gemm_flops) == (3.0e8, 2.0e10)
    machine_rates(2, folder, measure=fake)  # another rank count: its own collectives
    assert len(fake.calls) == 2


def test_a_file_others_may_write_is_measured_again_and_a_shared_folder_refused(tmp_path):
    folder, fake = tmp_path / "m", FakeMeasure()
    path = machine_rates(4, folder, measure=fake).path
    doctored = dict(DOC, gemm_flops=1.0)
    path.write_text(json.dumps(doctored))
    os.chmod(path, 0o666)
    assert machine_rates(4, folder, measure=fake).calibration.gemm_flops == 2.0e10
    assert len(fake.calls) == 2
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(CalibrationError, match="only they may write") as e:
        machine_rates(4, shared, measure=fake)
    assert_one_line(e)


def _prediction(p, compute, overhead, axes, time_s):
    return dataclasses.replace(p, compute_s=compute, overhead_s=overhead,
                               comm_s_per_axis=axes, time_s=time_s)


def test_the_line_names_the_term_that_decided():
    base = rank_configs(4, ModelSpec(2708, 13264, 1433, 7))[0]
    best = _prediction(base, 0.010, 0.002, {"x": 0.0, "y": 0.030, "z": 0.0}, 0.040)
    runner = _prediction(base, 0.012, 0.002, {"x": 0.036, "y": 0.0, "z": 0.0}, 0.050)
    # by hand: x saves 36 ms, compute 2 ms; y costs 30 ms
    assert deciding_term(best, runner) == (
        "it wins by 10.0 ms, decided by communication along x (0 us against 36.0 ms), "
        "outweighing communication along y (30.0 ms against 0 us)")
    tie = _prediction(base, 0.012, 0.002, {"x": 0.036, "y": 0.0, "z": 0.0}, 0.040)
    assert deciding_term(best, tie).startswith("equal times: the smaller training peak decided")


def _auto_line(capsys, *argv: str) -> str:
    launched(build_parser().parse_args(["--no-cache", *argv]))
    return capsys.readouterr().out


def test_grid_auto_on_a_cpu_prices_with_this_machines_rates(tmp_path, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA here: --grid auto prices GPUs")
    fake = FakeMeasure()
    monkeypatch.setattr("plexus.perfmodel.measure.calibrate", fake)
    monkeypatch.setenv(MACHINE_CACHE_ENV, str(tmp_path / "m"))
    out = _auto_line(capsys, "--grid", "auto", "--world-size", "4")
    lines = out.splitlines()
    assert len(fake.calls) == 1 and len(lines) == 2
    assert "measuring this machine's rates for 4 ranks once" in lines[0]
    assert "priced with this machine's rates (measured now" in lines[1]
    assert "decided by" in lines[1] and "runner-up" in lines[1]
    assert "not this machine's" not in lines[1]
    out = _auto_line(capsys, "--grid", "auto", "--world-size", "4")
    assert len(fake.calls) == 1 and "(measured before, kept in " in out and out.count("\n") == 1
    # given rates, a given grid, or one rank: nothing measured
    _auto_line(capsys, "--grid", "2x1x1")
    _auto_line(capsys, "--grid", "auto", "--world-size", "1")
    calibration = machine.machine_file(tmp_path / "m", 4)
    assert "priced with calibration" in _auto_line(capsys, "--grid", "auto", "--world-size",
                                                   "4", "--calibration", str(calibration))
    assert len(fake.calls) == 1


@pytest.mark.slow
def test_a_real_measurement_is_kept_and_prices_the_choice(tmp_path, monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA here: --grid auto prices GPUs")
    monkeypatch.setenv(MACHINE_CACHE_ENV, str(tmp_path / "m"))
    out = _auto_line(capsys, "--grid", "auto", "--world-size", "2")
    assert "priced with this machine's rates (measured now in " in out
    kept = json.loads(machine.machine_file(tmp_path / "m", 2).read_text())
    assert kept["spmm_flops"] > 0 and kept["alpha"] > 0 and "2" in kept["worlds"]
