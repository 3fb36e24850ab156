"""Per-epoch logs besides the JSON lines (rank 0): a CSV of epochs and TensorBoard scalars.

- ``--log-csv FILE``: a header, then one row per epoch, each written whole or not at all (a full
  disk never leaves half a row), so FILE is readable (complete lines) while the run goes:
  ``tail -f FILE`` follows it. A failed run keeps the rows of the epochs it finished; a resumed
  run keeps the rows up to the epoch it resumed from and appends its own.
- ``--tensorboard DIR``: event files for TensorBoard (``tensorboard --logdir DIR``): training
  loss, train/val/test accuracy, the step's and the evaluation's wall time, and rank 0's time
  per timer (SpMM, GEMM, each collective) in that epoch. Needs the ``tensorboard`` package;
  without it the run goes on and says so in one line. A resumed run purges the steps after the
  epoch it resumed from (TensorBoard's ``purge_step``), so a requeued job's curves are whole.
"""

from __future__ import annotations

import csv
import io
import os
import stat
import threading
from pathlib import Path
from typing import Callable, Mapping, Protocol

from plexus_datasets.base.atomic import UnsafeTargetError, atomic_file, describe_mode, output_target
from plexus_datasets.base.gate import open_file, open_trusted, summary_writer
from plexus.api.training import EpochStats

from .errors import OutputFailed, UsageError, output_failure
from .writable import check_writable
from plexus_datasets.base import owned

CSV_COLUMNS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_time_s",
               "eval_time_s")
TENSORBOARD_MISSING = ("--tensorboard: the tensorboard package is not installed "
                       "(pip install tensorboard); training goes on without TensorBoard scalars")


class EpochSink(Protocol):
    """Something that records every finished epoch."""

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None: ...
    def close(self) -> None: ...


class LineFile:
    """A file of lines written through one descriptor, each `append` whole or not at all: a
    write that fails part-way (a full disk, a quota) is cut back to the last whole line, so a
    reader never sees half a row. Opened without following a link; only a regular file."""

    def __init__(self, path: Path, what: str, append: bool = False) -> None:
        self.path, self.what = path, what
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        fd = open_file(path, flags | (os.O_APPEND if append else os.O_TRUNC), 0o644)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise UnsafeTargetError(f"{path}: is {describe_mode(mode)}, not a regular file")
        self._fd: int | None = fd
        self._size = os.lseek(fd, 0, os.SEEK_END)

    def append(self, text: str) -> None:
        """Write ``text`` (whole lines) at the end; raises `OutputFailed` naming the file."""
        if self._fd is None:
            return
        data = memoryview(text.encode("utf-8"))
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as e:
            try:
                os.ftruncate(self._fd, self._size)  # back to the last whole line
            except OSError:
                pass
            e.filename = str(self.path)
            raise output_failure(e, self.what) from None
        self._size += len(text.encode("utf-8"))

    def close(self, sync: bool = True) -> None:
        """Make the lines durable (``sync``) and close; raises `OutputFailed` when that fails."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if sync:
                os.fsync(fd)
        except OSError as e:
            e.filename = str(self.path)
            raise output_failure(e, self.what) from None
        finally:
            os.close(fd)


def _csv_line(values) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def kept_csv_rows(path: Path, until: int) -> list[str]:
    """The whole rows of a CSV log at ``path`` for epochs 1..``until`` (a resumed run keeps them;
    none when the file is not such a log; `UnsafeTargetError` when another user could have
    chosen it or may rewrite it)."""
    try:
        with open_trusted(path, "r") as f:  # the gate: kept rows are this user's own
            text = f.read()
    except UnsafeTargetError:
        raise
    except (OSError, UnicodeDecodeError):
        return []
    lines = text.split("\n")[:-1]  # a last line without its newline was cut: dropped
    if not lines or next(csv.reader([lines[0]]), []) != list(CSV_COLUMNS):
        return []
    kept, last = [], 0
    for line in lines[1:]:
        row = next(csv.reader([line]), [])
        if len(row) == len(CSV_COLUMNS) and row[0].isdigit() and last < int(row[0]) <= until:
            last = int(row[0])
            kept.append(line + "\n")
    return kept


class CsvLog:
    """One row per epoch in ``path``; empty cells where an epoch was not evaluated. Resumed at
    epoch ``resume`` it keeps the earlier rows of epochs 1..``resume``."""

    def __init__(self, path: str | os.PathLike, resume: int | None = None) -> None:
        # a symlink to a regular file is followed, as for every output (`output_target`)
        self.path = output_target(Path(path))
        rows = kept_csv_rows(self.path, resume) if resume else []
        header = _csv_line(CSV_COLUMNS)
        if rows:  # rewrite the kept rows atomically, then append to them
            with atomic_file(self.path, "w") as f:
                f.write(header + "".join(rows))
            self._f: LineFile | None = LineFile(self.path, "the CSV log", append=True)
        else:
            self._f = LineFile(self.path, "the CSV log")
            self._f.append(header)

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None:
        """Append the epoch's row (``timers`` are for TensorBoard; the CSV keeps fixed columns)."""
        if self._f is None:
            return
        row = stats.as_dict()
        self._f.append(_csv_line(["" if row.get(c) is None else row[c] for c in CSV_COLUMNS]))

    def close(self) -> None:
        """Flush to disk and close (also when the run failed: the rows so far stay)."""
        if self._f is not None:
            f, self._f = self._f, None
            f.close()

    def discard(self) -> None:
        """Close and remove the file (the run never started)."""
        if self._f is not None:
            f, self._f = self._f, None
            f.close(sync=False)
        owned.remove_file(self.path)


