"""Machine rates for the performance model: the `Calibration` it prices time with, read from the
JSON file ``plexus-bench calibrate`` writes (`plexus.perfmodel.measure` measures the rates),
checked on reading, and written atomically.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from plexus_datasets.base.atomic import atomic_file
from plexus_datasets.base.gate import UnsafeTargetError, open_trusted
from plexus_partition.model.grid import AXES

from .errors import CalibrationError
from .spmmcost import SpmmCost

FORMAT_VERSION = 1
#: Link classes a cluster's collectives are priced with: inside a node (NVLink, PCIe, shared
#: memory); across nodes with 4+ ("strided4") or 2-3 ("strided") of the group's ranks on each
#: node, a ring crossing each node boundary on that many NICs; one rank per node ("inter").
LINK_CLASSES = ("intra", "strided4", "strided", "inter")
#: A class a calibration lacks is priced as the next slower one (a ring is never faster than
#: its slowest link: the conservative reading of a calibration that measured fewer classes).
SLOWER = {"strided4": "strided", "strided": "inter"}
#: What a prediction priced with the built-in rates says it is.
UNCALIBRATED = "uncalibrated (GPU defaults)"
#: The environment variable naming a calibration file every tool uses when none is given.
CALIBRATION_ENV = "PLEXUS_CALIBRATION"
#: A precision's own rates (`Calibration.rates`).
PRECISION_RATES = ("spmm_flops", "gemm_flops", "elementwise_rate")


@dataclass(frozen=True)
class Calibration:
    """Machine rates for the time model.

    ``alpha`` is seconds per collective step (latency), ``beta`` seconds per byte moved by one
    rank; ``worlds`` holds the pair measured on a local world of each size, ((4, α, β),), which
    prices runs with that many ranks per host (`link`); ``axes`` overrides both for single axes,
    e.g. (("z", 5e-5, 1/12.5e9),) when z crosses nodes. ``elementwise_rate`` is element passes
    per second of memory-bound elementwise work (dropout's hash, ReLU, bias, the loss).
    ``cores``: the cores of the measured machine, whose ranks share them (0: a device per rank,
    no sharing); the rates are one rank's on ``threads`` threads. The defaults describe an
    order-of-magnitude GPU node (not this machine): run ``plexus-bench calibrate`` for measured
    numbers.

    A GPU calibration (``plexus-bench calibrate --device cuda``, `plexus.perfmodel.gpucal`) or
    a built-in profile (`plexus.perfmodel.profiles`) also names its ``device`` and ``gpu``,
    holds bf16's rates under ``precisions`` (`rates`), the (α, β) of each link class it
    measured under ``links`` (`link_class`: "intra" inside a node, "inter" between nodes,
    priced per axis by `plexus.perfmodel.placement`), the GPU's memory and its node size.
    """

    spmm_flops: float = 2e11
    gemm_flops: float = 1e13
    alpha: float = 1e-5
    beta: float = 1.0 / 20e9
    axes: tuple[tuple[str, float, float], ...] = ()
    source: str = "defaults"
    worlds: tuple[tuple[int, float, float], ...] = ()
    elementwise_rate: float = 1e11
    cores: int = 0
    threads: int = 1
    device: str = "cuda"  # what the rates describe: "cpu" or "cuda" (files: "cpu" unless named)
    gpu: str = ""  # the GPU's name (torch.cuda.get_device_name) or the profile's
    links: tuple[tuple[str, float, float], ...] = ()  # (link class, α, β): `LINK_CLASSES`
    precisions: tuple[tuple[str, float, float, float], ...] = ()  # (dtype, SpMM, GEMM, elementwise)
    device_memory: float = 0.0  # bytes of one GPU (0: not known)
    gpus_per_node: int = 0  # of the measured cluster or the profile's node (0: not known)
    profile: str = ""  # a built-in profile's name (`plexus.perfmodel.profiles`)
    reference: str = ""  # where a profile's figures come from
    # (world, group, latency s per call, β s per byte): collectives of ``group`` ranks while a
    # local world of ``world`` ranks shares the host's cores (`group_link`)
    groups: tuple[tuple[int, int, float, float], ...] = ()
    stage_overhead: float = 0.0  # CPU seconds per stage per step besides its flops (`overhead`)
    step_overhead: float = 0.0  # CPU seconds per step besides its stages' (loss, optimizer)
    spmm_cost: SpmmCost | None = None  # a measured float32 SpMM byte model (None: the flop rate)
    citations: tuple[tuple[str, str], ...] = ()  # (constant, where it was measured): profiles

    def core_share(self, ranks_per_host: int | None) -> float:
        """The fraction of its calibrated rates a rank runs at when ``ranks_per_host`` ranks
        share this machine's cores: below 1 once they outnumber the cores (4 ranks on 2 cores
        run each at half speed). A rank alone is not credited with more threads than the
        calibration measured (no assumption on how the kernels scale)."""
        if not self.cores or not ranks_per_host:
            return 1.0
        return min(1.0, self.cores / (ranks_per_host * self.threads))

    @property
    def calibrated(self) -> bool:
        """Whether the rates were measured (a file or a dict), not the built-in GPU-node ones
        nor a published profile's."""
        return self.source != "defaults" and not self.profile

    @property
    def label(self) -> str:
        """What priced a prediction, as every tool prints it: ``uncalibrated (GPU defaults)``,
        ``profile NAME (its reference)``, or ``calibration FILE (device, GPU)``."""
        if self.profile:
            return f"profile {self.profile} ({self.reference})"
        if self.source == "defaults":
            return UNCALIBRATED
        what = ", ".join(x for x in (self.device, self.gpu) if x)
        return f"calibration {self.source}" + (f" ({what})" if what else "")

    def rates(self, dtype_bytes: int = 4) -> tuple[float, float, float]:
        """(SpMM flop/s, GEMM flop/s, elementwise passes/s) at a compute precision of
        ``dtype_bytes``: a 2-byte precision's own rates where they were measured (bf16),
        else the float32 ones."""
        if dtype_bytes == 2:
            for _name, spmm, gemm, elementwise in self.precisions:
                return spmm, gemm, elementwise
        return self.spmm_flops, self.gemm_flops, self.elementwise_rate

    def link_class(self, name: str) -> tuple[float, float]:
        """(α, β) of the link class ``name`` (`LINK_CLASSES`: "intra" inside a node,
        "strided4"/"strided" across nodes with 4+/2-3 of the group's ranks per node, "inter"
        one per node). A calibration without link classes (a CPU file, the defaults) prices
        every link with ``alpha``/``beta``; one without a strided class prices it as the next
        slower class it has (`SLOWER`); one that has some but not ``name`` raises
        `CalibrationError`."""
        if not self.links:
            return self.alpha, self.beta
        for cls, alpha, beta in self.links:
            if cls == name:
                return alpha, beta
        if name in SLOWER:
            return self.link_class(SLOWER[name])
        have = ", ".join(c for c, _, _ in self.links)
        fix = ("calibrate across nodes (srun ... plexus-bench calibrate --device cuda, "
               "docs/design.md), or place every axis in a node (--gpus-per-node)"
               if name in ("inter", *SLOWER) else "calibrate on a node with several GPUs")
        raise CalibrationError(f"{self.label}: no {name!r} link class (it has {have}); the "
                               f"placement needs it: {fix}")

    def link(self, axis: str, ranks_per_host: int | None = None,
             link_class: str | None = None) -> tuple[float, float]:
        """(α, β) of collectives over ``axis``: the axis's own pair if given; else, placed on
        a cluster, its ``link_class``'s (`link_class`); else, when ``ranks_per_host`` ranks
        share a host, `local_link`'s."""
        for name, alpha, beta in self.axes:
            if name == axis:
                return alpha, beta
        if link_class is not None:
            return self.link_class(link_class)
        return self.local_link(ranks_per_host)

    def local_link(self, ranks_per_host: int | None) -> tuple[float, float]:
        """(α, β) of collectives among ``ranks_per_host`` ranks of one host: the pair measured
        on the local world closest in size (ties: the larger), else ``alpha``/``beta``."""
        if self.worlds and ranks_per_host:
            _, alpha, beta = min(self.worlds, key=lambda w: (abs(math.log(w[0] / ranks_per_host)),
                                                             -w[0]))
            return alpha, beta
        return self.alpha, self.beta

    def group_link(self, ranks_per_host: int | None, group: int) -> tuple[float, float] | None:
        """(latency per call, β) of a collective over ``group`` ranks when ``ranks_per_host``
        ranks share this host's cores, measured so (`measure_collectives`) on the local world
        closest in size (ties: the larger); None when the calibration has no such group (an
        older file, a GPU's or a profile: `link`'s α-β ring prices it)."""
        if not self.groups or not ranks_per_host:
            return None
        sizes = sorted({w for w, _, _, _ in self.groups})
        world = min(sizes, key=lambda w: (abs(math.log(w / ranks_per_host)), -w))
        for w, p, latency, beta in self.groups:
            if w == world and p == group:
                return latency, beta
        return None

    def overhead(self, stages: int) -> float:
        """CPU seconds of one training step's fixed work, whatever the graph's size: Python,
        autograd and the dispatch of every small operation, for ``stages`` stages plus the
        step's own (loss, optimizer); measured on the engine's own step (`calibrate`), 0 in a
        file without them."""
        return self.step_overhead + stages * self.stage_overhead

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the format `load_calibration` reads."""
        return {"spmm_flops": self.spmm_flops, "gemm_flops": self.gemm_flops,
                "elementwise_rate": self.elementwise_rate,
                "alpha": self.alpha, "beta": self.beta,
                "axes": {a: {"alpha": al, "beta": be} for a, al, be in self.axes},
                "worlds": {str(w): {"alpha": al, "beta": be} for w, al, be in self.worlds},
                "cores": self.cores, "threads": self.threads, "source": self.source,
                "device": self.device, "gpu": self.gpu,
                "links": {c: {"alpha": al, "beta": be} for c, al, be in self.links},
                "precisions": {d: {"spmm_flops": sp, "gemm_flops": ge, "elementwise_rate": el}
                               for d, sp, ge, el in self.precisions},
                "device_memory": self.device_memory, "gpus_per_node": self.gpus_per_node,
                "profile": self.profile, "reference": self.reference,
                "groups": self._groups_dict(),
                "stage_overhead": self.stage_overhead, "step_overhead": self.step_overhead,
                **({"spmm_cost": self.spmm_cost.to_dict()} if self.spmm_cost else {}),
                **({"citations": dict(self.citations)} if self.citations else {})}

    def _groups_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for world, group, latency, beta in self.groups:
            out.setdefault(str(world), {})[str(group)] = {"latency": latency, "beta": beta}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "dict") -> "Calibration":
        """Read the keys spmm_flops, gemm_flops, alpha, beta and optional axes{x:{alpha,beta}}.

        Missing keys keep their defaults; bad values raise ValueError naming the key.
        """
        if not isinstance(data, Mapping):
            raise CalibrationError(f"{source}: calibration must be a JSON object")
        base = cls()

        def num(d: Mapping[str, Any], key: str, default: float, where: str) -> float:
            value = d.get(key, default)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value <= 0):
                raise CalibrationError(f"{source}: {where}{key} must be a positive number, "
                                      f"got {value!r}")
            return float(value)

        def table(key: str, like: str) -> Mapping[str, Any]:
            """``data[key]``, an object of links (absent or null: empty)."""
            raw = data.get(key, {}) or {}
            if not isinstance(raw, Mapping):
                raise CalibrationError(f"{source}: {key} must be an object like "
                                       f"{{\"{like}\": {{\"alpha\": ...}}}}")
            return raw

        axes = []
        for axis, link in table("axes", "x").items():
            if axis not in AXES or not isinstance(link, Mapping):
                raise CalibrationError(f"{source}: axes.{axis} must be one of x/y/z with "
                                       "alpha/beta")
            axes.append((axis, num(link, "alpha", base.alpha, f"axes.{axis}."),
                         num(link, "beta", base.beta, f"axes.{axis}.")))
        worlds = []
        for size, link in table("worlds", "4").items():
            # ASCII digits without a leading zero: "04" beside "4" would be the same world
            if (not re.fullmatch(r"[1-9][0-9]{0,5}", str(size)) or int(size) < 2
                    or not isinstance(link, Mapping) or not {"alpha", "beta"} <= set(link)):
                raise CalibrationError(f"{source}: worlds.{size} must be a world size >= 2 "
                                       "(digits) with both alpha and beta")
            worlds.append((int(size), num(link, "alpha", base.alpha, f"worlds.{size}."),
                           num(link, "beta", base.beta, f"worlds.{size}.")))
        counts = {}
        for key in ("cores", "threads"):
            value = data.get(key, getattr(base, key))
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CalibrationError(f"{source}: {key} must be a whole number >= 0, "
                                       f"got {value!r}")
            counts[key] = max(value, 1) if key == "threads" else value
        extra = _device_fields(data, source, num)
        extra.update(_cpu_fields(data, source, num))
        extra.update(_measured_fields(data, source))
        return cls(spmm_flops=num(data, "spmm_flops", base.spmm_flops, ""),
                   gemm_flops=num(data, "gemm_flops", base.gemm_flops, ""),
                   alpha=num(data, "alpha", base.alpha, ""),
                   beta=num(data, "beta", base.beta, ""),
                   axes=tuple(sorted(axes)), source=source, worlds=tuple(sorted(worlds)),
                   elementwise_rate=num(data, "elementwise_rate", base.elementwise_rate, ""),
                   **counts, **extra)


def _measured_fields(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A measured SpMM byte model (``spmm_cost``, `SpmmCost.from_dict`) and a profile's
    ``citations`` ({constant: where it was measured}), checked."""
    cites = data.get("citations", {}) or {}
    if not isinstance(cites, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in cites.items()):
        raise CalibrationError(f"{source}: citations must map each constant to its source "
                               "(non-empty text)")
    raw = data.get("spmm_cost")
    return {"spmm_cost": None if raw is None else SpmmCost.from_dict(raw, source),
            "citations": tuple(sorted(cites.items()))}


