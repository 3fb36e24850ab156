"""Sparse-times-dense products behind one interface.

A `SparseBlock` holds a block of Â and a handle on its transpose (the backward needs Âᵀ·dY).
Backends:
- "torch": torch CSR tensors (CPU and CUDA; the default),
- "scipy": scipy.sparse CSR on the CPU; its transpose is a free CSC view,
- "torch-sparse": torch_sparse.SparseTensor, when that optional package is installed.
Results do not depend on the backend beyond float rounding. Values are float32, or the engine's
compute precision (bfloat16, float16) on the torch backend; scipy multiplies in float32 only.
"""

from __future__ import annotations

import warnings
from typing import Any, Hashable

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


def check_backend(backend: str, device: torch.device,
                  dtype: torch.dtype = torch.float32) -> None:
    """Raise a one-line ValueError if ``backend`` cannot run on ``device`` in ``dtype`` here."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown SpMM backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "scipy" and device.type != "cpu":
        raise ValueError("the scipy SpMM backend runs on the CPU only; use the torch backend "
                         "on GPUs")
    if backend == "scipy" and dtype != torch.float32:
        # scipy has no bfloat16; a float32 round trip per product would cost more than it saves
        raise ValueError(f"the scipy SpMM backend multiplies in float32 only, not {dtype}; use "
                         "the torch backend for a lower precision")
    # only a torch-sparse run imports it (its libraries cost a plain run ~18 MiB of RSS)
    if backend == "torch-sparse" and backend not in available_backends():
        raise ValueError(f"SpMM backend {backend!r} needs the optional package torch-sparse "
                         "(pip install 'plexus-gnn[sparse]'); or use the torch backend")


def index_fits_int32(shape: tuple[int, int], nnz: int) -> bool:
    """Whether a CSR block of this shape and non-zero count can use 32-bit indices."""
    return max(shape[0], shape[1], nnz) < 2**31


def to_backend(m: sp.spmatrix, backend: str, device: torch.device,
               dtype: torch.dtype = torch.float32) -> Any:
    """The backend's representation of the sparse matrix ``m``, values in ``dtype`` (scipy:
    float32 only, see `check_backend`)."""
    if backend == "scipy":
        return m  # CSR, or a CSC view for a transpose: both multiply without a copy
    m = sp.csr_matrix(m)
    if backend == "torch":
        # 32-bit indices where they fit (half the index bytes); on the CPU the tensor then
        # shares the scipy arrays instead of copying them
        index = np.int32 if index_fits_int32(m.shape, m.nnz) else np.int64
        with warnings.catch_warnings():  # "CSR support is in beta" on every construction
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(
                torch.from_numpy(m.indptr.astype(index, copy=False)),
                torch.from_numpy(m.indices.astype(index, copy=False)),
                _values(m.data, dtype), size=m.shape, device=device)
    from torch_sparse import SparseTensor  # noqa: PLC0415

    coo = m.tocoo()
    return SparseTensor(row=torch.from_numpy(coo.row.astype(np.int64)),
                        col=torch.from_numpy(coo.col.astype(np.int64)),
                        value=_values(coo.data, dtype),
                        sparse_sizes=m.shape).to(device)


def _values(data: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A CSR's values as a ``dtype`` tensor (float32: sharing ``data`` where it is float32)."""
    values = torch.from_numpy(data.astype(np.float32, copy=False))
    return values if dtype == torch.float32 else values.to(dtype)


# From this width on, ATen's CPU SpMM-with-reduction kernel beats plain torch.sparse.mm
# (R-MAT scale 17: 1.4x at width 64, 1.45x at 128; slower below 48). benchmarks/spmm_backends.py
REDUCE_MIN_WIDTH = 48


def _multiply(handle: Any, backend: str, x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    if backend == "torch":
        # the CPU's plain CSR SpMM (MKL) has float32 and float64 only: bfloat16 and float16
        # take the reduction kernel at every width
        if x.device.type == "cpu" and (x.shape[1] >= REDUCE_MIN_WIDTH
                                       or x.dtype not in (torch.float32, torch.float64)):
            return torch.sparse.mm(handle, x, "sum")
        return torch.sparse.mm(handle, x)
    if backend == "scipy":
        return torch.from_numpy(np.ascontiguousarray(handle @ x.detach().numpy()))
    return handle.matmul(x)


def csr_mm(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a @ x for a torch CSR tensor ``a`` (no autograd), with the torch backend's kernel choice
    (per-edge values built on the fly, e.g. attention coefficients)."""
    return _multiply(a, "torch", x)


class SparseBlock:
    """A block of Â ready for ``block @ x`` (`mm`) and ``blockᵀ @ x`` (`tmm`)."""

    def __init__(self, a: Any, at: Any | None, shape: tuple[int, int], nnz: int,
                 backend: str) -> None:
        self._a, self._at, self.shape, self.nnz, self.backend = a, at, shape, nnz, backend

    @classmethod
    def build(cls, matrix: sp.csr_matrix, device: torch.device | str = "cpu",
              backend: str = "torch", transpose: bool = True,
              dtype: torch.dtype = torch.float32) -> "SparseBlock":
        """One block on ``backend`` with values in ``dtype``; ``transpose=False`` skips Âᵀ
        (forward-only blocks)."""
        device = torch.device(device)
        check_backend(backend, device, dtype)
        at = to_backend(matrix.T, backend, device, dtype) if transpose else None
        return cls(to_backend(matrix, backend, device, dtype), at, matrix.shape, int(matrix.nnz),
                   backend)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        """block @ x (no autograd)."""
        return _multiply(self._a, self.backend, x)

    def tmm(self, x: torch.Tensor) -> torch.Tensor:
        """blockᵀ @ x (no autograd)."""
        return _multiply(self._at, self.backend, x)


def build_blocks(blocks: dict[Hashable, sp.csr_matrix], transposes: dict[Hashable, Hashable],
                 device: torch.device, backend: str,
                 dtype: torch.dtype = torch.float32) -> dict[Hashable, SparseBlock]:
    """SparseBlocks (values in ``dtype``) for every matrix of ``blocks``. ``transposes[k] = j``
    says block j is block k's transpose (a symmetric Â): k's backward then reuses j's memory
    instead of a new Âᵀ."""
    check_backend(backend, device, dtype)
    handles: dict[Hashable, Any] = {}

    def handle(key: Hashable) -> Any:
        if key not in handles:
            handles[key] = to_backend(blocks[key], backend, device, dtype)
        return handles[key]

    out = {}
    for key, m in blocks.items():
        if key in transposes:
            at = handle(transposes[key])
        else:
            at = to_backend(m.T, backend, device, dtype)
        out[key] = SparseBlock(handle(key), at, m.shape, int(m.nnz), backend)
    return out
