"""Every SpMM backend computes Â·X and Âᵀ·X, at narrow and wide widths (the torch backend
switches kernels at `REDUCE_MIN_WIDTH` on the CPU), on blocks with empty rows and columns."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from helpers import shipped_torch_sparse
from plexus.engine.spmm import REDUCE_MIN_WIDTH, SparseBlock, available_backends


@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("width", [1, 16, REDUCE_MIN_WIDTH - 1, REDUCE_MIN_WIDTH, 130])
def test_block_products_equal_dense(backend, width):
    rng = np.random.default_rng(width)
    a = sp.random(300, 170, density=0.05, random_state=width, format="lil", dtype=np.float32)
    a[5, :] = 0  # an empty row
    a = a.tocsr()
    blk = SparseBlock.build(a, "cpu", backend)
    x = torch.from_numpy(rng.standard_normal((170, width)).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal((300, width)).astype(np.float32))
    dense = torch.from_numpy(a.toarray()).double()
    torch.testing.assert_close(blk.mm(x).double(), dense @ x.double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(blk.tmm(y).double(), dense.T @ y.double(), rtol=1e-5, atol=1e-5)
    assert blk.mm(x).is_contiguous() and blk.mm(x).dtype == torch.float32


def test_the_shipped_torch_sparse_wheel_is_installed_and_used():
    # ./run installs ../shared/wheels' torch-sparse into an environment of the torch and Python
    # it was built for; there the backend must load (and every test above runs it too)
    if not shipped_torch_sparse():
        pytest.skip("no torch-sparse wheel for this torch and Python")
    assert "torch-sparse" in available_backends()
    a = sp.random(50, 40, density=0.1, random_state=0, format="csr", dtype=np.float32)
    x = torch.ones(40, 3)
    out = SparseBlock.build(a, "cpu", "torch-sparse").mm(x)
    torch.testing.assert_close(out.double(), torch.from_numpy(a.toarray()).double() @
                               x.double(), rtol=1e-6, atol=1e-6)
