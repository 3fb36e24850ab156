"""Peers that prove who they are: before any tensor moves, every rank proves the job's secret and
the digest of its run to rank 0 through the job's store, and rank 0 proves both back.

A port is not proof: a rank started with ``MASTER_PORT`` pointing at another user's rank 0 (or a
rank of the same user started with other options) would otherwise join that job, train its
options and send it its shard. So

* the job has a secret: the local launcher makes one per job and hands it to its workers
  (`SECRET_ENV`); under torchrun/srun it is the user's, from `SECRET_ENV` or the user-private
  file `SECRET_FILE_ENV` names (0600, this user's, reached through no link another user could
  have made: `plexus_datasets.base.gate`). Without one, the ranks still compare their runs;
* rank 0 publishes a fresh nonce; every rank answers with the options of its run (a flat
  name -> value map) and an HMAC of the nonce, its rank and the options' digest under the
  secret; rank 0 checks each answer, then publishes its verdict with its own HMAC of it, which
  every rank checks before it trusts the verdict;
* a mismatch is one line (`PeerRefused`) naming the rank and the cause: another secret, or the
  first option that differs (its value at rank 0 and at that rank).

No torch here: the store is anything with ``set``, ``get`` (blocking until the key is there or
the store's timeout passes) of bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from typing import Any, Mapping

from plexus_datasets.base.gate import UnsafeTargetError, write_target

from .env import LaunchError

#: The job's secret (the local launcher sets it for its workers; under torchrun/srun the user)
SECRET_ENV = "PLEXUS_JOB_SECRET"
#: ... or a user-private file holding it
SECRET_FILE_ENV = "PLEXUS_JOB_SECRET_FILE"
_PREFIX = "plexus/peers/"
_MAX_SECRET = 4096


class PeerRefused(LaunchError):
    """A rank that did not prove the job's secret, or was started with another run (one line)."""


def new_secret() -> str:
    """A fresh secret for one job (the local launcher's)."""
    return secrets.token_hex(32)


def job_secret(environ: Mapping[str, str] = os.environ) -> bytes:
    """This job's secret: `SECRET_ENV`, else the content of the file `SECRET_FILE_ENV` names,
    else empty (the ranks then only compare their runs). Raises `LaunchError` for a file that
    is not a private regular file of this user's."""
    if environ.get(SECRET_ENV):
        return environ[SECRET_ENV].encode()
    path = environ.get(SECRET_FILE_ENV)
    if not path:
        return b""
    try:
        write_target(path)  # no link another user could have made, not their file or folder
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (UnsafeTargetError, OSError) as e:
        raise LaunchError(f"${SECRET_FILE_ENV} {path}: cannot use it as the job's secret "
                          f"({getattr(e, 'strerror', None) or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise LaunchError(f"${SECRET_FILE_ENV} {path}: the job's secret must be a 0600 file "
                              f"of uid {os.geteuid()} (chmod 600 {path})")
        secret = os.read(fd, _MAX_SECRET).strip()
    finally:
        os.close(fd)
    if not secret:
        raise LaunchError(f"${SECRET_FILE_ENV} {path}: empty; write a secret into it (e.g. "
                          "openssl rand -hex 32)")
    return secret


def digest(options: Mapping[str, str]) -> str:
    """The sha256 of a run's options (canonical JSON)."""
    return hashlib.sha256(json.dumps(dict(options), sort_keys=True).encode()).hexdigest()


def _proof(secret: bytes, *parts: Any) -> str:
    return hmac.new(secret, "|".join(map(str, parts)).encode(), hashlib.sha256).hexdigest()


def first_difference(ours: Mapping[str, str], theirs: Mapping[str, str]) -> str | None:
    """The first option (by name) whose values differ, as ``name A (rank 0) vs B``."""
    for name in sorted(set(ours) | set(theirs)):
        if ours.get(name) != theirs.get(name):
            return f"{name} {ours.get(name, '(unset)')} at rank 0, {theirs.get(name, '(unset)')}"
    return None


def prove_peers(store: Any, rank: int, world: int, options: Mapping[str, str],
                secret: bytes, where: str = "the job", stage: str = "") -> None:
    """Prove the job's secret and this rank's run to rank 0 through ``store`` (and, on rank 0,
    check every rank's): raises `PeerRefused` (one line) on every rank when one does not prove
    the secret or runs other options, before anything else is exchanged. ``stage`` names the
    round where a job proves more than once (joining the grid, then its run): each round's
    keys are its own."""
    options = {str(k): str(v) for k, v in options.items()}
    mine = digest(options)
    prefix = f"{_PREFIX}{stage}/" if stage else _PREFIX
    if rank == 0:
        nonce = secrets.token_hex(16)
        store.set(prefix + "nonce", nonce)
    else:
        nonce = store.get(prefix + "nonce").decode(errors="replace")
    store.set(f"{prefix}hello/{rank}", json.dumps(
        {"options": options, "proof": _proof(secret, nonce, stage, rank, mine)}))
    if rank == 0:
        verdict = "ok"
        for peer in range(1, world):
            why = _check_hello(store.get(f"{prefix}hello/{peer}"), peer, nonce, secret,
                               options, stage)
            if why is not None:
                verdict = why
                break
        store.set(prefix + "verdict", json.dumps(
            {"verdict": verdict,
             "proof": _proof(secret, nonce, stage, "verdict", verdict, mine)}))
        if verdict != "ok":
            raise PeerRefused(f"{where}: {verdict}")
        return
    doc = _json(store.get(prefix + "verdict"))
    verdict = doc.get("verdict") if isinstance(doc, dict) else None
    if not isinstance(verdict, str) or not hmac.compare_digest(
            str(doc.get("proof")), _proof(secret, nonce, stage, "verdict", verdict, mine)):
        if verdict == "ok" or not isinstance(verdict, str):
            raise PeerRefused(f"{where}: rank 0 does not prove this job's secret or runs other "
                              f"options (another user's job, or a job started apart); start "
                              f"every rank with the same options and ${SECRET_ENV}")
    if verdict != "ok":
        raise PeerRefused(f"{where}: rank 0 refused the job: {verdict}")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _check_hello(raw: bytes, peer: int, nonce: str, secret: bytes,
                 options: Mapping[str, str], stage: str = "") -> str | None:
    """Why rank ``peer``'s answer is refused (None: it proves the secret and runs ``options``)."""
    doc = _json(raw)
    theirs = doc.get("options") if isinstance(doc, dict) else None
    if not isinstance(theirs, dict) or not isinstance(doc.get("proof"), str):
        return f"rank {peer} did not answer as a Plexus rank (not one of this job)"
    theirs = {str(k): str(v) for k, v in theirs.items()}
    if not hmac.compare_digest(doc["proof"], _proof(secret, nonce, stage, peer, digest(theirs))):
        return (f"rank {peer} does not hold this job's secret (another user's rank, or one "
                f"started with another ${SECRET_ENV}); start every rank with the same secret")
    diff = first_difference(options, theirs)
    if diff is not None:
        return (f"rank {peer} was started with other options: {diff} at rank {peer}; start "
                "every rank with the same options")
    return None
