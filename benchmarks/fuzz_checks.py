"""Fuzz the checks of issue 46 items 3-5: every numeric option of every tool, the launchers'
environment variables, and a checkpoint's loop state; 500 seeded cases per kind by default.

- ``options``: a random numeric option of a random tool (plexus-train, plexus-partition,
  plexus-model, plexus-bench, plexus-sweep) set to a random value (huge, negative, zero, NaN,
  inf, 1e300, a float for an int, text); parsed and checked as the tool does before it starts
  anything (plexus-model runs to its table; plexus-train and plexus-partition: the parser and
  their up-front checks). Promise: a one-line error with exit status 2, or every numeric
  option within the one table (`plexus_partition.model.bounds`).
- ``env``: random launcher environments (torchrun's RANK/WORLD_SIZE/LOCAL_*/MASTER_*, srun's
  SLURM_*, OMP_NUM_THREADS, PLEXUS_CACHE_MAX_GB) through `detect_environment`,
  `threads_per_worker` and the cache cap. Promise: one-line `LaunchError`/`CacheCapError`, or a
  job whose rank is inside its world, port in [1, 65535], local rank inside the node's.
- ``checkpoint``: a real run's state (3 optimizer/schedule configurations) with 1-3 loop fields
  replaced by random values; `check_loop_state`, and when it accepts, the state restored into a
  Trainer that must then hold rates in [0, --lr] and train one more epoch to a finite loss.

Each kind runs in its own child process (a signal would show as its exit status; a hang as the
timeout). Prints the outcomes per kind and writes ``fuzz_checks.txt`` to ``--out``; exits 1 if
any case broke its promise.

    PYTHONPATH=$PWD python benchmarks/fuzz_checks.py [--cases 500] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

VALUES = ["0", "-1", "1", "2", "3", "7", "64", "1024", "1025", "65535", "65536", "99999",
          "100000", "1000000000000", "9" * 30, "-5", "0.5", "1e300", "-1e300", "1e-300", "nan",
          "inf", "-inf", "1.5", "abc", "", " 4 ", "0x10", "2e3"]


def _tools():
    from plexus.bench.check import add_arguments
    from plexus_partition.cli import build_parser as partition_parser
    from plexus.perfmodel.benchcli import BenchCommand, bench_parser
    from plexus.perfmodel.cli import _model_parser
    from plexus.studies.cli import sweep_parser
    from plexus.train.parser import build_parser

    check = BenchCommand("check", "", "", add_arguments, lambda a: 0)
    return {"plexus-train": (build_parser, ["--grid", "1x1x1"]),
            "plexus-partition": (partition_parser, ["--dataset", "cora", "--grid", "1x1x1",
                                                    "--layers", "2", "--stats-only"]),
            "plexus-model": (_model_parser, ["--world-size", "4", "--nodes", "1000", "--nnz",
                                             "9000", "--features", "16", "--classes", "4"]),
            "plexus-bench": (lambda: bench_parser([check]), ["check"]),
            "plexus-sweep": (sweep_parser, ["--dataset", "cora", "--out", "/nonexistent/out"])}


def _numeric_flags(parser) -> list[tuple[str, str]]:
    import argparse as ap

    out = []
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, ap._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                out += _numeric_flags(sub)
        elif action.type in (int, float) and action.option_strings:
            out.append((action.option_strings[-1], action.dest))
    return out


def _one_line(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return len(lines) == 1 and ": error: " in lines[0] and "Traceback" not in text


def fuzz_options(cases: int, rng: random.Random) -> Counter:
    from plexus_partition.model.bounds import BOUNDS, check_bound
    from plexus_partition.model.cli import UsageError
    from plexus.perfmodel.cli import model_main

    tools = _tools()
    outcome = Counter()
    for _ in range(cases):
        prog = rng.choice(sorted(tools))
        make, base = tools[prog]
        flags = _numeric_flags(make())
        chosen = rng.sample(flags, k=min(len(flags), rng.randint(1, 2)))
        argv = list(base)
        for flag, _dest in chosen:
            argv += [f"{flag}={rng.choice(VALUES)}"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                if prog == "plexus-model":
                    status = model_main(argv)
                else:
                    args = make().parse_args(argv)
                    if prog == "plexus-train":
                        from plexus.train.cli import check_numbers
                        check_numbers(args)
                    status = 0
        except UsageError as e:
            status, err = 2, io.StringIO(f"{prog}: error: {e}")
        except SystemExit as e:
            status = e.code
        except Exception as e:  # noqa: BLE001 — a traceback: the promise broken
            outcome["traceback"] += 1
            print(f"options TRACEBACK {prog} {argv}: {type(e).__name__}: {e}", flush=True)
            continue
        if status == 2 and _one_line(err.getvalue()):
            outcome["one-line error"] += 1
        elif status == 0:
            args = make().parse_args(argv) if prog != "plexus-model" else _model_parser_args(argv)
            bad = [d for d, v in vars(args).items() if d in BOUNDS and isinstance(v, (int, float))
                   and not _within(d, v, check_bound)]
            outcome["wrong with exit 0" if bad else "ok"] += 1
            if bad:
                print(f"options WRONG {prog} {argv}: {bad}", flush=True)
        else:
            outcome[f"exit {status}"] += 1
            print(f"options EXIT {status} {prog} {argv}: {err.getvalue()[-300:]}", flush=True)
    return outcome


def _model_parser_args(argv):
    from plexus.perfmodel.cli import _model_parser

    return _model_parser().parse_args(argv)


def _within(dest, value, check_bound) -> bool:
    try:
        check_bound(dest, value)
        return True
    except ValueError:
        return False


ENV_KEYS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID",
            "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_TASKS_PER_NODE", "OMP_NUM_THREADS",
            "PLEXUS_CACHE_MAX_GB"]


def fuzz_env(cases: int, rng: random.Random) -> Counter:
    from plexus_partition.launch.env import LaunchError, detect_environment, threads_per_worker
    from plexus.train.cacheuse import CacheCapError, cap_bytes

    outcome = Counter()
    for _ in range(cases):
        env = {"MASTER_ADDR": "127.0.0.1"} if rng.random() < 0.8 else {}
        family = rng.choice(["torchrun", "slurm", "both"])
        keys = [k for k in ENV_KEYS if family == "both" or
                (family == "slurm") == k.startswith("SLURM")]
        if family in ("torchrun", "both"):
            env.update(RANK=rng.choice(VALUES[:12]), WORLD_SIZE=rng.choice(VALUES[:12]))
        if family in ("slurm", "both"):
            env.update(SLURM_PROCID=rng.choice(VALUES[:12]), SLURM_NTASKS=rng.choice(VALUES[:12]),
                       SLURM_STEP_ID=rng.choice(["0", "1", "4294967294", "x"]))
        for k in rng.sample(keys, k=rng.randint(0, 4)):
            env[k] = rng.choice(VALUES + ["4(x2),3", "2"])
        try:
            job = detect_environment(env)
            threads = threads_per_worker(job.local_world_size if job else 1, 2, None, env)
            cap_bytes(None, env)
        except (LaunchError, CacheCapError) as e:
            ok = "\n" not in str(e) and len(str(e)) < 600
            outcome["one-line error" if ok else "bad message"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            outcome["traceback"] += 1
            print(f"env TRACEBACK {env}: {type(e).__name__}: {e}", flush=True)
            continue
        sound = job is None or (0 <= job.rank < job.world_size and 1 <= job.master_port <= 65535
                                and 0 <= job.local_rank < job.local_world_size <= job.world_size)
        sound = sound and 1 <= threads <= 1024
        outcome["ok" if sound else "wrong with exit 0"] += 1
        if not sound:
            print(f"env WRONG {env}: {job} threads {threads}", flush=True)
    return outcome


def fuzz_checkpoint(cases: int, rng: random.Random) -> Counter:
    import torch

    from plexus.engine.config import ModelConfig, TrainConfig
    from plexus.engine.serial import SerialModel
    from plexus.engine.trainer import Trainer
    from plexus.testing.exactness import directed_toy_graph
    from plexus.train import checkpoint as ckpt
    from plexus_partition.model.cli import UsageError

    configs = {
        "adamw-cosine": TrainConfig(epochs=8, lr=0.02, optimizer="adamw", lr_schedule="cosine"),
        "sgd-step": TrainConfig(epochs=8, lr=0.2, optimizer="sgd", lr_schedule="step",
                                lr_step=3, weight_decay_scope="first"),
        "adam-plateau": TrainConfig(epochs=30, lr=0.05, lr_schedule="plateau", lr_patience=1,
                                    patience=4),
    }
    g, cfg = directed_toy_graph(), ModelConfig(2, 6, 0.5)
    info = ckpt.DatasetInfo(g.name, g.num_nodes, g.num_features, g.num_classes)
    bases = {}
    for name, tc in configs.items():
        t = Trainer(SerialModel(g, cfg, seed=5), tc)
        t.fit(5)
        bases[name] = ckpt.make_checkpoint(t.full_state(), cfg, tc, info)

    def paths(obj, prefix=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(k, str) and k not in ("params", "stats", "model", "dataset"):
                    yield from paths(v, f"{prefix}{k}\x00")
        if prefix:
            yield prefix[:-1]

    values = [-5, -1, 0, 1, 2, 3, 5, 6, 10**12, -1e-3, 0.01, 0.5, 1e300, float("nan"),
              float("inf"), None, True, "x", "adam", [], [0.01], [-5.0], [0.01, 0.01], {},
              {"epoch": 3}, torch.tensor(1.0), torch.tensor([0.1])]
    outcome = Counter()
    scratch = tempfile.TemporaryDirectory(prefix="fuzz-checkpoint-")
    folder = Path(scratch.name)
    for _ in range(cases):
        name = rng.choice(sorted(bases))
        payload, tc = copy.deepcopy(bases[name]), configs[name]
        where = [p for p in paths(payload) if p.split("\x00")[0] in ("state", "train")
                 and p != "state"]
        for _ in range(rng.randint(1, 3)):
            *keys, last = rng.choice(where).split("\x00")
            target = payload
            try:
                for k in keys:
                    target = target[k]
                target[last] = rng.choice(values)
            except Exception:  # noqa: BLE001 — an earlier plant replaced the path's parent
                pass
        # the whole resume check of plexus-train (`load_resume`): file, structure, model,
        # epochs, seed, optimizer and schedule options, tensors, loop state
        ckpt.save_checkpoint(folder, payload)
        plan = SimpleNamespace(checkpoint=folder, model=cfg, train=tc, export_best=False)
        try:
            payload = ckpt.load_resume(plan, info)
        except (ckpt.CheckpointError, UsageError) as e:
            outcome["one-line error" if "\n" not in str(e) else "bad message"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            outcome["traceback"] += 1
            print(f"checkpoint TRACEBACK {name}: {type(e).__name__}: {e}", flush=True)
            continue
        try:
            trainer = Trainer(SerialModel(g, cfg, seed=5), tc)
            trainer.load_full_state(payload["state"])
            rates_ok = all(0 <= grp["lr"] <= tc.lr * (1 + 1e-6)
                           for grp in trainer.opt.param_groups)
            loss_ok = True
            if trainer.stopped is None and trainer.epoch < tc.epochs:
                loss_ok = math.isfinite(trainer.run_epoch().loss)
        except Exception as e:  # noqa: BLE001 — accepted, then broke: a traceback at resume
            outcome["traceback"] += 1
            print(f"checkpoint ACCEPTED-THEN-TRACEBACK {name}: {type(e).__name__}: {e}",
                  flush=True)
            continue
        outcome["ok" if rates_ok and loss_ok else "wrong with exit 0"] += 1
    scratch.cleanup()
    return outcome


KINDS = {"options": fuzz_options, "env": fuzz_env, "checkpoint": fuzz_checkpoint}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--kind", choices=sorted(KINDS), help="(internal: one kind in this process)")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    if args.kind:  # the child: one kind, its counts as JSON on the last line
        os.environ["OMP_NUM_THREADS"] = "1"
        import warnings

        warnings.filterwarnings("ignore")  # torch's notes on the fuzzed values: not findings
        outcome = KINDS[args.kind](args.cases, random.Random(f"{args.kind}/{args.seed}"))
        print(json.dumps(dict(outcome)))
        return 0
    rows, broken = [], 0
    for kind in KINDS:
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--kind", kind, "--cases",
                                   str(args.cases), "--seed", str(args.seed)],
                                  capture_output=True, text=True, timeout=args.timeout)
            lines = proc.stdout.strip().splitlines()
            counts = json.loads(lines[-1]) if proc.returncode == 0 and lines else {}
            for line in lines[:-1]:
                print(line)
            if proc.returncode:
                counts = {f"child exit {proc.returncode} (signal)" if proc.returncode < 0
                          else f"child exit {proc.returncode}": 1}
                print(proc.stderr[-2000:])
        except subprocess.TimeoutExpired:
            counts = {"hang": 1}
        secs = time.perf_counter() - start
        bad = sum(v for k, v in counts.items() if k not in ("ok", "one-line error"))
        broken += bad
        rows.append(f"{kind:<11} {sum(counts.values()):>5} cases  "
                    + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    + f"  ({secs:.0f} s){'  BROKEN' if bad else ''}")
        print(rows[-1], flush=True)
    summary = (f"seed {args.seed}, {args.cases} cases per kind; load "
               f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
               f"{'0 broken' if not broken else f'{broken} BROKEN'} (tracebacks, signals, hangs, "
               "wrong values accepted)")
    print(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz_checks.txt").write_text("\n".join(rows + [summary]) + "\n")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
