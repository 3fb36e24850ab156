"""A regression guard: the headline workloads of an earlier revision and of this working tree,
interleaved on one machine, each figure judged against the noise the run itself measured.

    python benchmarks/compare.py main                 # the full set (tens of minutes)
    python benchmarks/compare.py main --quick         # about 5 minutes on an idle 2-core machine
    python benchmarks/compare.py HEAD --tiny          # seconds of work per run (the tests)
    python benchmarks/compare.py main --startup       # the first epoch, Cora 1x1x1 and 2x2x2

Side A is REV (any git revision): checked out with ``git worktree add --detach`` into a
temporary folder and installed there with ``pip install --no-deps --target`` (no network, no
build isolation: the running interpreter's packages), so a revision whose packages lived in
other folders (``datasets/``, ``partitioners/``) imports as it did then. Side B is the working
tree (``--tree``, default this checkout) on ``PYTHONPATH``. Both run with the same interpreter
and packages; the temporary folder and its worktree are removed at the end, nothing else.

Every workload runs as a fresh process through each side's own ``plexus.console`` entry points,
rounds of A B A B ..., each side with its default threads (OMP_NUM_THREADS unset: a share of the
node's cores per rank). Figures per run: the median epoch (``--log-json``, the first epoch left
out), the whole process's wall time, its CPU time (user + system of the process and its ranks),
the peak RSS of its largest process (``os.wait4``), and for training the bytes sent per epoch
(the engine's ledger, ``comm_bytes`` of the summary, over the epochs run) and a digest of its
per-epoch losses as logged (crc32 of their exact decimal forms: the same seeded run gives the
same digest only where every loss is the same float, bit for bit).

How a figure is judged (the rule is printed with the table): over the rounds, the median and
the spread (max - min) of each side. A timing or memory figure is a REGRESSION when B's median
exceeds A's by more than ``--tolerance`` (default 5%) *and* by more than the noise, the larger
of the two spreads, *and* B was worse than A in every interleaved round. Bytes are exact: any
difference is reported (more bytes: a regression, fewer: a change); the loss digests are
"identical" when every run of both sides has the same one, else "changed". Exit status 1 when
anything regressed, 0 when not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))  # this tree's plexus for the report writers
MIB = 2**20

#: The R-MAT graph of the per-kind 1x1x1 epochs (issue 49's GAT workload at scale 17).
RMAT = "rmat:scale={scale},edge_factor=16,features=128,classes=16,seed=0"
KINDS = ("gcn", "sage", "gin", "mlp", "gat", "graphconv")
#: GAT as issue 49 measured it: 2 layers, 4 heads of 64, dropout 0.5 on features and attention;
#: the other kinds as its GCN figures: 3 layers of 128.
GAT_ARGS = ["--layers", "2", "--hidden", "64", "--heads", "4", "--attn-dropout", "0.5"]
KIND_ARGS = ["--layers", "3", "--hidden", "128"]
#: Each mode: the R-MAT scale and epochs of the per-kind runs, the kinds of the Cora 2x2x2
#: epochs, the partitioner's R-MAT scale, the rounds.
MODES = {
    "full": dict(scale=17, epochs=4, cora_kinds=KINDS, part_scale=18, rounds=3),
    "quick": dict(scale=14, epochs=3, cora_kinds=("gcn", "gat"), part_scale=16, rounds=2),
    "tiny": dict(scale=8, epochs=2, cora_kinds=(), part_scale=9, rounds=3),
    "startup": dict(rounds=7),
}
#: Figures of a timing or a size: lower is better, judged against the noise.
TIMED = ("epoch_s", "wall_s", "cpu_s", "peak_rss_mib")
EXACT = ("comm_bytes_per_epoch",)
#: Figures that are the same in every run of both sides or not: no median, no ratio.
IDENTICAL = ("loss_digest",)


@dataclass(frozen=True)
class Workload:
    """One headline run: its name, the console entry point and its arguments (``{out}``: a
    fresh folder of the run's own)."""

    name: str
    entry: str                        # plexus_train or plexus_partition
    args: tuple[str, ...]
    side_cache: bool = False          # one cache per side, warmed before the rounds


def workloads(mode: str, scale: int | None = None) -> list[Workload]:
    """The fixed set of ``mode`` (`MODES`); ``scale``: another R-MAT scale for the per-kind
    1x1x1 epochs."""
    if mode == "startup":  # issue 56's "no slower start": a user's first epoch, whole process
        return [Workload(f"first epoch {grid} cora", "plexus_train", (
            "--grid", grid, "--dataset", "cora", "--epochs", "1"), side_cache=grid != "1x1x1")
            for grid in ("1x1x1", "2x2x2")]
    m = dict(MODES[mode], **({"scale": scale} if scale else {}))
    out = []
    for kind in KINDS:
        extra = GAT_ARGS if kind == "gat" else KIND_ARGS
        if mode == "tiny" and kind not in ("gcn", "gat"):
            continue
        out.append(Workload(f"{kind} 1x1x1 rmat{m['scale']}", "plexus_train", (
            "--grid", "1x1x1", "--dataset", RMAT.format(scale=m["scale"]), "--model", kind,
            "--epochs", str(m["epochs"]), *extra)))
    for kind in m["cora_kinds"]:
        extra = GAT_ARGS if kind == "gat" else []
        out.append(Workload(f"{kind} 2x2x2 cora", "plexus_train", (
            "--grid", "2x2x2", "--dataset", "cora", "--model", kind, "--epochs",
            str(m["epochs"]), *extra)))
    out.append(Workload("first epoch 1x1x1 cora", "plexus_train", (
        "--grid", "1x1x1", "--dataset", "cora", "--epochs", "1")))
    out.append(Workload(f"partition rmat{m['part_scale']} 2x2x2", "plexus_partition", (
        "--dataset", f"rmat:scale={m['part_scale']},edge_factor=16,features=32,classes=16",
        "--grid", "2x2x2", "--layers", "3", "--jobs", "1", "--out", "{out}")))
    return out


@dataclass
class Side:
    """A tree to run: its label, the folder put first on PYTHONPATH, the revision it is."""

    label: str
    path: Path
    rev: str
    runs: dict[str, list[dict]] = field(default_factory=dict)


class CompareError(Exception):
    """Bad input to compare (a revision git does not know, a tree that is not a checkout)."""


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def tree_label(tree: Path, cwd: Path | None = None) -> str:
    """How the header names side B's tree: its path from ``cwd`` (default the current folder)
    when it lies inside it, else its folder's name; never the machine's absolute path (issue 58
    item 6: the header is committed with the results)."""
    cwd = Path.cwd() if cwd is None else cwd
    return os.path.relpath(tree, cwd) if tree.is_relative_to(cwd) else tree.name


def resolve(rev: str) -> str:
    """The commit ``rev`` names; `CompareError` where git knows none."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise CompareError(f"git knows no revision {rev!r}: name a commit, branch or tag "
                           f"(e.g. main, HEAD~1, 424577c)") from None


def build(rev: str, tmp: Path) -> Path:
    """REV checked out under ``tmp`` and installed into ``tmp``/site, its datasets and
    partitioner projects too where it has them (else side A would import the interpreter's,
    this checkout's, editable ones); that folder."""
    src, site = tmp / "src", tmp / "site"
    git("worktree", "add", "--detach", str(src), rev)
    projects = [str(p) for p in (src, src / "datasets", src / "partitioners")
                if (p / "pyproject.toml").is_file()]
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(site), *projects],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise CompareError(f"could not install {rev} into a temporary folder: "
                           f"{(e.stderr or e.stdout).strip().splitlines()[-1:]}") from None
    return site


def remove_worktree(tmp: Path) -> None:
    """Our own worktree out of git's list (its folder goes with the temporary folder)."""
    src = tmp / "src"
    if src.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=REPO,
                       capture_output=True)