def _cpu_fields(data: Mapping[str, Any], source: str,
                num: Callable[[Mapping[str, Any], str, float, str], float]) -> dict[str, Any]:
    """The fixed costs of a CPU calibration, checked: ``groups`` (per local world, per group
    size: latency and β of a call) and the step's and each stage's overhead (seconds >= 0). A
    file without them (written before they were measured) prices collectives with the α-β ring
    of ``worlds`` and no fixed costs, as it did then."""
    raw = data.get("groups", {}) or {}
    shape = "an object like {\"4\": {\"2\": {\"latency\": ..., \"beta\": ...}}}"
    if not isinstance(raw, Mapping):
        raise CalibrationError(f"{source}: groups must be {shape}")
    groups = []
    for world, by_size in raw.items():
        if (not re.fullmatch(r"[1-9][0-9]{0,5}", str(world)) or int(world) < 2
                or not isinstance(by_size, Mapping)):
            raise CalibrationError(f"{source}: groups.{world} must be a world size >= 2 with "
                                   f"{shape}")
        for size, link in by_size.items():
            if (not re.fullmatch(r"[1-9][0-9]{0,5}", str(size))
                    or not 2 <= int(size) <= int(world) or int(world) % int(size)
                    or not isinstance(link, Mapping) or set(link) != {"latency", "beta"}):
                raise CalibrationError(f"{source}: groups.{world}.{size} must be a group size "
                                       f"dividing {world} with latency and beta")
            where = f"groups.{world}.{size}."
            groups.append((int(world), int(size), num(link, "latency", 0.0, where),
                           num(link, "beta", 0.0, where)))
    out: dict[str, Any] = {"groups": tuple(sorted(groups))}
    for key in ("stage_overhead", "step_overhead"):
        value = data.get(key, 0.0)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0):
            raise CalibrationError(f"{source}: {key} must be seconds >= 0, got {value!r}")
        out[key] = float(value)
    return out


