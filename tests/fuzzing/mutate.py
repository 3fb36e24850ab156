"""The fuzz's generic damage: bits flipped, bytes truncated or overwritten, a zip member mutated
behind valid CRCs, one field of a JSON value replaced by an odd value."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path
from typing import Callable

def flip_bits(data: bytes, rng: random.Random, count: int | None = None) -> bytes:
    """``data`` with 1-4 (or ``count``) random bits flipped."""
    out = bytearray(data)
    for _ in range(count or rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(max(1, len(data)))]


def overwrite(data: bytes, rng: random.Random) -> bytes:
    """A few bytes at a random place set to boundary values (0x00, 0xff, 0x7f, 0x80)."""
    out = bytearray(data)
    at = rng.randrange(max(1, len(out)))
    for i in range(rng.randint(1, 8)):
        if at + i < len(out):
            out[at + i] = rng.choice((0x00, 0xFF, 0x7F, 0x80))
    return bytes(out)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((flip_bits, flip_bits, truncate, overwrite))(data, rng)


def rezip(path: Path, rng: random.Random, member_filter: Callable[[str], bool] = lambda n: True
          ) -> None:
    """Mutate the bytes of one zip member and rewrite the archive with valid CRCs, so that the
    damage reaches the reader instead of zipfile's checksum."""
    with zipfile.ZipFile(path) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    target = rng.choice([i for i, (info, _) in enumerate(members) if member_filter(info.filename)]
                        or [0])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i, (info, data) in enumerate(members):
            zf.writestr(info.filename, mutate_bytes(data, rng) if i == target else data)


ODD_VALUES = (None, True, -1, 0, 2**63, 1e308, "12", "", [], {}, [[1]], {"x": 1}, 3.5)
BIG = (2**31, 2**33, 10**8, 10**10, 10**12, 2**62)


def json_edit(obj, rng: random.Random, depth: int = 0):
    """``obj`` with one field somewhere replaced by an odd value (or deleted)."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj))
        if depth > 0 and rng.random() < 0.4 or not isinstance(obj[key], (dict, list)):
            if rng.random() < 0.2:
                del obj[key]
            else:
                obj[key] = rng.choice(ODD_VALUES + BIG)
        else:
            obj[key] = json_edit(obj[key], rng, depth + 1)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        obj[i] = json_edit(obj[i], rng, depth + 1) if isinstance(obj[i], (dict, list)) and \
            rng.random() < 0.6 else rng.choice(ODD_VALUES + BIG)
    return obj
