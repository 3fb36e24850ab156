"""``plexus-train --spmm torch-sparse`` trains as the default backend does (issue 59 item 7):
where ../shared/wheels holds the torch-sparse build for this environment (./run installs it),
the same seeded run with each backend, on one rank and on a grid of two, gives the same losses
and accuracies, and the summary names the backend that ran; the default's run is the oracle
(torch's own CSR kernels). Elsewhere the backend is optional, and the test says why it skips.
plexus-train's main is called in this process (a grid's ranks are processes still): what differs
is the backend, not the console script (issue 58 item 5: four interpreters fewer)."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import losses, read_log, tool_here
from helpers import shipped_torch_sparse

pytestmark = pytest.mark.slow  # training runs, a world of two ranks


@pytest.mark.parametrize("grid", ["1x1x1", "1x2x1"])
def test_torch_sparse_trains_as_the_default_backend(grid, tmp_path):
    if not shipped_torch_sparse():
        pytest.skip("no torch-sparse wheel for this torch and Python in ../shared/wheels: the "
                    "--spmm torch-sparse backend is optional here")
    runs = {}
    for backend in ("torch", "torch-sparse"):
        log = tmp_path / f"{backend}.json"
        proc = tool_here("plexus-train", "--grid", grid, "--epochs", "20", "--spmm", backend,
                         "--no-cache", "--log-json", str(log), "--quiet", timeout=600)
        assert proc.returncode == 0, proc.stderr
        runs[backend] = read_log(log)
    (base, base_summary), (sparse, sparse_summary) = runs["torch"], runs["torch-sparse"]
    assert (base_summary["spmm"], sparse_summary["spmm"]) == ("torch", "torch-sparse")
    assert len(base) == len(sparse) == 20
    np.testing.assert_allclose(losses(sparse), losses(base), rtol=1e-5, atol=1e-6)
    for key in ("train_acc", "val_acc", "test_acc"):
        assert [r[key] for r in sparse] == [r[key] for r in base], key