def _device_fields(data: Mapping[str, Any], source: str,
                   num: Callable[[Mapping[str, Any], str, float, str], float]) -> dict[str, Any]:
    """The device, link-class and precision fields of a calibration document, checked: a link
    class needs both α and β; a GPU calibration of a node with several GPUs needs its "intra"
    class, one measured across nodes its "inter" class (a missing class is refused, never
    priced with a default)."""
    device = data.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise CalibrationError(f"{source}: device must be cpu or cuda, got {device!r}")
    texts = {}
    for key in ("gpu", "profile", "reference"):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise CalibrationError(f"{source}: {key} must be a string, got {value!r}")
        texts[key] = value
    counts = {}
    for key in ("gpus_per_node", "nodes"):
        value = data.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CalibrationError(f"{source}: {key} must be a whole number >= 0, got {value!r}")
        counts[key] = value
    memory = data.get("device_memory", 0)
    if (isinstance(memory, bool) or not isinstance(memory, (int, float))
            or not math.isfinite(memory) or memory < 0):
        raise CalibrationError(f"{source}: device_memory must be bytes >= 0, got {memory!r}")
    raw_links = data.get("links", {}) or {}
    if not isinstance(raw_links, Mapping):
        raise CalibrationError(f"{source}: links must be an object like "
                                    "{\"intra\": {\"alpha\": ..., \"beta\": ...}}")
    links = []
    for name, link in raw_links.items():
        if (name not in LINK_CLASSES or not isinstance(link, Mapping)
                or not {"alpha", "beta"} <= set(link)):
            raise CalibrationError(f"{source}: links.{name} must be one of "
                                        f"{'/'.join(LINK_CLASSES)} with both alpha and beta")
        links.append((name, num(link, "alpha", 0.0, f"links.{name}."),
                      num(link, "beta", 0.0, f"links.{name}.")))
    needed = ((["intra"] if device == "cuda" and counts["gpus_per_node"] > 1 else [])
        + (["inter"] if counts["nodes"] > 1 else []))
    for name in needed:
        if name not in raw_links:
            where = (f"{counts['gpus_per_node']} GPUs per node" if name == "intra" else
                     f"{counts['nodes']} nodes")
            raise CalibrationError(f"{source}: link class {name!r} is missing for {where}; "
                                        "rerun plexus-bench calibrate --device cuda on them")
    raw_prec = data.get("precisions", {}) or {}
    if not isinstance(raw_prec, Mapping) or not set(raw_prec) <= {"bf16"}:
        raise CalibrationError(f"{source}: precisions must be an object with bf16's "
                                    "spmm_flops, gemm_flops, elementwise_rate")
    precisions = []
    for name, rates in raw_prec.items():
        if not isinstance(rates, Mapping) or not set(PRECISION_RATES) <= set(rates):
            raise CalibrationError(f"{source}: precisions.{name} needs "
                                        f"{', '.join(PRECISION_RATES)}")
        precisions.append((name, *(num(rates, k, 0.0, f"precisions.{name}.")
                                   for k in PRECISION_RATES)))
    return {"device": device, **texts, "links": tuple(sorted(links)),
            "precisions": tuple(precisions), "device_memory": float(memory),
            "gpus_per_node": counts["gpus_per_node"]}


