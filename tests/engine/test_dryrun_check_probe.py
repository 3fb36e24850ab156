"""The dry run's fourth probe checks the fit of the first three (and a fifth, the degree's, that no
size moves with Â's non-zeros) (`plexus.engine.dryrun.fit_stage`,
issue 58: removing the check passed every test): a size that fits a monomial at the base, the
sizes' and the axes' probes but is another at the check probe is refused. The size the check
probe sees is planted here (one element more than the stage issued), so whatever monomial the
three fitting probes give, the fourth disagrees with it."""

from __future__ import annotations

import pytest

import plexus.engine.dryrun as dryrun
from plexus_partition.model.grid import GridShape
from plexus_partition.model.layout import padding
from plexus_partition.model.model import ModelConfig
from plexus_partition.model.ops import OPERATORS
from plexus_partition.model.ops.base import stage_sizes


def _gcn_stage():
    cfg = ModelConfig(2, 16, 0.0, kind="gcn")
    plans = cfg.plans(20, 5)
    shape = GridShape.of((2, 2, 2))
    pad = padding(shape, plans, 50, cfg.widths(20, 5))
    return next(iter(stage_sizes(plans, shape, pad, OPERATORS))).plan


@pytest.mark.parametrize("probe", [0, 1, 2, 3, 4])
def test_the_dry_runs_check_probe_refuses_a_size_the_fit_misses(monkeypatch, probe):
    """Every probe's sizes count: one element more in any one of the five runs is refused
    (probes 0-2 give a fit the others then contradict; probe 3 is the check itself; the fifth
    runs the base again at another degree of Â's block, where a size that moves is refused)."""
    plan = _gcn_stage()
    dims = (2, 2, 2)
    clean = dryrun.fit_stage(plan, dims, first=False, training=True)
    assert clean  # the stage as it is: fitted, no error
    real, runs = dryrun.run_stage, []

    def planted(*args, **kwargs):
        calls = real(*args, **kwargs)
        runs.append(len(runs))
        if runs[-1] == probe:
            calls = [calls[0]._replace(size=calls[0].size + 1), *calls[1:]]
        return calls

    monkeypatch.setattr(dryrun, "run_stage", planted)
    with pytest.raises(dryrun.RecordingError):
        dryrun.fit_stage(plan, dims, first=False, training=True)
    assert len(runs) == 5  # the five probes ran
