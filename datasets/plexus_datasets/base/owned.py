"""The one owner of destructive file operations: every remove, replace and rename-over of the
project goes through here, and acts only on what it can prove this user's Plexus made.

Another user of the machine is an adversary: a name is not proof. So

* a path is opened one component at a time from ``/`` with ``O_NOFOLLOW`` and every operation is
  made relative to the directory so opened (``dir_fd``), never by name again; a symlink on the
  way is refused unless only root or this user could have made it (owned by one of them, in a
  directory that nobody else can write: ``/home -> /export/home``, a user's own link in their
  home), and the entry acted on is never followed;
* what is removed is this user's (every entry inside too: ``no foreign entry``), holds no
  symlink, and, where a kind of output is named (``seal=``), carries the *seal* its writer
  left at creation: a small file naming the format, this uid and exactly the files written
  (names, sizes, and the sha256 of its describing files such as ``manifest.json``), with an
  HMAC under this user's secret key (`user_key`: a 0600 file only this user can read). A hash
  inside a manifest an attacker wrote is not a signature; the HMAC is.

Everything refused raises `NotOursError` (one line naming the path and the reason) before
anything is touched.

Kept over 450 lines: the one owner of every deletion, whole on purpose; its key's creation
unlinks, its seal checks walk the same directory descriptors its removals do and every removal
checks a seal, so a split would hand those descriptor primitives to a second module.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .gate import UnsafeTargetError, write_target

#: The directory of the per-user secret (else ``$XDG_CONFIG_HOME/plexus``, ``~/.config/plexus``)
CONFIG_ENV = "PLEXUS_CONFIG_DIR"
KEY_FILE = "secret.key"
SEAL = ".plexus-seal.json"
_MAX_SEAL_BYTES = 1 << 20
_MAX_LINKS = 40
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotOursError(ValueError):
    """A destructive operation refused: the target is not provably this user's (one line)."""


# ---- the per-user key and seals ---------------------------------------------------------------
def config_dir() -> Path:
    """Where this user's secret key lives (`CONFIG_ENV`, else the XDG config directory)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "plexus"


def user_key() -> bytes:
    """This user's secret (32 random bytes in a 0600 file of theirs, created on first use).
    Raises `NotOursError` when the file or its folder is another user's, a link, or readable
    or writable by anyone else, or reached through a link another user could have made
    (`plexus_datasets.base.gate`)."""
    try:  # the gate first: no key made through a link, or in a folder, another user chose
        folder = write_target(config_dir(), directory=True)
    except UnsafeTargetError as e:
        raise NotOursError(f"{e}; this user's Plexus key must be in a folder nobody else can "
                           f"write: set ${CONFIG_ENV} to a private folder") from None
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / KEY_FILE
    if not os.path.lexists(path):
        _make_key(folder)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise NotOursError(f"{path}: cannot read this user's Plexus key ({e.strerror or e}); "
                           f"remove it, or set ${CONFIG_ENV} to a private folder") from None
    try:
        st, dst = os.fstat(fd), os.stat(folder)
        uid = os.geteuid()
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077
                or dst.st_uid != uid or dst.st_mode & 0o022):
            raise NotOursError(f"{path}: this user's Plexus key must be a 0600 file of uid "
                               f"{uid} in a folder nobody else can write; remove it (a new "
                               f"one is made), or set ${CONFIG_ENV} to a private folder")
        key = os.read(fd, 256).strip()
    finally:
        os.close(fd)
    if len(key) < 32:
        raise NotOursError(f"{path}: not a Plexus key (too short); remove it, a new one is made")
    return key


def _make_key(folder: Path) -> None:
    """Write a new key whole beside its name, then link it in: a process racing this one (the
    ranks of a first run) reads either no key or the whole one, and all end with one key."""
    import tempfile  # noqa: PLC0415

    fd, tmp = tempfile.mkstemp(prefix=".secret.", dir=folder)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, folder / KEY_FILE)  # never replaces: the first key made stays
        except FileExistsError:
            pass
    finally:
        dfd = os.open(folder, _DIR)
        try:
            os.unlink(os.path.basename(tmp), dir_fd=dfd)
        finally:
            os.close(dfd)


def mac(doc: dict) -> str:
    """The HMAC-SHA256 of ``doc`` (canonical JSON) under this user's key."""
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(user_key(), body, hashlib.sha256).hexdigest()