def load_calibration(path: str | os.PathLike | None) -> Calibration:
    """The calibration in the JSON file at ``path`` (written by ``plexus-bench calibrate``);
    the defaults when ``path`` is None. Raises ValueError on an unreadable, invalid or untrusted
    file (a FIFO, a device, another user's file: refused before it is read; an unknown key or a
    missing rate: refused rather than quietly replaced by the defaults)."""
    if path is None:
        return Calibration()
    try:
        with open_trusted(path, "r") as f:  # the gate: no file another user could have chosen
            if os.fstat(f.fileno()).st_size > MAX_CALIBRATION_BYTES:  # a regular file's
                raise CalibrationError(f"calibration {path}: too large for a calibration file")
            data = json.load(f, parse_constant=_no_constant)
    except UnsafeTargetError as e:  # the gate's line
        raise CalibrationError(f"calibration {e}") from None
    except OSError as e:
        raise CalibrationError(f"cannot read calibration {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CalibrationError(f"calibration {path} is not UTF-8 text: {e.reason}") from None
    except RecursionError:
        raise CalibrationError(f"calibration {path} is not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"calibration {path} is not valid JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise CalibrationError(f"calibration {path}: must be a JSON object")
    unknown = sorted(set(data) - FILE_KEYS)
    if unknown:
        raise CalibrationError(f"calibration {path}: unknown key {unknown[0]!r}; a "
                               f"calibration file has {', '.join(sorted(RATE_KEYS))} "
                               "(plexus-bench calibrate writes it)")
    source = (str(path) if "alpha" in data else
        f"{path} (collectives not measured: default alpha/beta)")
    calibration = Calibration.from_dict(data, source=source)  # the values present, checked
    missing = [k for k in ("spmm_flops", "gemm_flops") if k not in data]
    if missing:
        raise CalibrationError(f"calibration {path}: {missing[0]} is missing (plexus-bench "
                               "calibrate writes it)")
    if ("alpha" in data) != ("beta" in data):
        raise CalibrationError(f"calibration {path}: has {'alpha' if 'alpha' in data else 'beta'} "
                               "without its partner; collectives are calibrated as an "
                               "alpha/beta pair")
    return calibration


def find_calibration(environ: Mapping[str, str]) -> str | None:
    """The calibration file `CALIBRATION_ENV` names in ``environ`` (e.g. ``os.environ``), if
    set: how a cluster's calibration reaches every tool without a flag on each command."""
    return environ.get(CALIBRATION_ENV) or None


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


#: The rates a calibration file holds, and what else plexus-bench calibrate writes in it.
RATE_KEYS = frozenset({"spmm_flops", "gemm_flops", "elementwise_rate", "alpha", "beta", "axes",
                       "worlds", "groups", "stage_overhead", "step_overhead", "spmm_cost"})
FILE_KEYS = RATE_KEYS | {"version", "created", "host", "machine", "torch", "threads", "cores",
                         "measurements", "backend", "note", "source", "device", "gpu", "links",
                         "precisions", "device_memory", "gpus_per_node", "nodes", "profile",
                         "reference", "citations"}
MAX_CALIBRATION_BYTES = 64 << 20


def write_calibration(doc: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically (temp file in the same folder + os.replace)."""
    with atomic_file(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return Path(path)
