"""The one gate of every path the tools write: where a write to a path lands, refused before
anything is written when another user of the machine could have chosen it.

Another user is an adversary and a name is not proof (`plexus_datasets.base.owned`'s rule, for
writes). Walking the path one component at a time from ``/`` (an ``lstat`` each: a few system
calls, nothing opened), `write_target` refuses

* a symlink at any component that only root or this user could have made: a link owned by
  another uid, or one in a folder others can write (a link in a shared ``/tmp`` is never
  followed, whoever made it);
* an entry in a folder others can write (others' write bit, the group's unless it is this
  user's private group, or a folder owned by another user, who may swap what is in it),
  unless that folder is sticky and root's or this user's (``/tmp``) and the entry is this
  user's own (or absent, to be made by this user: such a folder lets nobody else rename or
  remove it);
* a target, or a directory on the way, owned by another uid (root's directories on the way
  are trusted: ``/``, ``/home``);
* for a directory output (``directory=True``), a directory others can write and that is not
  sticky: anything written inside it could be swapped by them.

Every refusal is `UnsafeTargetError`: one line naming the path, the component and the fix.

The openers every module writes through (tests/docs/test_one_gate_for_writes.py finds any other
write): `make_folder`, `temp_folder`, `probe_folder`, `run_folder` (a run's own folder, never
one of the system's: ``--checkpoint /``), `open_file` (a descriptor), `open_stream` (a file
object, only ever a regular file), `save_text`, `summary_writer` (TensorBoard's), and
`open_trusted`: a file read as this user's own state (a checkpoint, a calibration or machine
file, a shard store's manifest and rank files, a sweep's manifest, the cache's records, the log
lines a resumed run keeps), refused by the same rules and also when another uid owns it or
others may rewrite it, read from the descriptor it checked.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from pathlib import Path
from typing import IO, Any

_MAX_LINKS = 40


class UnsafeTargetError(ValueError):
    """An output path another user could have chosen, or that names something that is not a
    regular file (a one-line message)."""


def _me() -> int:
    return os.geteuid()


@functools.lru_cache(maxsize=8)
def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's own group and nobody else's (a user private group, as
    ``useradd`` makes on Red Hat-like systems, whose umask 002 makes folders 775)."""
    try:
        import grp  # noqa: PLC0415
        import pwd  # noqa: PLC0415

        me = pwd.getpwuid(_me())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError, OSError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _others_can_write(st: os.stat_result) -> bool:
    """Whether somebody besides root and this user may change the entries of folder ``st``:
    others' write bit, the group's (unless it is this user's private group), or another
    owner."""
    if st.st_mode & stat.S_IWOTH or st.st_uid not in (0, _me()):
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not _private_group(st.st_gid)


def _folder_refusal(folder: str, fst: os.stat_result, entry: str,
                    est: os.stat_result | None) -> str | None:
    """Why the entry ``entry`` (lstat ``est``; None: absent, to be made) of ``folder`` is not
    safe to use (None: it is)."""
    if not _others_can_write(fst):
        return None
    mode = stat.S_IMODE(fst.st_mode)
    sticky = bool(fst.st_mode & stat.S_ISVTX) and fst.st_uid in (0, _me())  # its owner may
    if sticky and (est is None or est.st_uid in (0, _me())):  # remove any entry: not theirs
        return None
    who = (f"owned by uid {fst.st_uid}" if fst.st_uid not in (0, _me())
           else f"writable by others (mode {mode:o})")
    if sticky:
        assert est is not None
        return f"{entry} is owned by uid {est.st_uid}, in the shared folder {folder} ({who})"
    plain = "" if fst.st_mode & stat.S_ISVTX else ", not sticky"
    return f"{folder} is {who}{plain}: another user could swap {entry}"