def _quiet_event_writer(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook``: TensorBoard's writer thread dies on a full disk and the writer
    raises that error again at its next call, where `TensorBoardLog` reports it in one line;
    the thread's own traceback is left out. Anything else is printed as before."""
    if (type(args.thread).__name__ == "_AsyncWriterThread" and args.exc_type is not None
            and issubclass(args.exc_type, OSError)):
        return
    _previous_excepthook(args)


_previous_excepthook = threading.excepthook


class TensorBoardLog:
    """Scalars per epoch through `torch.utils.tensorboard.SummaryWriter`."""

    def __init__(self, logdir: str | os.PathLike, resume: int | None = None) -> None:
        threading.excepthook = _quiet_event_writer
        self.logdir = Path(logdir)
        made = not os.path.lexists(self.logdir)
        before = set() if made else _event_files(self.logdir)
        try:  # a resumed run's steps replace those an interrupted run wrote after the checkpoint
            self._writer = summary_writer(self.logdir, purge_step=resume + 1 if resume else None)
        except BaseException:
            # a full disk: the writer had made its events file, empty or cut in its first event
            for name in _event_files(self.logdir) - before:
                owned.remove_file(self.logdir / name, quiet=True)
            if made and self.logdir.is_dir() and not any(self.logdir.iterdir()):
                owned.remove_tree(self.logdir, quiet=True)  # nor the folder it made
            raise
        self._last: dict[str, float] = {}

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None:
        """Write the epoch's scalars; the timers are cumulative, so log their increase."""
        if self._writer is None:
            return
        w, step = self._writer, stats.epoch
        try:
            w.add_scalar("loss/train", stats.loss, step)
            for split in ("train", "val", "test"):
                value = getattr(stats, f"{split}_acc")
                if value is not None:
                    w.add_scalar(f"accuracy/{split}", value, step)
            w.add_scalar("time/train_step_s", stats.epoch_time_s, step)
            w.add_scalar("time/eval_s", stats.eval_time_s, step)
            for name, total in timers.items():
                w.add_scalar(f"timers/{name}", total - self._last.get(name, 0.0), step)
            self._last = dict(timers)
            w.flush()  # followable while the run goes (the writer would wait up to 2 minutes)
        except Exception as e:  # noqa: BLE001 - the writer's thread re-raises what it met
            self._writer = None
            raise OutputFailed(f"cannot write TensorBoard scalars in {self.logdir}: "
                               f"{getattr(e, 'strerror', None) or e}") from None

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except Exception as e:  # noqa: BLE001 - as in `epoch`
                raise OutputFailed(f"cannot write TensorBoard scalars in {self.logdir}: "
                                   f"{getattr(e, 'strerror', None) or e}") from None


def _event_files(logdir: Path) -> set[str]:
    """The names of TensorBoard's events files in ``logdir`` (none where it is no folder)."""
    try:
        return {e.name for e in os.scandir(logdir)
                if e.name.startswith("events.out.tfevents.") and e.is_file(follow_symlinks=False)}
    except OSError:
        return set()


def tensorboard_available() -> bool:
    """Whether the ``tensorboard`` package imports (cheap: not torch's writer)."""
    try:
        import tensorboard  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def open_tensorboard(logdir: str | os.PathLike, resume: int | None = None
                     ) -> TensorBoardLog | None:
    """A `TensorBoardLog`, or None when the ``tensorboard`` package cannot be imported."""
    try:
        return TensorBoardLog(logdir, resume)
    except ImportError:
        return None


def check_targets(log_csv: str | None, tensorboard: str | None) -> None:
    """Raise `UsageError` unless the CSV file and the TensorBoard directory can be written."""
    if log_csv:
        target = Path(log_csv).expanduser()
        if target.is_dir():
            raise UsageError(f"--log-csv {log_csv}: is a directory; give a file name")
        if target.exists() and not target.is_file():  # a FIFO or device: open() could block
            raise UsageError(f"--log-csv {log_csv}: not a regular file; give a file name")
        try:
            target = output_target(target)  # the gate: no link, file or folder of another user
        except UnsafeTargetError as e:
            raise UsageError(f"--log-csv {e}") from None
        check_writable(target.parent, "--log-csv")
    if tensorboard and tensorboard_available():  # else nothing is written there
        target = Path(tensorboard).expanduser()
        if target.exists() and not target.is_dir():
            raise UsageError(f"--tensorboard {tensorboard}: exists and is not a directory")
        made = not os.path.lexists(target)
        check_writable(target, "--tensorboard", own=True)
        if made:  # the writer makes it again when it starts: a run that fails before leaves none
            owned.remove_tree(target, quiet=True)


def open_sinks(log_csv: str | None, tensorboard: str | None,
               note: Callable[[str], None], resume: int | None = None) -> list[EpochSink]:
    """Rank 0's epoch sinks for ``--log-csv`` and ``--tensorboard`` (checked first); ``note``
    gets the one line saying TensorBoard is missing. ``resume``: the epoch a resumed run starts
    after (earlier rows and steps are kept, later ones dropped)."""
    check_targets(log_csv, tensorboard)
    sinks: list[EpochSink] = []
    board = None
    if tensorboard and tensorboard_available():
        try:
            board = open_tensorboard(Path(tensorboard).expanduser(), resume)
        except (OSError, OutputFailed) as e:
            raise UsageError(f"--tensorboard {tensorboard}: cannot write there "
                             f"({getattr(e, 'strerror', None) or e})") from None
    if tensorboard and board is None:
        note(TENSORBOARD_MISSING)
    if log_csv:
        try:
            sinks.append(CsvLog(Path(log_csv).expanduser(), resume))
        except (OSError, OutputFailed, UnsafeTargetError) as e:
            for sink in [*sinks, board]:
                if sink is not None:
                    sink.close()
            raise UsageError(f"--log-csv {log_csv}: cannot write it "
                             f"({getattr(e, 'strerror', None) or e})") from None
    return sinks + ([board] if board is not None else [])
