"""Reading pickles found in a user's directory without letting them run code.

A pickle names the callables it wants called; `RestrictedUnpickler` resolves only a short list
(numpy arrays, scalars and dtypes without Python objects inside, plain containers, and whatever
a caller adds, such as scipy's sparse matrix classes for Planetoid). Anything else is an
`pickle.UnpicklingError`, before it is imported, let alone called. `load_torch_numpy` reads
the files ogb writes with ``torch.save`` (a zip holding ``data.pkl``) through the same unpickler,
without torch.load: ogb's caches hold only numpy arrays and plain containers, so any tensor
storage they reference is refused too.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import IO, Any, Mapping

import numpy as np

_core = np._core if hasattr(np, "_core") else np.core  # numpy 2 renamed numpy.core


def _dtype(*args: Any) -> np.dtype:
    """np.dtype, refusing object dtypes: an array of objects could hold anything."""
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError(f"object dtype {dt} refused")
    return dt


class _NdarrayName:
    """What ``numpy.ndarray`` resolves to: an argument of `_reconstruct`, never callable (the
    ndarray constructor takes a raw buffer and strides)."""


def _reconstruct(cls: Any, shape: Any, dtype: Any) -> np.ndarray:
    if cls is not _NdarrayName:
        raise pickle.UnpicklingError("only plain numpy arrays are accepted")
    return _core.multiarray._reconstruct(np.ndarray, shape, _dtype(dtype))


def _scalar(dtype: Any, *args: Any) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise pickle.UnpicklingError("only numeric numpy scalars are accepted")
    return _core.multiarray.scalar(dtype, *args)


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    return _core.numeric._frombuffer(buf, _dtype(dtype), shape, order)


_NUMPY = {"_reconstruct": _reconstruct, "scalar": _scalar, "dtype": _dtype,
          "ndarray": _NdarrayName, "_frombuffer": _frombuffer}
_NUMPY_MODULES = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray",
                  "numpy.core.numeric", "numpy._core.numeric")
_PLAIN = {("builtins", n): getattr(__import__("builtins"), n)
          for n in ("list", "dict", "set", "frozenset", "tuple", "int", "float", "complex",
                    "bool", "str")}
_PLAIN.update({("collections", "OrderedDict"): __import__("collections").OrderedDict,
               ("collections", "defaultdict"): __import__("collections").defaultdict,
               # protocol-2 pickles written by Python 3 spell bytes as _codecs.encode(str, enc)
               ("_codecs", "encode"): __import__("_codecs").encode})


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only numpy data, plain containers and ``extra`` globals.

    ``extra`` maps (module, name) to the object to return for it (e.g. scipy sparse classes);
    Python 2 module names (``__builtin__``) are read as today's.
    """

    def __init__(self, file: IO[bytes], extra: Mapping[tuple[str, str], Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self._extra = dict(extra or {})

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        module = "builtins" if module == "__builtin__" else module
        if module in _NUMPY_MODULES and name in _NUMPY:
            return _NUMPY[name]
        found = self._extra.get((module, name), _PLAIN.get((module, name)))
        if found is None:
            raise pickle.UnpicklingError(f"unexpected type {module}.{name} refused")
        return found

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle hook
        raise pickle.UnpicklingError("reference to external data (a tensor storage) refused")


def load_restricted(file: IO[bytes], extra: Mapping[tuple[str, str], Any] | None = None,
                    **kwargs: Any) -> Any:
    """Unpickle one object from ``file`` with `RestrictedUnpickler`."""
    return RestrictedUnpickler(file, extra, **kwargs).load()


def load_torch_numpy(path: str | Path) -> Any:
    """The object in a ``torch.save`` zip file that holds only numpy data and containers.

    Raises `pickle.UnpicklingError` for anything else (tensors, other classes, the legacy
    non-zip format), `zipfile.BadZipFile`/`OSError` for an unreadable file.
    """
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(names) != 1:
            raise pickle.UnpicklingError("not a torch.save zip archive (no single data.pkl)")
        with zf.open(names[0]) as f:
            return load_restricted(f)