def write_target(path: str | os.PathLike, *, directory: bool = False,
                 purpose: str = "write") -> Path:
    """The absolute path a write to ``path`` lands on, every link on the way followed once it
    is proven safe. Raises `UnsafeTargetError` (nothing written) when another user could have
    chosen it (the module's rules), or when a component on the way is not a directory;
    ``purpose`` ("write", "read") is the verb of its message."""
    given = os.fspath(Path(path).expanduser())
    todo = [c for c in os.path.abspath(given).split("/") if c]
    done: list[str] = []
    links = 0
    fst = os.lstat("/")
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            if done:
                done.pop()
            fst = os.lstat("/" + "/".join(done))
            continue
        folder = "/" + "/".join(done)
        entry = os.path.join(folder, name)
        subject = "it" if entry == os.path.abspath(given) else entry
        try:
            est: os.stat_result | None = os.lstat(entry)
        except FileNotFoundError:
            est = None
        except OSError as e:
            why = ("a component on the way is not a directory" if e.errno == errno.ENOTDIR
                else (e.strerror or str(e)))
            raise UnsafeTargetError(f"{given}: cannot {purpose} there ({why})") from None
        if est is not None and stat.S_ISLNK(est.st_mode):
            if est.st_uid not in (0, _me()) or _others_can_write(fst):
                how = (f"owned by uid {est.st_uid}" if est.st_uid not in (0, _me())
                       else f"in {folder}, which others can write")
                raise UnsafeTargetError(f"{given}: {subject} is a symlink another user could "
                                        f"have made ({how}); refusing to {purpose} through it "
                                        "(give the real path)")
            links += 1
            if links > _MAX_LINKS:
                raise UnsafeTargetError(f"{given}: too many levels of symbolic links")
            target = os.readlink(entry)
            if target.startswith("/"):
                done, fst = [], os.lstat("/")
            todo = [c for c in target.split("/") if c] + todo
            continue
        why = _folder_refusal(folder, fst, subject, est)
        if why is not None:
            raise UnsafeTargetError(f"{given}: {why}; refusing to {purpose} there (use a folder "
                                    "only you can write, e.g. under your home)")
        if est is None:  # the rest is made by this user's write
            rest = os.path.normpath(os.path.join(entry, *todo)) if todo else entry
            return Path(rest)
        last = not todo
        if est.st_uid != _me() and (last or est.st_uid != 0):
            kind = "folder" if stat.S_ISDIR(est.st_mode) or not last else "file"
            raise UnsafeTargetError(f"{given}: {subject} is owned by uid {est.st_uid}, not "
                                    f"{_me()}; refusing to {purpose} another user's {kind} (give "
                                    "a path of your own)")
        if not last and not stat.S_ISDIR(est.st_mode):
            raise UnsafeTargetError(f"{given}: cannot {purpose} there ({entry} is not a "
                                    "directory)")
        done.append(name)
        fst = est
    final = "/" + "/".join(done)
    if (directory and stat.S_ISDIR(fst.st_mode) and _others_can_write(fst)
            and not fst.st_mode & stat.S_ISVTX):
        raise UnsafeTargetError(f"{given}: a folder others can write (mode "
                                f"{stat.S_IMODE(fst.st_mode):o}); refusing to {purpose} in it "
                                f"(chmod go-w {final}, or use a folder only you can write)")
    return Path(final)


#: folders of the system: never a run's own folder (``--checkpoint /``), nor anything inside
#: the first row's (``--tensorboard /etc/tb``)
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/sbin", "/sys", "/usr")
SYSTEM_FOLDERS = ("/", "/home", "/mnt", "/media", "/opt", "/run", "/srv", "/tmp", "/var",
                  "/var/tmp") + SYSTEM_TREES


def run_folder(path: str | os.PathLike) -> Path:
    """`write_target` of the folder a run makes its own (a checkpoint folder, a TensorBoard log,
    a sweep's results), also refused (`UnsafeTargetError`) where it is a folder of the system
    (`SYSTEM_FOLDERS`: ``/``, ``/tmp``, ...) or lies inside one of `SYSTEM_TREES` (``/etc``,
    ``/usr``, ...), whoever runs it."""
    target = write_target(path, directory=True)
    why = system_folder(target)
    if why is not None:
        raise UnsafeTargetError(f"{path}: {why}")
    return target


def system_folder(real: str | os.PathLike) -> str | None:
    """Why the resolved folder ``real`` may not be a run's folder (`run_folder`): it is one of
    `SYSTEM_FOLDERS` or inside one of `SYSTEM_TREES`; None where it is neither."""
    real = os.path.normpath(str(real))
    inside = next((t for t in SYSTEM_TREES if real.startswith(t + "/")), None)
    if real not in SYSTEM_FOLDERS and inside is None:
        return None
    where = f"inside the system folder {inside}" if inside else "a folder of the system"
    return (f"is {where}; refusing to make it a run's folder (give a folder of your own, e.g. "
            "under your home)")


