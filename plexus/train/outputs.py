"""One registry of everything a ``plexus-train`` run writes, checked before any worker starts.

Every output path (``--checkpoint`` and the files it keeps in its directory, ``--log-json`` and
its ``.tmp``, ``--log-csv``, ``--tensorboard``, ``--save-predictions``, ``--export``) is resolved
(symlinks followed) and compared with every other one and with the dataset's own files: two
outputs on one file would leave only the last one written (exit status 0, the other lost), an
output on an input would destroy the data. A collision is one line naming both options.

A claim is a file (resolved path; an existing file is also known by its inode, so a hard link
is the same file), a directory with the names it writes inside it (exact names and glob
patterns), or an input file that must not be written.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from plexus.api.outputs import FILES as OUTPUT_FILES, MARKER as OUTPUTS_MARKER
from plexus_datasets.spec import spec_files
from plexus_partition.model.cli import UsageError

from .checkpoint import CHECKPOINT_NAME, LOCK_NAME


class OutputCollision(UsageError):
    """Two outputs (or an output and an input) on one file: a one-line message naming both."""


@dataclass(frozen=True)
class Claim:
    """One path a run writes (``kind`` "file" or "dir") or reads ("input")."""

    owner: str  # the option and the path as given, e.g. "--log-json run.json"
    path: Path  # resolved
    kind: str = "file"
    names: tuple[str, ...] = ()  # a directory's files: exact names ...
    patterns: tuple[str, ...] = ()  # ... and glob patterns

    def writes_inside(self, name: str) -> bool:
        """Whether this directory claim writes a file called ``name`` inside itself."""
        return name in self.names or any(fnmatch.fnmatchcase(name, p) for p in self.patterns)


def resolve(path: str | os.PathLike) -> Path:
    """The absolute path with every symlink followed (also for a tail that does not exist)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def file_output(flag: str, path: str, companions: Sequence[str] = ()) -> list[Claim]:
    """A file output, and the files written beside it (``companions``: suffixes such as
    ".tmp" appended to the resolved name)."""
    target = resolve(path)
    owner = f"{flag} {path}"
    return [Claim(owner, target)] + [Claim(owner, target.with_name(target.name + suffix))
                                     for suffix in companions if target.name]  # "/": no name


def dir_output(flag: str, path: str, names: Sequence[str] = (),
               patterns: Sequence[str] = ()) -> Claim:
    """A directory output and the names it writes inside it."""
    return Claim(f"{flag} {path}", resolve(path), "dir", tuple(names), tuple(patterns))


def input_files(owner: str, paths: Iterable[str | os.PathLike]) -> list[Claim]:
    """Files a run reads (a dataset's): no output may write them."""
    return [Claim(owner, resolve(p), "input") for p in paths]


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _pattern_prefix(pattern: str) -> str:
    return pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]


def _dirs_overlap(a: Claim, b: Claim) -> bool:
    """Whether two directory claims on one directory may write the same name."""
    if (set(a.names) & set(b.names) or any(b.writes_inside(n) for n in a.names)
            or any(a.writes_inside(n) for n in b.names)):
        return True
    return any(_pattern_prefix(p).startswith(_pattern_prefix(q)) or
               _pattern_prefix(q).startswith(_pattern_prefix(p))
               for p in a.patterns for q in b.patterns)


def _collision(a: Claim, b: Claim) -> str | None:
    """Why ``a`` and ``b`` cannot both be (written) there (None: they can)."""
    if b.kind == "dir" and a.kind != "dir":
        a, b = b, a
    if a.kind == "dir" and b.kind == "dir":
        return (f"both write files in {a.path}" if a.path == b.path and _dirs_overlap(a, b)
            else None)
    if a.kind == "dir":  # and b a file, written or read
        if b.path == a.path:
            return f"{b.path} is the directory of {a.owner.split()[0]}"
        if b.path.parent == a.path and a.writes_inside(b.path.name):
            return f"{a.owner.split()[0]} writes {b.path} itself"
        if b.kind != "input" and b.path in a.path.parents:
            return f"{a.path} would need the file {b.path} to be a directory"
        return None
    if a.path == b.path or (_inode(a.path) is not None and _inode(a.path) == _inode(b.path)):
        return f"both are {b.path}"
    for inner, outer in ((a, b), (b, a)):
        if outer.kind != "input" and outer.path in inner.path.parents:
            return f"{inner.path} would need the file {outer.path} to be a directory"
    return None