def signed(doc: dict) -> dict:
    """``doc`` with its `mac` (for a signature written at creation)."""
    return {**doc, "mac": mac(doc)}


def verify(doc: object) -> bool:
    """Whether ``doc`` (a signature read back) carries the `mac` of the rest of it."""
    if not isinstance(doc, dict) or not isinstance(doc.get("mac"), str):
        return False
    rest = {k: v for k, v in doc.items() if k != "mac"}
    return hmac.compare_digest(doc["mac"], mac(rest))


def _sha256_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _listing(dir_fd: int, where: str, content: Iterable[str]) -> dict:
    """Every file under ``dir_fd`` but the seal: relative name -> size (and sha256 for the
    ``content`` files); raises `NotOursError` on a link, a foreign entry or a special file."""
    files: dict = {}
    want = set(content)
    for rel, st, parent, name in _walk(dir_fd, where):
        if rel == SEAL:
            continue
        if stat.S_ISDIR(st.st_mode):
            files[f"{rel}/"] = [None, None]  # a folder is an entry too: none may be added
            continue
        if not stat.S_ISREG(st.st_mode):
            raise NotOursError(f"{where}/{rel}: not a regular file; not a folder Plexus wrote")
        files[rel] = [st.st_size, _sha256_at(parent, name) if rel in want else None]
    return files


def write_seal(folder: str | os.PathLike, fmt: str, content: Iterable[str] = ()) -> None:
    """Seal the finished ``folder`` as a ``fmt`` output of this user: every file in it by name
    and size, the ``content`` files (e.g. its manifest) by sha256 too, under this user's key."""
    with _opened_dir(folder) as fd:
        doc = signed({"format": fmt, "uid": os.geteuid(),
                      "files": _listing(fd, str(folder), content),
                      "content": sorted(set(content))})
        out = os.open(SEAL, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o644, dir_fd=fd)
        with os.fdopen(out, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())


def seal_problem(folder: str | os.PathLike, fmt: str, *, exact: bool = True) -> str | None:
    """Why ``folder`` is not a ``fmt`` output this user's Plexus wrote (None: it is): it must
    be a directory of this user's that nobody else can write, hold no link and nothing of
    another owner, carry a seal of ``fmt`` and this uid that verifies under this user's key,
    and hold exactly the files sealed (same sizes, same describing files). Not ``exact``: the
    files may have changed or gone (damage), but nothing the seal does not name is there: what
    may be replaced or removed, never reused."""
    try:
        with _opened_dir(folder) as fd:
            return _seal_problem_at(fd, str(folder), fmt, exact)
    except NotOursError as e:
        return str(e)
    except OSError as e:
        return f"{folder}: cannot read it ({e.strerror or e})"


def is_sealed(folder: str | os.PathLike, fmt: str, *, exact: bool = True) -> bool:
    """Whether `seal_problem` finds nothing wrong."""
    return seal_problem(folder, fmt, exact=exact) is None