def make_folder(path: str | os.PathLike, mode: int = 0o777) -> Path:
    """The folder `write_target` allows for ``path`` (``directory=True``), made with its
    parents where missing (``mode`` less the umask, as ``mkdir -p``); raises
    `UnsafeTargetError` before anything is made, `OSError` when it cannot be made."""
    target = write_target(path, directory=True)
    target.mkdir(parents=True, exist_ok=True, mode=mode)
    return target


def temp_folder(parent: str | os.PathLike | None, prefix: str) -> Path:
    """A fresh private (0700) folder inside ``parent`` (made through `make_folder` where
    missing), named ``prefix`` and a random tail, as ``tempfile.mkdtemp``; ``parent`` None: the
    system's temporary folder."""
    import tempfile  # noqa: PLC0415

    where = make_folder(parent if parent is not None else tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))


def probe_folder(path: str | os.PathLike) -> Path:
    """`make_folder`, then create and remove a file in it: raises `OSError` (a read-only
    folder, no permission, a full inode table) where the run could not write its outputs."""
    import tempfile  # noqa: PLC0415

    target = make_folder(path)
    with tempfile.TemporaryFile(dir=target):
        pass
    return target


def open_file(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of ``path`` for writing once `write_target` allows it, never following a
    link at its last component (``O_NOFOLLOW``); the caller closes the descriptor."""
    write_target(path)
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


_FLAGS = {"w": os.O_WRONLY | os.O_CREAT, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL, "r+": os.O_RDWR}


def open_stream(path: str | os.PathLike, mode: str = "w", perms: int = 0o644) -> IO[Any]:
    """A file object writing ``path`` (``mode``: "w", "a", "x" or "r+", with "b" for bytes;
    text is UTF-8) once `write_target` allows it: never through a link at its last component,
    and only into a regular file ("w" truncates it once known to be one, never a FIFO or a
    device). Raises `UnsafeTargetError` (nothing written) or the `OSError` of the open."""
    key = mode.replace("b", "").replace("t", "")
    if key not in _FLAGS:
        raise ValueError(f"open_stream: mode {mode!r} is not one of w, a, x, r+ (with b)")
    try:
        fd = open_file(path, _FLAGS[key] | os.O_NONBLOCK, perms)
    except OSError as e:
        if e.errno != errno.ENXIO:  # a FIFO nobody reads, a device without its driver
            raise
        raise UnsafeTargetError(f"{path}: is not a regular file; refusing to write it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeTargetError(f"{path}: is not a regular file; refusing to write it")
        os.set_blocking(fd, True)
        if key == "w":
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.close(fd)
        raise


def save_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) into ``path`` through `open_stream` (replacing what it held)."""
    with open_stream(path, "w") as f:
        f.write(text)


def summary_writer(logdir: str | os.PathLike, **kwargs: Any) -> Any:
    """A ``torch.utils.tensorboard.SummaryWriter`` (``kwargs`` passed on) writing into the
    folder `make_folder` allows for ``logdir``."""
    from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 (an optional package)

    return SummaryWriter(str(make_folder(logdir)), **kwargs)


def _trusted_refusal(real: Path, st: os.stat_result) -> str | None:
    """Why the open file ``st`` (at ``real``) is not this user's own state (None: it is): not a
    regular file, another uid's, or a file others may rewrite (others' write bit, the group's
    unless it is this user's private group), each with its fix."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file; refusing to read it as this user's state (give the file)"
    if st.st_uid != _me():
        return (f"owned by uid {st.st_uid}, not {_me()}; refusing to read another user's file "
                "as this user's state (give a file of your own)")
    if _others_can_write(st):
        return (f"writable by others (mode {stat.S_IMODE(st.st_mode):o}); refusing to read it "
                f"as this user's state (chmod go-w {real}, once you know its content is yours)")
    return None


def open_trusted(path: str | os.PathLike, mode: str = "rb") -> IO[Any]:
    """A file the tools read as their own state (a checkpoint, a calibration or machine file),
    opened for reading (``mode`` "rb" or "r": UTF-8) and held by its descriptor while it is
    read: refused (`UnsafeTargetError`, nothing read) when another user could have chosen it,
    by `write_target`'s rules (their link on the way, their file, a folder they can write),
    when others may rewrite the file itself (its mode), or when it is not a regular file (never
    a FIFO: nothing blocks); `FileNotFoundError` when nothing is there."""
    real = write_target(path, purpose="read")  # this user's own links followed, as a write
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        why = _trusted_refusal(real, st)
        if why is not None:
            raise UnsafeTargetError(f"{path}: {why}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.close(fd)
        raise
