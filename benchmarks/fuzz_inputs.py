"""Fuzz every input kind at scale and print the count of each outcome per kind.

    python benchmarks/fuzz_inputs.py [--per-kind 300] [--seed 0] [--cora DIR] [--kinds npz,mtx]
                                     [--out DIR] [--smoke]

Writes seeded mutations of small valid inputs (npz, Matrix Market, edge list, Planetoid files,
an OGB directory with its caches, a shard store; see ``tests/fuzzing/inputs.py``) plus
single-bit flips of the real Cora files, loads each in a child process as the command lines
do; damaged calls of the Python API (kind ``api``: ``tests/fuzzing/api.py``); damaged study folders
run through plexus-sweep and plexus-report (kinds ``sweep`` and ``report``:
``tests/fuzzing/studies.py``). Prints a table of outcomes. Acceptable: ``ok`` and ``error`` (one
typed line, exit 2 in the CLIs); ``traceback``, ``signal``, ``payload`` (a pickle ran code, or a
tool wrote outside its folder) and ``hang`` (a case ran past the alarm) are bugs, listed one per
line with their case. Writes ``fuzz_inputs.txt`` and ``fuzz_inputs.json`` under ``--out``. Exit
status 1 if any case was not acceptable.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/fuzzing

from fuzzing import harness, inputs  # noqa: E402
from fuzzing import studies as studycases  # noqa: E402
from plexus.bench.output import write_json, write_text  # noqa: E402
from plexus_datasets.planetoid import EMBEDDED_DIR  # noqa: E402

OUTCOMES = harness.OUTCOMES
ALL_KINDS = (*inputs.KINDS, *studycases.KINDS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-kind", type=int, default=300, help="mutated cases per input kind")
    p.add_argument("--cora-flips", type=int, default=100,
                   help="copies of the real Cora files with one bit flipped in allx or tx")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cora", type=Path, default=EMBEDDED_DIR,
                   help="directory holding ind.cora.* (default: the copy in the package)")
    p.add_argument("--kinds", default=",".join(ALL_KINDS))
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    p.add_argument("--smoke", action="store_true", help="5 cases per kind, 3 Cora flips")
    args = p.parse_args(argv)
    if args.smoke:
        args.per_kind, args.cora_flips = 5, 3
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}; choose from {','.join(ALL_KINDS)}")
    file_kinds = tuple(k for k in kinds if k in inputs.KINDS)
    study_kinds = tuple(k for k in kinds if k in studycases.KINDS)

    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        cases = inputs.make_cases(work, args.seed, args.per_kind, file_kinds, cora=args.cora)
        if args.cora_flips and "planetoid" in kinds:
            cases += inputs.cora_flip_cases(work / "cora", args.cora, args.cora_flips, args.seed)
        studies = studycases.make_cases(work / "studies", args.seed, args.per_kind,
                                          study_kinds) if study_kinds else []
        made = time.perf_counter() - start
        results = harness.run_cases(cases, work, timeout=7200) if cases else []
        if studies:
            results += harness.run_cases(studies, work / "studies", timeout=7200,
                                         runner="fuzzing.studies")
        ran = time.perf_counter() - start - made

    counts = harness.summarize(results)
    lines = [f"fuzz_inputs: seed {args.seed}, {args.per_kind} cases per kind, "
             f"{args.cora_flips} Cora bit flips; written in {made:.1f}s, loaded in {ran:.1f}s",
             "", f"{'kind':<10}" + "".join(f"{o:>11}" for o in OUTCOMES) + f"{'total':>8}"]
    for kind in kinds:
        c = counts.get(kind, {})
        lines.append(f"{kind:<10}" + "".join(f"{c.get(o, 0):>11}" for o in OUTCOMES)
                     + f"{sum(c.values()):>8}")
    bad = [(case, outcome, detail) for case, outcome, detail in results
           if outcome not in harness.GOOD]
    lines.append("")
    lines.append(f"unacceptable outcomes: {len(bad)}")
    lines.append(f"(hangs: cases still running after {harness.CASE_LIMIT_S} s; signals: the "
                 "loading process died)")
    lines += [f"  {case.name} ({case.spec or case.store}): {outcome}: {detail}"
              for case, outcome, detail in bad]
    text = "\n".join(lines)
    print(text)
    write_text(args.out / "fuzz_inputs.txt", text + "\n")
    write_json(args.out / "fuzz_inputs.json",
               {"seed": args.seed, "per_kind": args.per_kind, "cora_flips": args.cora_flips,
                "counts": {k: dict(v) for k, v in counts.items()},
                "bad": [{"case": c.name, "outcome": o, "detail": d} for c, o, d in bad]})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
