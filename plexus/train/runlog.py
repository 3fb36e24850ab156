"""What a training run reports (rank 0): epoch lines, a progress bar, a JSON log and a summary.

On a terminal, epochs advance a tqdm progress bar and each epoch's line is printed above it; when
stdout is not a terminal (a file, a pipe, a batch job's log) there is no bar, only the plain
lines. ``--quiet`` keeps just the summary. The summary is its first lines (results, wall time,
memory, bytes in all, the precision) unless ``--verbose``, which adds the timers per rank and the
bytes per axis and per collective (the JSON log's summary always holds them all).

The JSON log (``--log-json FILE``) has one object per line: one per epoch, then a final object with
``"summary": true``. The summary's ``"memory"`` holds every rank's measured peaks, in rank order:
``peak_rss_bytes`` (the whole process), ``train_peak_rss_bytes`` (from the end of set-up on),
``setup_peak_rss_bytes`` (up to the end of set-up), ``tracked_peak_bytes`` (tensor storages, CPU
runs), ``cuda_peak_bytes`` (a list, or null off CUDA), and ``predicted_bytes`` and
``predicted_setup_bytes``, the performance model's training and set-up peaks per rank. It is written
to ``FILE.tmp`` as the run goes and renamed to FILE only when complete, so FILE never holds a
partial log.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from plexus_datasets.base.atomic import UnsafeTargetError, output_target, replace_into
from plexus_datasets.base.gate import make_folder, open_trusted
from plexus_partition.model.model import DEFAULT_ACTIVATION
from plexus.api.training import DEFAULT_DTYPE, BestEpoch, EpochStats
from plexus.core.units import format_bytes, format_seconds

from .epochlogs import EpochSink, LineFile
from .errors import OutputFailed, output_failure
from .heartbeat import Heartbeat
from .traffic import format_account
from .walltime import format_wall_time
from plexus_datasets.base import owned


def _acc(value: float | None) -> str:
    return "  -   " if value is None else f"{value:.4f}"


def plural(n: int, word: str) -> str:
    """2, "rank" -> "2 ranks"; 1, "rank" -> "1 rank"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def format_epoch(stats: EpochStats, total: int) -> str:
    """One epoch as a line: epoch, training loss, train/val/test accuracy, epoch time."""
    width = len(str(total))
    return (f"epoch {stats.epoch:>{width}}/{total}  loss {stats.loss:.4f}  "
            f"train {_acc(stats.train_acc)}  val {_acc(stats.val_acc)}  "
            f"test {_acc(stats.test_acc)}  time {format_seconds(stats.epoch_time_s)}")


#: The best-validation record (epoch and metrics; the earliest on ties): the trainer's own
#: class, so the record a run reports and the one early stopping counts from follow one rule.
BestRecord = BestEpoch


def kept_json_records(paths: Sequence[Path], until: int) -> list[str]:
    """The epoch lines, epochs 1..``until``, of the first of ``paths`` (regular files only) that
    is a readable JSON log; a resumed run keeps them. Lines that are not whole JSON objects
    with an epoch (a line cut by a kill, a summary, someone else's file) are dropped; a file
    another user could have chosen or may rewrite is refused (`UnsafeTargetError`, one line)."""
    for path in paths:
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open_trusted(path, "r") as f:  # the gate: kept lines are this user's own
                lines = f.read().split("\n")[:-1]  # a last line without its newline was cut
        except UnsafeTargetError:
            raise
        except (OSError, UnicodeDecodeError):
            continue
        kept, last = [], 0
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            epoch = obj.get("epoch") if isinstance(obj, dict) else None
            if (isinstance(epoch, int) and not isinstance(epoch, bool)
                    and not obj.get("summary") and last < epoch <= until):
                last = epoch
                kept.append(line + "\n")
        if kept:
            return kept
    return []


