"""How one run of a sweep is started: plexus-train on its own (it starts its local workers), under
torchrun, or from a SLURM batch script (one per run, or one job array per world size)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

LAUNCHERS = ("local", "torchrun", "slurm")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def interpreter(python: str) -> tuple[str, ...]:
    """How a child Python of ours starts: ``python -P`` where the interpreter has it (Python
    3.11+), so that the directory it is started in is not first on its ``sys.path``: there a
    folder named ``plexus`` (the parent of a clone of it) would shadow the installed package.
    This interpreter answers from its own version; another is asked once (``-P -c pass``), and
    one that cannot run here (a cluster's, for batch scripts) is taken to be as new as this."""
    if python == sys.executable:
        return (python, "-P") if sys.version_info >= (3, 11) else (python,)
    try:
        ok = subprocess.run([python, "-P", "-c", "pass"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = sys.version_info >= (3, 11)
    return (python, "-P") if ok else (python,)


def local_command(python: Sequence[str], train_args: Sequence[str]) -> list[str]:
    """plexus-train in one process that starts the grid's local workers itself; ``python``: the
    interpreter with its flags (`interpreter`)."""
    return [*python, "-m", "plexus.train", *train_args]


def torchrun_command(python: Sequence[str], nproc: int, train_args: Sequence[str]) -> list[str]:
    """torchrun with ``nproc`` workers on this machine (``--standalone``: its own rendezvous on a
    free port, so runs never collide), each one rank of plexus-train. ``--no-python``: torchrun
    would start each worker as ``sys.executable -u -m ...``, without ``python``'s flags."""
    return [*python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(nproc), "--no-python", *python, "-u", "-m", "plexus.train", *train_args]


@dataclass(frozen=True)
class SlurmOptions:
    """What a batch script asks SLURM for, beyond the run's own rank count."""

    python: str
    workdir: str
    python_flags: tuple[str, ...] = ()  # e.g. ("-P",): `interpreter`
    tasks_per_node: int | None = None  # default: SLURM places the G tasks
    gpus_per_node: int | None = None
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    sbatch: tuple[str, ...] = ()  # more #SBATCH options, e.g. "--constraint=a100"
    setup: tuple[str, ...] = ()  # shell lines before srun, e.g. "module load cuda"

    def __post_init__(self) -> None:
        # every value lands on a line of a script: a newline would add lines of its own
        for name in ("python", "workdir", "time", "partition", "account", "sbatch", "setup"):
            value = getattr(self, name)
            for text in value if isinstance(value, tuple) else (value,):
                if text is not None and _CONTROL.search(str(text)):
                    raise ValueError(f"--{name} {str(text)!r:.80} holds a control character "
                                     "(newline, tab, ...); each value must be one plain line "
                                     "of the batch script")

    def header(self, name: str, ntasks: int, output: str) -> list[str]:
        """The #SBATCH lines of a job of ``ntasks`` ranks."""
        lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --ntasks={ntasks}"]
        if self.tasks_per_node:
            nodes = -(-ntasks // self.tasks_per_node)
            lines += [f"#SBATCH --nodes={nodes}",
                      f"#SBATCH --ntasks-per-node={min(ntasks, self.tasks_per_node)}"]
        if self.gpus_per_node:
            lines.append(f"#SBATCH --gpus-per-node={self.gpus_per_node}")
        lines.append(f"#SBATCH --time={self.time}")
        if self.partition:
            lines.append(f"#SBATCH --partition={self.partition}")
        if self.account:
            lines.append(f"#SBATCH --account={self.account}")
        lines += [f"#SBATCH {opt}" for opt in self.sbatch]
        lines.append(f"#SBATCH --output={output}")
        return lines

    def prologue(self) -> list[str]:
        """The rendezvous every rank joins (the first node of the job), then the set-up lines."""
        return ["set -euo pipefail",
                f"cd {shlex.quote(self.workdir)}",
                *self.setup,
                'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                "# a port per job: two jobs sharing a node never meet",
                "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"]

    def srun(self, ntasks: int, args: str) -> str:
        """The srun line: one task per rank; a rank that fails ends the job (no hang)."""
        python = quote_args((self.python, *self.python_flags))
        return f"srun --kill-on-bad-exit=1 --ntasks={ntasks} {python} -m plexus.train {args}"


def quote_args(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


SKIP_DONE = ['if [ -s "$LOG" ]; then',
             '    # complete logs only ever appear whole (plexus-train renames them at the end)',
             '    echo "already complete: $LOG"; exit 0',
             'fi']


def slurm_script(slurm: SlurmOptions, name: str, ntasks: int, train_args: Sequence[str],
                 log: str, output: str, note: str) -> str:
    """A batch script running one plexus-train job of ``ntasks`` ranks; ``train_args`` end with
    ``--log-json LOG``. A requeued or resubmitted job whose log is complete does nothing."""
    args = list(train_args)
    if args[-2:] != ["--log-json", log]:
        raise ValueError("train_args must end with --log-json LOG")
    lines = [*slurm.header(name, ntasks, output), f"# {note}", *slurm.prologue(),
             f"LOG={shlex.quote(log)}", *SKIP_DONE,
             slurm.srun(ntasks, quote_args(args[:-2]) + ' --log-json "$LOG"')]
    return "\n".join(lines) + "\n"


def slurm_array_script(slurm: SlurmOptions, name: str, ntasks: int,
                       runs: Sequence[tuple[str, Sequence[str], str]], output: str,
                       note: str) -> str:
    """One job array over runs of the same rank count: element i runs ``runs[i]`` = (run id,
    plexus-train arguments ending with ``--log-json LOG``, LOG)."""
    header = slurm.header(name, ntasks, output)
    header.insert(2, f"#SBATCH --array=0-{len(runs) - 1}")
    lines = [*header, f"# {note}", *slurm.prologue(), 'case "$SLURM_ARRAY_TASK_ID" in']
    for i, (rid, args, log) in enumerate(runs):
        args = list(args)
        if args[-2:] != ["--log-json", log]:
            raise ValueError("train_args must end with --log-json LOG")
        lines += [f"    {i})  # {rid}",
                  f"        LOG={shlex.quote(log)}",
                  f"        ARGS=({quote_args(args[:-2])}) ;;"]
    lines += ['    *) echo "no run for array index $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;', "esac",
              *SKIP_DONE, slurm.srun(ntasks, '"${ARGS[@]}" --log-json "$LOG"')]
    return "\n".join(lines) + "\n"


def submit_script(scripts: Sequence[Path]) -> str:
    """A script that submits every batch script with sbatch."""
    lines = ["#!/bin/bash", "# Submit every batch script of this sweep (written by plexus-sweep).",
             "set -euo pipefail", 'cd "$(dirname "$0")"']
    lines += [f"sbatch {shlex.quote(p.name)}" for p in scripts]
    return "\n".join(lines) + "\n"
