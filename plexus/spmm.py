"""Sparse-times-dense products behind one interface, with a hand-written backward.

A `SparseBlock` holds a block of Â and its transpose (the backward needs Âᵀ·dY; keeping the
transpose avoids re-transposing a CSR every step). Backends:
- "torch": torch CSR tensors (CPU and CUDA; the default),
- "scipy": scipy.sparse CSR on the CPU (its single-thread SpMM beats torch's on some machines),
- "torch-sparse": torch_sparse.SparseTensor, when that optional package is installed.
Results do not depend on the backend beyond float rounding.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

BACKENDS = ("torch", "scipy", "torch-sparse")


def available_backends() -> list[str]:
    """The SpMM backends that can run here."""
    out = ["torch", "scipy"]
    try:
        import torch_sparse  # noqa: F401, PLC0415
        out.append("torch-sparse")
    except ImportError:
        pass
    return out


def _torch_csr(m: sp.csr_matrix, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():  # "CSR support is in beta" on every construction
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                       torch.from_numpy(m.indices.astype(np.int64)),
                                       torch.from_numpy(m.data.astype(np.float32)),
                                       size=m.shape, device=device)


class SparseBlock:
    """A block of Â (and Âᵀ) ready for ``block @ X`` and ``blockᵀ @ X`` on one backend."""

    def __init__(self, matrix: sp.csr_matrix, device: torch.device | str = "cpu",
                 backend: str = "torch", transpose: sp.csr_matrix | None = None) -> None:
        device = torch.device(device)
        if backend not in BACKENDS:
            raise ValueError(f"unknown SpMM backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if backend == "scipy" and device.type != "cpu":
            raise ValueError("the scipy SpMM backend runs on the CPU only; use --spmm torch on GPUs")
        self.shape = matrix.shape
        self.nnz = int(matrix.nnz)
        self.backend = backend
        self.device = device
        mt = transpose if transpose is not None else matrix.T.tocsr()
        if backend == "torch":
            self._a, self._at = _torch_csr(matrix, device), _torch_csr(mt, device)
        elif backend == "scipy":
            self._a, self._at = matrix.astype(np.float32), mt.astype(np.float32)
        else:
            from torch_sparse import SparseTensor  # noqa: PLC0415

            def conv(m: sp.csr_matrix) -> "SparseTensor":
                coo = m.tocoo()
                return SparseTensor(row=torch.from_numpy(coo.row.astype(np.int64)),
                                    col=torch.from_numpy(coo.col.astype(np.int64)),
                                    value=torch.from_numpy(coo.data.astype(np.float32)),
                                    sparse_sizes=m.shape).to(device)
            self._a, self._at = conv(matrix), conv(mt)

    def _mm(self, a, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "torch":
            return torch.sparse.mm(a, x)
        if self.backend == "scipy":
            return torch.from_numpy(np.asarray(a @ x.detach().numpy()))
        return a.matmul(x)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        """block @ x (no autograd)."""
        return self._mm(self._a, x.contiguous())

    def tmm(self, x: torch.Tensor) -> torch.Tensor:
        """blockᵀ @ x (no autograd)."""
        return self._mm(self._at, x.contiguous())
