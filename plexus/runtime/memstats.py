"""Measured memory of one process: peak RSS, a tracked-tensor high-water mark, CUDA's peak.

Peak RSS (``getrusage``) is what the operating system saw: everything the process ever held at
once, set-up included. The tracked-tensor high-water mark counts tensor storages only: the bytes
resident when tracking starts (the model's shard, parameters, buffers) plus the most that tensors
allocated inside the tracked region (activations, saved tensors, gradients, optimizer state)
held at once. It sees every ATen operation through a dispatch mode and frees a storage's bytes
when its last reference dies, so it is exact for torch allocations and blind to allocator
slack, numpy and Python objects. On GPUs the allocator's own peak is the figure to read.
"""

from __future__ import annotations

import resource
import sys
import weakref
from typing import Any, Iterable

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB


def reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS count of this process (Linux ``clear_refs`` 5), so a later
    `peak_rss_bytes` covers only what follows (training, not loading). False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cuda_peak_bytes(device: torch.device) -> int | None:
    """The CUDA caching allocator's peak allocated bytes on ``device`` (None off CUDA)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


def _storages(obj: Any, seen: dict[int, int], depth: int = 0) -> None:
    """Record (data pointer -> bytes) of every tensor / numpy array / scipy matrix in ``obj``."""
    if depth > 4 or obj is None:
        return
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.strided:
            st = obj.untyped_storage()
            if st.data_ptr():
                seen[st.data_ptr()] = st.nbytes()
        elif obj.layout in (torch.sparse_csr, torch.sparse_csc):
            for part in ((obj.crow_indices(), obj.col_indices()) if obj.layout == torch.sparse_csr
                         else (obj.ccol_indices(), obj.row_indices())):
                _storages(part, seen, depth + 1)
            _storages(obj.values(), seen, depth + 1)
        return
    if isinstance(obj, np.ndarray):
        base = obj if obj.base is None else obj.base
        if isinstance(base, np.ndarray) and base.nbytes:
            seen[base.__array_interface__["data"][0]] = base.nbytes
        return
    if hasattr(obj, "indptr") and hasattr(obj, "indices") and hasattr(obj, "data"):  # scipy
        for part in (obj.indptr, obj.indices, obj.data):
            _storages(part, seen, depth + 1)
        return
    if isinstance(obj, dict):
        for v in obj.values():
            _storages(v, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _storages(v, seen, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        for v in vars(obj).values():
            _storages(v, seen, depth + 1)


def resident_storages(*roots: Any) -> dict[int, int]:
    """{data pointer: bytes} of the distinct tensor storages (and numpy / scipy arrays) reachable
    from ``roots``: modules' parameters, buffers and plain attributes (lists, dicts and small
    objects such as sparse-block handles included)."""
    seen: dict[int, int] = {}
    for root in roots:
        modules: Iterable[Any] = root.modules() if isinstance(root, torch.nn.Module) else [root]
        for m in modules:
            if isinstance(m, torch.nn.Module):
                for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
                    _storages(t, seen)
                for k, v in vars(m).items():
                    if not k.startswith("_") and not isinstance(v, torch.nn.Module):
                        _storages(v, seen)
            else:
                _storages(m, seen)
    return seen


class TensorTracker(TorchDispatchMode):
    """Context manager: the high-water mark of tensor storage bytes alive at once.

    ``peak_bytes`` = ``baseline`` (the storages resident at entry, given by the caller as
    `resident_storages` returns them) + the most bytes
    that storages first seen inside the region held at once. Re-entering keeps the peak.
    """

    def __init__(self, resident: dict[int, int] | None = None) -> None:
        super().__init__()
        # views of resident storages (e.g. the features passed through an identity) are not
        # new memory
        self._resident = dict(resident or {})
        self.baseline = sum(self._resident.values())
        self.live = 0
        self.peak_live = 0
        self._alive: dict[int, Any] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ so torch.compile skips it, and that wrapper
        # imports torch._dynamo (seconds) on the first operation; nothing compiled runs here
        return False

    @property
    def peak_bytes(self) -> int:
        """Baseline plus the peak of the tracked allocations."""
        return self.baseline + self.peak_live

    def _free(self, ptr: int, nbytes: int) -> None:
        self.live -= nbytes
        self._alive.pop(ptr, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_meta:
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr and ptr not in self._alive and ptr not in self._resident:
                    n = st.nbytes()
                    self.live += n
                    self.peak_live = max(self.peak_live, self.live)
                    # storages keep their Python object while any tensor uses them, so this
                    # fires when the memory is released
                    self._alive[ptr] = weakref.finalize(st, self._free, ptr, n)
        return out