def _seal_problem_at(fd: int, where: str, fmt: str, exact: bool = True) -> str | None:
    uid = os.geteuid()
    st = os.fstat(fd)
    if st.st_uid != uid:
        return f"{where}: owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"{where}: writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    try:
        sfd = os.open(SEAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return f"{where}: no {SEAL} (not sealed by this user's Plexus)"
    try:
        sst = os.fstat(sfd)
        if not stat.S_ISREG(sst.st_mode) or sst.st_uid != uid or sst.st_size > _MAX_SEAL_BYTES:
            return f"{where}/{SEAL}: not this user's small regular file"
        try:
            doc = json.loads(os.read(sfd, _MAX_SEAL_BYTES + 1).decode("utf-8"))
        except (ValueError, RecursionError):
            return f"{where}/{SEAL}: unreadable"
    finally:
        os.close(sfd)
    if not isinstance(doc, dict) or doc.get("format") != fmt or doc.get("uid") != uid:
        return f"{where}: its seal is not a {fmt} seal of uid {uid}"
    if not verify(doc):
        return f"{where}: its seal does not verify under this user's key (forged or edited)"
    content = doc.get("content") if isinstance(doc.get("content"), list) else []
    sealed = doc.get("files") if isinstance(doc.get("files"), dict) else {}
    there = _listing(fd, where, content if exact else ())
    extra = sorted(set(there) - set(sealed))
    if extra:
        return f"{where}/{extra[0]}: a file Plexus did not write there (yours?)"
    if exact and there != sealed:
        return f"{where}: its files differ from the ones sealed (changed or removed)"
    return None


# ---- resolving paths without following what others could plant -------------------------------
def _trusted_link(parent_fd: int, name: str) -> str | None:
    """The target of the link ``name`` when only root or this user could have made it."""
    try:
        st = os.lstat(name, dir_fd=parent_fd)
        pst = os.fstat(parent_fd)
    except OSError:
        return None
    mine = (0, os.geteuid())
    if (not stat.S_ISLNK(st.st_mode) or st.st_uid not in mine or pst.st_uid not in mine
            or pst.st_mode & 0o022):
        return None
    return os.readlink(name, dir_fd=parent_fd)


def open_parent(path: str | os.PathLike) -> tuple[int, str]:
    """An fd of ``path``'s directory, opened without following any link others could have
    planted, and the last component's name (never followed). The caller closes the fd."""
    text = os.path.abspath(os.fspath(path))
    for _ in range(_MAX_LINKS):
        parts = [c for c in text.split("/") if c]
        if not parts:
            raise NotOursError(f"{path}: the root directory; refusing")
        fd = os.open("/", _DIR)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    nfd = os.open(part, _DIR, dir_fd=fd)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _trusted_link(fd, part)
                    if target is None:
                        raise NotOursError(f"{path}: /{'/'.join(parts[:i + 1])} is a symlink "
                                           "another user could have made, or not a "
                                           "directory; refusing to act through it") from None
                    base = "/" + "/".join(parts[:i])
                    text = os.path.normpath(os.path.join(base, target, *parts[i + 1:]))
                    break
                os.close(fd)
                fd = nfd
            else:
                return fd, parts[-1]
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise NotOursError(f"{path}: too many levels of symbolic links")


@contextmanager
def _opened_dir(path: str | os.PathLike) -> Iterator[int]:
    parent, name = open_parent(path)
    try:
        try:
            fd = os.open(name, _DIR, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise NotOursError(f"{path}: a symlink or not a directory") from None
            raise
    finally:
        os.close(parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _walk(fd: int, where: str, rel: str = "") -> Iterator[tuple[str, os.stat_result, int, str]]:
    """(relative name, lstat, parent fd, name) of everything under ``fd``, parents first;
    raises `NotOursError` on a symlink or an entry of another owner."""
    uid = os.geteuid()
    for name in sorted(os.listdir(fd)):
        st = os.lstat(name, dir_fd=fd)
        path = f"{rel}{name}"
        if stat.S_ISLNK(st.st_mode):
            raise NotOursError(f"{where}/{path}: a symlink inside; refusing")
        if st.st_uid != uid:
            raise NotOursError(f"{where}/{path}: owned by uid {st.st_uid}, not {uid}; refusing")
        yield path, st, fd, name
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                yield from _walk(sub, where, f"{path}/")
            finally:
                os.close(sub)


def _clear(fd: int, where: str) -> None:
    """Remove everything under ``fd`` (checked by `_walk` as it goes)."""
    uid = os.geteuid()
    for name in os.listdir(fd):
        st = os.lstat(name, dir_fd=fd)
        if st.st_uid != uid:
            raise NotOursError(f"{where}/{name}: owned by uid {st.st_uid} (appeared while "
                               "removing); left there")
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                _clear(sub, f"{where}/{name}")
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)


# ---- the destructive operations ----------------------------------------------------------------
def remove_tree(path: str | os.PathLike, *, seal: str | None = None, quiet: bool = False) -> bool:
    """Remove the directory ``path`` (absent: False) once proven this user's: a directory of
    theirs (not a link) holding no link and nothing of another owner, and, with ``seal``,
    sealed as that format with exactly the files there (`seal_problem`). It is renamed aside
    first, so nobody sees half of it. Raises `NotOursError` (nothing removed) otherwise;
    ``quiet``: returns False instead, for the cleanup of one's own scratch."""
    try:
        return _remove_tree(path, seal)
    except (NotOursError, OSError):
        if quiet:
            return False
        raise


def _remove_tree(path: str | os.PathLike, seal: str | None) -> bool:
    try:
        parent, name = open_parent(path)
    except FileNotFoundError:  # a folder on the way is gone: so is the tree
        return False
    try:
        try:
            st = os.lstat(name, dir_fd=parent)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            raise NotOursError(f"{path}: is not a directory (a link or a file); refusing to "
                               "remove it")
        fd = os.open(name, _DIR, dir_fd=parent)
        try:
            fst = os.fstat(fd)
            uid = os.geteuid()
            if fst.st_uid != uid:
                raise NotOursError(f"{path}: owned by uid {fst.st_uid}, not {uid}; not removing "
                                   "another user's folder")
            if seal is not None:
                why = _seal_problem_at(fd, str(path), seal, exact=False)
                if why is not None:
                    raise NotOursError(f"{why}; not removing it")
            else:
                for _ in _walk(fd, str(path)):  # refuse before touching anything
                    pass
            aside = f".{name[:40]}.removing-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
            _clear(fd, str(path))
            os.rmdir(aside, dir_fd=parent)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(parent)


@contextmanager
def scratch_dir(prefix: str, parent: str | os.PathLike | None = None) -> Iterator[Path]:
    """A private (700) temporary directory, removed through `remove_tree` when the block
    ends (``tempfile.TemporaryDirectory`` removes by name)."""
    import tempfile  # noqa: PLC0415

    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        remove_tree(path, quiet=True)


def remove_file(path: str | os.PathLike, *, quiet: bool = False) -> bool:
    """Remove the file (or link, FIFO: removed as a name, never followed) ``path`` of this user
    (absent: False). Raises `NotOursError` for a directory or another user's entry; ``quiet``:
    returns False instead of raising."""
    try:
        parent, name = open_parent(path)
    except FileNotFoundError:  # a folder on the way is gone: so is the file
        return False
    except (NotOursError, OSError):
        if quiet:
            return False
        raise
    try:
        st = os.lstat(name, dir_fd=parent)
        uid = os.geteuid()
        if stat.S_ISDIR(st.st_mode):
            raise NotOursError(f"{path}: a directory, not a file; refusing to remove it")
        if st.st_uid != uid:
            raise NotOursError(f"{path}: owned by uid {st.st_uid}, not {uid}; not removing "
                               "another user's file")
        os.unlink(name, dir_fd=parent)
        return True
    except FileNotFoundError:
        return False
    except (NotOursError, OSError):
        if quiet:
            return False
        raise
    finally:
        os.close(parent)


def replace_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename this user's finished file ``src`` onto ``dst`` (a regular file of this user's, or
    nothing; a link there is replaced as a name, never followed). Raises `NotOursError` for a
    directory or another user's file at ``dst``."""
    _rename(src, dst, replace=True)


def move(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename this user's ``src`` (a file or a directory) to ``dst``, which must not exist."""
    _rename(src, dst, replace=False)


def _rename(src: str | os.PathLike, dst: str | os.PathLike, replace: bool) -> None:
    uid = os.geteuid()
    sfd, sname = open_parent(src)
    try:
        dfd, dname = open_parent(dst)
        try:
            st = os.lstat(sname, dir_fd=sfd)
            if st.st_uid != uid or stat.S_ISLNK(st.st_mode):
                raise NotOursError(f"{src}: not this user's file or folder; refusing to move it")
            try:
                old = os.lstat(dname, dir_fd=dfd)
            except FileNotFoundError:
                old = None
            if old is not None:
                if not replace:
                    raise NotOursError(f"{dst}: exists; refusing to move {src} over it")
                if stat.S_ISDIR(old.st_mode) or stat.S_ISDIR(st.st_mode):
                    raise NotOursError(f"{dst}: a directory; refusing to replace it by a rename")
                if old.st_uid != uid:
                    raise NotOursError(f"{dst}: owned by uid {old.st_uid}, not {uid}; not "
                                       "replacing another user's file")
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