def check_claims(claims: Sequence[Claim]) -> None:
    """Raise `OutputCollision` for the first pair of claims of different owners that write one
    file (or write a file the run reads)."""
    for i, a in enumerate(claims):
        for b in claims[i + 1:]:
            if a.owner == b.owner or (a.kind == "input" and b.kind == "input"):
                continue
            why = _collision(a, b)
            if why is None:
                continue
            if "input" in (a.kind, b.kind):
                out, inp = (b, a) if a.kind == "input" else (a, b)
                raise OutputCollision(f"{out.owner} would overwrite the input of {inp.owner} "
                                      f"({why}); write the output somewhere else")
            raise OutputCollision(f"{a.owner} and {b.owner} write the same file ({why}); give "
                                  "each output a path of its own")


# ---- plexus-train's outputs ---------------------------------------------------------------------
#: What ``--checkpoint DIR`` writes inside DIR (`plexus.train.checkpoint`; the temporary file of
#: `plexus_datasets.base.atomic.atomic_file`).
CHECKPOINT_NAMES = (CHECKPOINT_NAME, LOCK_NAME)
CHECKPOINT_PATTERNS = (f".{CHECKPOINT_NAME}.*.tmp",)
#: What ``--save-predictions DIR`` writes inside DIR (`plexus.api.outputs`; it is filled as a
#: hidden sibling directory and renamed into place).
OUTPUTS_NAMES = (*OUTPUT_FILES.values(), OUTPUTS_MARKER)
#: What ``--tensorboard DIR`` writes inside DIR (torch's SummaryWriter).
TENSORBOARD_PATTERNS = ("events.out.tfevents.*",)


def dataset_files(spec: str | None, root: str | None, shards: str | None) -> list[Path]:
    """The existing files a dataset spec or a shard store reads (those an output could
    overwrite): for a spec, every file of `plexus_datasets.spec.spec_files` (the spec's own
    list, so every format is covered the day it is added: the file of npz:/mtx:/edgelist:, a
    graph: directory's arrays, the ind.NAME.* files of planetoid:, an OGB dataset's folder);
    for a store, the files of its directory."""
    found: list[Path] = []
    if shards:
        store = Path(shards).expanduser()
        found += [p for p in store.iterdir() if p.is_file()] if store.is_dir() else []
    if spec:
        found += spec_files(spec, root, limit=4096)  # compared pairwise: bounded
    return found


def run_claims(checkpoint: str | None, log_json: str | None, log_csv: str | None,
               tensorboard: str | None, save_predictions: str | None, export: str | None,
               inputs: Iterable[Path] = (), cache: str | None = None) -> list[Claim]:
    """Every path a plexus-train run writes, and the dataset files it reads (``cache``: an
    explicit ``--cache`` directory, whose every entry the run may write)."""
    claims: list[Claim] = []
    if save_predictions:
        claims.append(dir_output("--save-predictions", save_predictions, OUTPUTS_NAMES))
    if cache:
        claims.append(dir_output("--cache", cache, (), ("*",)))
    if checkpoint:
        claims.append(dir_output("--checkpoint", checkpoint, CHECKPOINT_NAMES,
                                 CHECKPOINT_PATTERNS))
    if tensorboard:
        claims.append(dir_output("--tensorboard", tensorboard, (), TENSORBOARD_PATTERNS))
    if log_json:
        claims += file_output("--log-json", log_json, (".tmp",))
    for flag, path in (("--log-csv", log_csv), ("--export", export)):
        if path:
            claims += file_output(flag, path)
    claims += input_files("the dataset", inputs)
    return claims