def adopt_orphans() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux's
    PR_SET_CHILD_SUBREAPER): a revision whose workers come from a fork server (a process the
    run never waits for) then still counts their CPU time, as `reap_orphans` collects it."""
    try:
        import ctypes  # noqa: PLC0415

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(deadline_s: float = 10.0) -> tuple[float, float]:
    """Wait for the descendants a finished run left to this process (`adopt_orphans`), at most
    ``deadline_s``; their (CPU seconds, largest peak RSS in MiB)."""
    cpu = peak = 0.0
    end = time.perf_counter() + deadline_s
    while time.perf_counter() < end:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            break
        if not pid:
            time.sleep(0.02)
            continue
        cpu += usage.ru_utime + usage.ru_stime
        peak = max(peak, usage.ru_maxrss * 1024 / MIB)
    return cpu, peak


def run_once(side: Side, w: Workload, scratch: Path, timeout: float) -> dict:
    """One run of ``w`` on ``side`` in a fresh process under ``scratch``: its figures, or
    {'error': ...}. CPU time and peak RSS are the process's and its reaped ranks' (``wait4``:
    the peak is the largest process's), a fork server's ranks included (`adopt_orphans`)."""
    out = Path(tempfile.mkdtemp(dir=scratch))
    log = out / "log.json"
    args = [a.replace("{out}", str(out / "store")) for a in w.args]
    if w.entry == "plexus_train":
        args += ["--quiet", "--log-json", str(log)]
    prog = w.entry.replace("_", "-")
    code = (f"import sys; sys.argv[0] = {prog!r}; from plexus.console import {w.entry} as m; "
            f"sys.exit(m())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    # a tree of the three projects: its datasets and partitioner projects too
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (side.path, side.path / "datasets",
                                                         side.path / "partitioners") if p.is_dir())
    # no store shared between runs or sides; a side's own where the workload keeps one
    env["PLEXUS_CACHE_DIR"] = str(scratch / f"cache-{side.label}" if w.side_cache
                                  else out / "cache")
    with open(out / "output.txt", "w") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=out, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - start > timeout:
                    raise TimeoutError
                time.sleep(0.02)
        except BaseException as e:  # a timeout, ^C or SIGTERM: no run outlives compare
            proc.kill()
            os.wait4(proc.pid, 0)
            if isinstance(e, TimeoutError):
                return {"error": f"timed out after {timeout:.0f} s"}
            raise
        wall = time.perf_counter() - start
    orphan_cpu, orphan_peak = reap_orphans()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = (out / "output.txt").read_text(errors="replace").strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    r = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime + orphan_cpu,
         "peak_rss_mib": max(usage.ru_maxrss * 1024 / MIB, orphan_peak)}
    if log.exists():
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        epochs = [x["epoch_time_s"] for x in lines if "epoch_time_s" in x]
        summary = next((x for x in lines if x.get("summary")), {})
        timed = epochs[1:] or epochs
        if timed:
            r["epoch_s"] = statistics.median(timed)
        if "comm_bytes" in summary and epochs:
            r["comm_bytes_per_epoch"] = sum(summary["comm_bytes"].values()) / len(epochs)
        losses = [x["loss"] for x in lines if "epoch_time_s" in x and "loss" in x]
        if losses:  # json's floats round-trip: equal text is the same float
            r["loss_digest"] = zlib.crc32(json.dumps(losses).encode())
    return r


def spread(values: list[float]) -> float:
    return max(values) - min(values) if values else 0.0


def judge(figure: str, a: list[float], b: list[float], tolerance: float) -> str:
    """'REGRESSION', 'better', 'changed' (bytes only) or '' for ``figure``'s values on each
    side, round by round (the module's rule)."""
    if not a or not b:
        return "missing"
    if figure in IDENTICAL:
        return "identical" if len(set(a) | set(b)) == 1 else "changed"
    ma, mb = statistics.median(a), statistics.median(b)
    if figure in EXACT:
        return "" if ma == mb else ("REGRESSION" if mb > ma else "changed")
    noise = max(spread(a), spread(b))
    pairs = list(zip(a, b))
    if mb - ma > max(tolerance * ma, noise) and all(y > x for x, y in pairs):
        return "REGRESSION"
    if ma - mb > max(tolerance * ma, noise) and all(y < x for x, y in pairs):
        return "better"
    return ""


def fmt(figure: str, v: float) -> str:
    if figure in IDENTICAL:
        return f"{v:.0f}"
    if figure in EXACT:
        return f"{v:,.0f}"
    return f"{v:.1f}" if figure == "peak_rss_mib" else f"{v:.3f}"


def table(a: Side, b: Side, names: list[str], tolerance: float) -> tuple[list[str], int]:
    """The report's rows and the number of regressions."""
    rows = [f"{'workload':<28} {'figure':<21} {'A median':>13} {'A spread':>9} "
            f"{'B median':>13} {'B spread':>9} {'B/A':>6}  verdict"]
    bad = 0
    for name in names:
        ra, rb = a.runs.get(name, []), b.runs.get(name, [])
        errors = [(s.label, r["error"]) for s, runs in ((a, ra), (b, rb)) for r in runs
                  if "error" in r]
        for label, why in errors[:2]:
            rows.append(f"{name:<28} {'(failed on ' + label + ')':<21} {why[:120]}")
        if errors:
            bad += any(lbl == b.label for lbl, _ in errors)
            continue
        for figure in TIMED + EXACT + IDENTICAL:
            va = [r[figure] for r in ra if figure in r]
            vb = [r[figure] for r in rb if figure in r]
            if not va and not vb:
                continue
            verdict = judge(figure, va, vb, tolerance)
            if verdict and figure in TIMED and min(len(va), len(vb)) < 2:
                verdict += " (1 round: no noise measured)"
            bad += verdict.startswith("REGRESSION")
            ma = statistics.median(va) if va else float("nan")
            mb = statistics.median(vb) if vb else float("nan")
            ratio = f"{mb / ma:6.3f}" if ma and figure not in IDENTICAL else "     -"
            sa, sb = ("-", "-") if figure in IDENTICAL else (fmt(figure, spread(va)),
                                                             fmt(figure, spread(vb)))
            rows.append(f"{name:<28} {figure:<21} {fmt(figure, ma):>13} {sa:>9} "
                        f"{fmt(figure, mb):>13} {sb:>9} {ratio}  {verdict}")
    return rows, bad


RUN_LINE = re.compile(r"^  round (?P<round>\d+) (?P<side>[AB]) (?P<name>.+?): (?P<figures>.*)$")


def from_log(path: Path, tolerance: float) -> int:
    """The table of the runs a compare printed in ``path`` (its header kept), for a compare
    stopped before its last round: the complete rounds only, each figure judged as `main`
    judges it."""
    try:
        text = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        print(f"compare: cannot read --from-log {path}: {e.strerror}", file=sys.stderr)
        return 2
    a, b = Side("A", Path(), "log"), Side("B", Path(), "log")
    names: list[str] = []
    for line in text:
        m = RUN_LINE.match(line)
        if not m:
            continue
        side = a if m["side"] == "A" else b
        parts = m["figures"].split("  ")
        if m["figures"].startswith(("exit", "timed out")):
            fig: dict = {"error": m["figures"]}
        else:
            fig = {k: float(v.replace(",", "")) for k, v in (x.split(" ", 1) for x in parts)}
        side.runs.setdefault(m["name"], []).append(fig)
        if m["name"] not in names:
            names.append(m["name"])
    for name in names:  # an unfinished round: its A run without its B run
        n = min(len(a.runs.get(name, [])), len(b.runs.get(name, [])))
        a.runs[name], b.runs[name] = a.runs.get(name, [])[:n], b.runs.get(name, [])[:n]
    if not names:
        print(f"compare: {path} holds no run lines of a compare", file=sys.stderr)
        return 2
    rows, bad = table(a, b, names, tolerance)
    rounds = {name: len(a.runs[name]) for name in names}
    header = [x for x in text if not RUN_LINE.match(x)][:4]
    print("\n".join(header + [f"judged from the log {path.name}: complete rounds {rounds}"]
                    + rows + [f"{bad} regression(s)" if bad else "no regression"]))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rev", help="side A: a git revision (main, HEAD~1, 424577c)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the ~5-minute form")
    size.add_argument("--tiny", "--smoke", action="store_true",
                      help="tiny graphs: the tests' form")
    size.add_argument("--startup", action="store_true",
                      help="only the first epoch of embedded Cora, 1x1x1 and 2x2x2, whole "
                           "process (the 2x2x2 store in a cache per side, built by a warm-up "
                           "run before the rounds); 7 rounds")
    p.add_argument("--tree", default=str(REPO),
                   help="side B: a checkout's root put on PYTHONPATH (default this one)")
    p.add_argument("--rounds", type=int, help="A B rounds (default: the mode's)")
    p.add_argument("--scale", type=int, help="the R-MAT scale of the per-kind 1x1x1 epochs "
                   "(default: the mode's, 17 / 14 / 8)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="run only the workloads whose name contains TEXT (repeatable)")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="a figure regresses only beyond this fraction of A's median and the "
                        "noise (default 0.05)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    p.add_argument("--out", help="also write NAME.txt and NAME.json into this folder")
    p.add_argument("--name", default="compare", help="their name (default compare)")
    p.add_argument("--from-log", metavar="FILE",
                   help="judge the runs an earlier compare printed (its stdout, e.g. of a run "
                        "stopped before its last round) instead of running; REV is then "
                        "only a label")
    args = p.parse_args(argv)
    if args.from_log:
        return from_log(Path(args.from_log), args.tolerance)
    mode = "quick" if args.quick else "tiny" if args.tiny else "startup" if args.startup \
        else "full"
    tree = Path(args.tree).resolve()
    try:
        if not (tree / "plexus" / "console.py").is_file():
            raise CompareError(f"--tree {tree} holds no plexus/console.py: give a checkout's "
                               f"root")
        if args.rounds is not None and args.rounds < 1:
            raise CompareError("--rounds must be at least 1")
        commit = resolve(args.rev)
    except CompareError as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    chosen = [w for w in workloads(mode, args.scale)
              if not args.only or any(t in w.name for t in args.only)]
    if not chosen:
        print(f"compare: no workload of the {mode} set matches --only {args.only}",
              file=sys.stderr)
        return 2
    rounds = args.rounds or MODES[mode]["rounds"]
    command = " ".join(shlex.quote(x) for x in
                       ["python", "benchmarks/compare.py", *(argv if argv is not None
                                                              else sys.argv[1:])])
    try:
        head_b = "HEAD " + git("rev-parse", "--short", "HEAD", cwd=tree)
        if git("status", "--porcelain", "--untracked-files=no", cwd=tree):
            head_b += ", with uncommitted changes"
    except subprocess.CalledProcessError:
        head_b = "not a git checkout"
    counts_orphans = adopt_orphans()  # before the first run: its fork server's ranks count
    lines = [f"compare: {command}",
             f"A = {args.rev} ({commit[:10]}), installed into a temporary folder; "
             f"B = the tree {tree_label(tree)} ({head_b})",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, host "
             f"{os.uname().nodename}, {os.cpu_count()} cpus, load before "
             f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; mode {mode}, {rounds} rounds "
             f"of A B interleaved, each run a fresh process with its side's default threads; "
             f"CPU seconds {'with' if counts_orphans else 'WITHOUT'} the ranks a fork "
             f"server started",
             f"rule: REGRESSION when B's median > A's by more than max({args.tolerance:.0%} "
             f"of A, the larger spread (max - min) of A and B) and B > A in every round; "
             f"comm bytes per epoch exact (any difference said)"]
    lines += [f"  {w.name}: {w.entry.replace('_', '-')} {' '.join(w.args)}" for w in chosen]
    for x in lines:
        print(x, flush=True)
    # SIGTERM as ^C: the run in progress is killed, the worktree and the folder removed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="plexus-compare-") as name:
        tmp = Path(name)
        try:
            try:
                site = build(commit, tmp)
            except CompareError as e:
                print(f"compare: {e}", file=sys.stderr)
                return 2
            a, b = Side("A", site, commit), Side("B", tree, "tree")
            scratch = tmp / "runs"
            scratch.mkdir()
            runs: list[str] = []  # the printed lines, kept in the report (--from-log reads them)
            for w in (w for w in chosen if w.side_cache):  # fills each side's cache, not judged
                for side in (a, b):
                    fig = run_once(side, w, scratch, args.timeout)
                    print(f"  warm-up {side.label} {w.name}: {fig.get('error') or 'done'}",
                          flush=True)
            for r in range(rounds):
                for w in chosen:
                    for side in (a, b):
                        fig = run_once(side, w, scratch, args.timeout)
                        side.runs.setdefault(w.name, []).append(fig)
                        shown = fig.get("error") or "  ".join(
                            f"{k} {fmt(k, v)}" for k, v in fig.items())
                        runs.append(f"  round {r + 1} {side.label} {w.name}: {shown}")
                        print(runs[-1], flush=True)
        finally:
            remove_worktree(tmp)
    rows, bad = table(a, b, [w.name for w in chosen], args.tolerance)
    shown = len(lines)
    lines += runs
    lines.append(f"load after {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    lines += rows
    lines.append(f"{bad} regression(s)" if bad else "no regression")
    print("\n".join(lines[shown + len(runs):]))
    if args.out:
        from plexus.bench.output import write_json, write_text

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / f"{args.name}.txt", "\n".join(lines) + "\n")
        write_json(out / f"{args.name}.json", {
            "command": command, "rev": commit, "tree": shown_path(tree), "mode": mode,
            "rounds": rounds, "tolerance": args.tolerance, "scratch": shown_path(tmp),
            "runs": {"A": a.runs, "B": b.runs}, "regressions": bad})
    return 1 if bad else 0


def shown_path(path: str | Path) -> str:
    """``path`` as a committed result may name it: relative to this checkout, under
    ``$TMPDIR/``, else as given (tests/docs/test_results_paths.py: no folder of the machine)."""
    p = Path(path).resolve()
    for root, label in ((REPO, ""), (Path(tempfile.gettempdir()).resolve(), "$TMPDIR/")):
        if p == root or root in p.parents:
            rel = p.relative_to(root).as_posix()
            return (label + rel) if label else (rel if rel != "." else ".")
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
