"""Per-epoch logs besides the JSON lines (rank 0): a CSV of epochs and TensorBoard scalars.

- ``--log-csv FILE``: a header, then one row per epoch, each written and flushed whole, so FILE
  is readable (complete lines) while the run goes: ``tail -f FILE`` follows it. A failed run
  keeps the rows of the epochs it finished.
- ``--tensorboard DIR``: event files for TensorBoard (``tensorboard --logdir DIR``): training
  loss, train/val/test accuracy, the step's and the evaluation's wall time, and rank 0's time
  per timer (SpMM, GEMM, each collective) in that epoch. Needs the ``tensorboard`` package;
  without it the run goes on and says so in one line.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import IO, Callable, Mapping, Protocol

from plexus.engine.trainer import EpochStats

CSV_COLUMNS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_time_s",
               "eval_time_s")
TENSORBOARD_MISSING = ("--tensorboard: the tensorboard package is not installed "
                       "(pip install tensorboard); training goes on without TensorBoard scalars")


class EpochSink(Protocol):
    """Something that records every finished epoch."""

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None: ...
    def close(self) -> None: ...


class CsvLog:
    """One row per epoch in ``path``; empty cells where an epoch was not evaluated."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._f: IO[str] | None = open(self.path, "w", encoding="utf-8", newline="")
        self._w = csv.writer(self._f)
        self._w.writerow(CSV_COLUMNS)
        self._f.flush()

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None:
        """Append the epoch's row (``timers`` are for TensorBoard; the CSV keeps fixed columns)."""
        if self._f is None:
            return
        row = stats.as_dict()
        self._w.writerow(["" if row.get(c) is None else row[c] for c in CSV_COLUMNS])
        self._f.flush()

    def close(self) -> None:
        """Flush to disk and close (also when the run failed: the rows so far stay)."""
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None

    def discard(self) -> None:
        """Close and remove the file (the run never started)."""
        self.close()
        self.path.unlink(missing_ok=True)


class TensorBoardLog:
    """Scalars per epoch through `torch.utils.tensorboard.SummaryWriter`."""

    def __init__(self, logdir: str | os.PathLike) -> None:
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 (optional package)

        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir))
        self._last: dict[str, float] = {}

    def epoch(self, stats: EpochStats, timers: Mapping[str, float]) -> None:
        """Write the epoch's scalars; the timers are cumulative, so log their increase."""
        if self._writer is None:
            return
        w, step = self._writer, stats.epoch
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

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def tensorboard_available() -> bool:
    """Whether the ``tensorboard`` package imports (cheap: not torch's writer)."""
    try:
        import tensorboard  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def open_tensorboard(logdir: str | os.PathLike) -> TensorBoardLog | None:
    """A `TensorBoardLog`, or None when the ``tensorboard`` package cannot be imported."""
    try:
        return TensorBoardLog(logdir)
    except ImportError:
        return None


def check_targets(log_csv: str | None, tensorboard: str | None) -> None:
    """Raise `UsageError` unless the CSV file and the TensorBoard directory can be written."""
    from .checks import check_writable  # noqa: PLC0415
    from .errors import UsageError  # noqa: PLC0415

    if log_csv:
        target = Path(log_csv).expanduser()
        if target.is_dir():
            raise UsageError(f"--log-csv {log_csv}: is a directory; give a file name")
        if target.exists() and not target.is_file():  # a FIFO or device: open() could block
            raise UsageError(f"--log-csv {log_csv}: not a regular file; give a file name")
        check_writable(target.parent, "--log-csv")
    if tensorboard and tensorboard_available():  # else nothing is written there
        target = Path(tensorboard).expanduser()
        if target.exists() and not target.is_dir():
            raise UsageError(f"--tensorboard {tensorboard}: exists and is not a directory")
        check_writable(target, "--tensorboard")


def open_sinks(log_csv: str | None, tensorboard: str | None,
               note: Callable[[str], None]) -> list[EpochSink]:
    """Rank 0's epoch sinks for ``--log-csv`` and ``--tensorboard`` (checked first); ``note``
    gets the one line saying TensorBoard is missing."""
    check_targets(log_csv, tensorboard)
    sinks: list[EpochSink] = []
    board = None
    if tensorboard and tensorboard_available():
        board = open_tensorboard(Path(tensorboard).expanduser())
    if tensorboard and board is None:
        note(TENSORBOARD_MISSING)
    if log_csv:
        try:
            sinks.append(CsvLog(Path(log_csv).expanduser()))
        except OSError as e:
            from .errors import UsageError  # noqa: PLC0415

            raise UsageError(f"--log-csv {log_csv}: cannot write it ({e.strerror or e})") from None
    return sinks + ([board] if board is not None else [])