class JsonLog:
    """JSON-lines log written to ``path.tmp`` and atomically renamed to ``path`` by `close`.

    A run resumed at epoch ``resume`` starts the log with the epochs 1..``resume`` of the log
    an earlier run left (its unpublished ``path.tmp`` if it was stopped, else ``path``), so
    the log of a requeued job is whole."""

    def __init__(self, path: str | os.PathLike, resume: int | None = None) -> None:
        # Only a regular file (or nothing) is replaced, at FILE and at FILE.tmp: never a device,
        # a FIFO or what a symlink there points to (`plexus_datasets.base.atomic.output_target`).
        self.path = output_target(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        if output_target(self.tmp) != self.tmp:
            raise UnsafeTargetError(f"{self.tmp}: is a symlink; refusing to write through it")
        make_folder(self.path.parent)
        kept = kept_json_records([self.tmp, self.path], resume) if resume else []
        self._f: LineFile | None = LineFile(self.tmp, "the JSON log")
        if kept:
            self._f.append("".join(kept))

    def write(self, obj: dict) -> None:
        """Append one object as a line, whole or not at all, so a running job can be followed;
        raises `OutputFailed` naming the file."""
        assert self._f is not None, "log already closed"
        self._f.append(json.dumps(_finite(obj), sort_keys=False) + "\n")

    def close(self) -> None:
        """Make the log durable and move it into place (`OutputFailed` when that fails)."""
        if self._f is None:
            return
        f, self._f = self._f, None
        f.close()
        try:
            replace_into(self.tmp, self.path)
        except (OSError, UnsafeTargetError) as e:
            raise output_failure(e, "the JSON log") from None

    def abandon(self) -> None:
        """Stop writing without publishing (the run failed); ``path.tmp`` keeps what was logged
        (a resumed run starts from it)."""
        if self._f is not None:
            f, self._f = self._f, None
            f.close(sync=False)

    def discard(self) -> None:
        """Close and remove the temporary file (the run never started, or could not write)."""
        self.abandon()
        owned.remove_file(self.tmp)


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null (a diverged loss stays readable)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


#: A console that cannot be written: a closed pipe, a full device, a closed file.
CONSOLE_ERRORS = (OSError, ValueError)


def console_line(text: str) -> None:
    """Print one line before the run's log exists (the launcher's notes): a console that is
    closed, full or gone is not an error, the run goes on without it (as `RunLog` does)."""
    try:
        print(text, flush=True)
    except CONSOLE_ERRORS:
        try:  # what stays in stdout's buffer must not fail again at exit
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False


class RunLog:
    """Rank 0's reporter: epoch lines or a progress bar, the JSON log, and the final summary."""

    def __init__(self, total_epochs: int, start_epoch: int = 0, quiet: bool = False,
                 json_log: JsonLog | None = None, stream: IO[str] | None = None,
                 progress: bool | None = None, sinks: Sequence[EpochSink] = (),
                 heartbeat_s: float = 0.0, verbose: bool = False) -> None:
        self.total = total_epochs
        self.verbose = verbose  # the summary's tables (`format_summary`)
        self.sinks = list(sinks)  # --log-csv, --tensorboard
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stdout
        self.json = json_log
        self.bar = None
        # --quiet's heartbeat (a console lost later turns quiet too, and then says nothing)
        self.heartbeat = Heartbeat(heartbeat_s, total_epochs, start_epoch) if quiet else None
        if self.stream is None:  # stdout closed (`>&-`): train without a console
            self._lose_console()
        if progress is None:
            progress = _isatty(self.stream)
        if progress and not quiet and total_epochs > start_epoch:
            from tqdm import tqdm  # noqa: PLC0415 (only on a terminal)

            self.bar = tqdm(total=total_epochs, initial=start_epoch, unit="epoch",
                            file=self.stream, dynamic_ncols=True, leave=False)

    def message(self, text: str) -> None:
        """A line outside the epoch stream (set-up notes); shown unless quiet."""
        if not self.quiet:
            self._print(text)

    def note(self, text: str) -> None:
        """A line shown even when quiet (a warning that explains the run's times)."""
        self._print(text)

    def _print(self, text: str) -> None:
        try:
            if self.bar is not None:
                self.bar.write(text, file=self.stream)
            else:
                print(text, file=self.stream, flush=True)
        except CONSOLE_ERRORS:
            # The reader went away (`plexus-train ... | head`), stdout is full (`> /dev/full`)
            # or closed: keep training (and writing the JSON log and checkpoints) without a
            # console rather than losing the run.
            self._lose_console()

    def _lose_console(self) -> None:
        self.bar = None
        self.heartbeat = None
        self.quiet = True
        lost, self.stream = self.stream, open(os.devnull, "w")  # noqa: SIM115 — run-long
        if lost is not None and lost is sys.stdout:
            # What stays in stdout's buffer is flushed at exit: let it go to /dev/null there,
            # not fail again (a traceback-like "Exception ignored" and status 120).
            try:
                os.dup2(self.stream.fileno(), lost.fileno())
            except (OSError, ValueError):
                pass

    def epoch(self, stats: EpochStats, timers: Mapping[str, float] | None = None) -> None:
        """Report one finished epoch (``timers``: rank 0's cumulative seconds per timer)."""
        if self.json is not None:
            self.json.write(stats.as_dict())
        for sink in self.sinks:
            sink.epoch(stats, timers or {})
        if self.quiet:
            line = self.heartbeat.beat(stats.epoch) if self.heartbeat is not None else None
            if line is not None:
                self._print(line)
            return
        self._print(format_epoch(stats, self.total))
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{stats.loss:.4f}", refresh=False)
            try:
                self.bar.update(1)
            except CONSOLE_ERRORS:
                self._lose_console()

    def finish(self, summary: dict) -> None:
        """Print the summary, write it as the JSON log's last object and publish the log."""
        if self.json is not None:
            self.json.write({"summary": True, **summary})
            self.json.close()
        self._close_sinks()
        try:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            print(format_summary(summary, self.verbose), file=self.stream, flush=True)
        except CONSOLE_ERRORS:
            self._lose_console()

    def abandon(self, discard: bool = False) -> None:
        """The run failed: close the bar and leave the JSON log unpublished (``discard``: an
        output could not be written, and the log's temporary file goes too)."""
        if self.bar is not None:
            try:
                self.bar.close()
            except CONSOLE_ERRORS:
                pass
            self.bar = None
        if self.json is not None:
            if discard:
                self.json.discard()
            else:
                self.json.abandon()
        try:
            self._close_sinks()
        except OutputFailed:  # the run has failed already; that failure is the one to report
            pass

    def _close_sinks(self) -> None:
        sinks, self.sinks = self.sinks, []
        failure = None
        for sink in sinks:
            try:
                sink.close()
            except OutputFailed as e:
                failure = failure or e
        if failure is not None:
            raise failure


def precisions(dtype: str, comm_dtype: str) -> str:
    """Every precision in force, for the run's first line and its summary: the computation's
    (``--dtype``) and the messages' where they differ (``--comm-dtype``)."""
    if dtype != DEFAULT_DTYPE:
        return f"precision {dtype} (--dtype)"
    if comm_dtype != DEFAULT_DTYPE:
        return f"precision {dtype}, messages {comm_dtype} (--comm-dtype)"
    return f"precision {dtype}"


def format_summary(s: dict, verbose: bool = False) -> str:
    """The end-of-run report: best-validation epoch, wall time, memory, bytes in all; with
    ``verbose`` the timers per rank and the bytes per axis and per collective as well."""
    m = s.get("model", {})
    what = (m.get("kind", "gcn") + (f" {m['layers']}x{m['hidden']}" if "layers" in m else "")
        + (" +BatchNorm" if m.get("norm") == "batch" else "")
        + (" +residual" if m.get("residual") else "")
        + (f" +{act}" if (act := m.get("config", {}).get("activation", DEFAULT_ACTIVATION))
           != DEFAULT_ACTIVATION else ""))
    precision = (f", {precisions(s.get('dtype', DEFAULT_DTYPE), s['comm_dtype'])}"
                 if "comm_dtype" in s else "")
    lines = [f"summary: {what} on {s['dataset']}, grid {s['grid']} "
             f"({plural(s['world_size'], 'rank')}), {plural(s['epochs'], 'epoch')}{precision}"]
    if s.get("metric") == "rocauc":
        lines.append("  metric: ROC-AUC, the mean over the tasks (multi-label); 'train/val/test' "
                     "below and in the epoch lines are ROC-AUCs")
    if s.get("best_epoch") is not None:
        lines.append(f"  best validation: epoch {s['best_epoch']}  val {_acc(s['best_val_acc'])}  "
                     f"test {_acc(s['best_test_acc'])}")
    if s.get("stopped_early") is not None:
        stop = s["stopped_early"]
        lines.append(f"  early stop at epoch {stop['epoch']}: no better validation metric for "
                     f"{plural(stop['patience'], 'epoch')} (--patience); the best epoch's "
                     "metrics are above")
    final = s.get("final", {})
    if final:
        loss = final.get("loss")
        loss_text = "  -   " if loss is None else f"{loss:.4f}"
        lines.append(f"  final epoch {final.get('epoch')}: loss {loss_text}  "
                     f"train {_acc(final.get('train_acc'))}  val {_acc(final.get('val_acc'))}  "
                     f"test {_acc(final.get('test_acc'))}")
    if s.get("ogb") is not None:
        ogb = s["ogb"]
        lines.append(f"  OGB evaluator ({ogb['name']}): test {ogb['metric']} {ogb['value']:.4f}")
    if s.get("ogb_best") is not None:
        ogb = s["ogb_best"]
        lines.append(f"  OGB evaluator ({ogb['name']}) at the best validation epoch "
                     f"{ogb['epoch']}: test {ogb['metric']} {ogb['value']:.4f}")
    if s.get("cache"):
        lines.append(f"  shard store: {'built' if s['cache']['built'] else 'reused'} "
                     f"{s['cache']['store']}")
    for key, what in (("predictions_file", "predictions"), ("export_file", "weights")):
        if s.get(key):
            lines.append(f"  {what} written to {s[key]}")
    if s.get("wall_time"):
        lines += format_wall_time(s["wall_time"], s.get("epochs_run", 0), s.get("evaluations", 0),
                                  s.get("startup_from", "the command's start"))
    elif s.get("epochs_run"):
        per_epoch = format_seconds(s["mean_epoch_time_s"])
        lines.append(f"  training time: {format_seconds(s['train_time_s'])} for "
                     f"{plural(s['epochs_run'], 'epoch')} ({per_epoch} per epoch, training step "
                     "only)")
    timers = s.get("timers", {}) if verbose else {}
    if timers:
        lines.append("  time per rank over the run (max / mean over "
                     f"{plural(s['world_size'], 'rank')}):")
        width = max(len(n) for n in timers)
        for name, t in timers.items():
            ratio = t["max"] / t["mean"] if t["mean"] > 0 else 1.0
            lines.append(f"    {name:<{width}}  {format_seconds(t['max']):>9} max  "
                         f"{format_seconds(t['mean']):>9} mean  {ratio:5.2f} max/mean")
    memory = s.get("memory")
    if memory:
        lines.extend(format_memory(memory))
    comm = s.get("comm_bytes")
    if comm is not None and not verbose:
        lines.append(f"  communication: {format_bytes(sum(comm.values()))} sent, all ranks")
    elif comm is not None:
        per_rank = s.get("comm_bytes_max_rank", {})
        parts = [f"{a} {format_bytes(comm[a])}" + (f" (max/rank {format_bytes(per_rank[a])})"
                                                   if a in per_rank else "")
                 for a in ("x", "y", "z")]
        lines.append("  communication, all ranks: " + ", ".join(parts)
                     + f"; total {format_bytes(sum(comm.values()))}")
    links = s.get("comm_bytes_per_link")
    if comm is not None and links and s.get("gpus_per_node"):
        lines.append(f"  per link class ({s['gpus_per_node']} ranks per node): inside a node "
                     f"{format_bytes(links.get('intra', 0.0))}, across nodes "
                     f"{format_bytes(links.get('inter', 0.0))}")
    if s.get("comm_collectives") and verbose:
        lines.extend(format_account(s["comm_collectives"]))
    if not verbose:
        lines.append("  (--verbose: the time per rank of every timer, the "
                     "bytes per axis and of each collective; all in --log-json's summary)")
    return "\n".join(lines)


def format_memory(m: dict) -> list[str]:
    """Summary lines of measured memory per rank (max and min over ranks) against the model."""

    def span(values: list | None) -> str | None:
        real = [v for v in values or [] if v is not None]
        if not real:
            return None
        hi, lo = format_bytes(max(real)), format_bytes(min(real))
        return hi + ("" if hi == lo else f" max, {lo} min")

    # on GPUs the device's peak (what the model predicts there) first, the host's after it
    gpu = span(m.get("cuda_peak_bytes"))
    parts = [f"GPU peak {gpu}"] if gpu is not None else []
    parts += [f"{name} {text}" for name, key in (("host peak RSS" if gpu else "peak RSS",
                                                  "peak_rss_bytes"),
                                                 ("set-up", "setup_peak_rss_bytes"),
                                                 ("training", "train_peak_rss_bytes"),
                                                 ("tensors", "tracked_peak_bytes"))
              if (text := span(m.get(key))) is not None]
    predicted = m.get("predicted_bytes")
    if predicted:
        setup = m.get("predicted_setup_bytes")
        parts.append(f"predicted {'GPU ' if gpu else ''}training peak {format_bytes(predicted)}"
                     + (f" (set-up {format_bytes(setup)}{' host' if gpu else ''})"
                        if setup else ""))
    return ["  memory per rank: " + "; ".join(parts)] if parts else []
