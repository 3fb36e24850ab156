"""Fuzz what Plexus finds on disk from its own earlier runs and print the outcomes per kind.

    python benchmarks/fuzz_stores.py [--per-kind 500] [--seed 0] [--kinds workdir,cache,outputs]
                                     [--out benchmarks/results] [--smoke]

Kinds (``tests/fuzzing/stores.py``): ``workdir``, a killed partition's work directory damaged
(markers edited, forged, planted, lost; scratch flipped, truncated, swapped, linked; signature,
file record, mode or the directory itself forged) and resumed; ``cache``, a built cache's store,
converted graph (``graphs/``) or source record damaged, then reused or rebuilt; ``outputs``, an
outputs directory damaged or replaced by a user's, then written over. Every case runs in a forked
child under an alarm. Acceptable: ``ok`` (and the result equals the clean run's) and ``error``
(one typed line); ``traceback``, ``signal``, ``hang``, ``lost`` (something outside the target
touched, or a user's directory replaced) and ``wrong`` (a result other than the clean run's)
are bugs, listed with their case. Also the largest peak RSS of a case (bound: 1 GiB). Writes
``fuzz_stores.txt`` and ``fuzz_stores.json`` under ``--out``; exit status 1 if any case was
not acceptable or over the bound.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/fuzzing

from fuzzing import stores as fuzz_stores  # noqa: E402
from fuzzing import targets as fuzztargets  # noqa: E402
from plexus.bench.output import write_json, write_text  # noqa: E402

RSS_BOUND = 1 << 30


def _progress(result: fuzz_stores.Result) -> None:
    """Unacceptable outcomes as they happen, and a count every 100 cases (stderr)."""
    if result.outcome not in fuzz_stores.GOOD:
        print(f"{result.kind}-{result.index}: {result.outcome}: {result.detail[:300]}",
              file=sys.stderr, flush=True)
    if (result.index + 1) % 100 == 0:
        print(f"{result.kind}: {result.index + 1} cases", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-kind", type=int, default=500, help="cases per kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(fuzz_stores.KINDS))
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    p.add_argument("--smoke", action="store_true", help="5 cases per kind")
    args = p.parse_args(argv)
    if args.smoke:
        args.per_kind = 5
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(fuzz_stores.KINDS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}; choose from {','.join(fuzz_stores.KINDS)}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-stores-") as tmp:
        results = fuzz_stores.run_cases(Path(tmp), args.per_kind, args.seed, kinds,
                                        fuzz_stores.Targets.of(fuzztargets), _progress)
    seconds = time.perf_counter() - start
    summary = fuzz_stores.summarize(results)
    outcomes = fuzz_stores.OUTCOMES
    lines = [f"fuzz_stores: seed {args.seed}, {args.per_kind} cases per kind, {seconds:.0f} s",
             "", f"{'kind':<9}" + "".join(f"{o:>10}" for o in outcomes)
             + f"{'total':>7}{'max peak RSS':>15}"]
    for kind in kinds:
        c = summary.get(kind, {"outcomes": {}, "max_peak_rss": 0})
        lines.append(f"{kind:<9}" + "".join(f"{c['outcomes'].get(o, 0):>10}" for o in outcomes)
                     + f"{sum(c['outcomes'].values()):>7}"
                     + f"{c['max_peak_rss'] / 2**20:>11.0f} MiB")
    lines += ["", "damage applied (cases):"]
    for kind in kinds:
        damage = summary.get(kind, {}).get("damage", {})
        lines.append(f"  {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(damage.items())))
    bad = [r for r in results if r.outcome not in fuzz_stores.GOOD]
    heavy = [r for r in results if r.peak_rss > RSS_BOUND]
    lines += ["", f"unacceptable outcomes: {len(bad)}; cases over {RSS_BOUND >> 20} MiB of peak "
              f"RSS: {len(heavy)}",
              f"(peak RSS: the forked case's ru_maxrss, the warm parent's pages included)"]
    lines += [f"  {r.kind}-{r.index} ({r.how}): {r.outcome}: {r.detail}" for r in bad]
    text = "\n".join(lines)
    print(text)
    write_text(args.out / "fuzz_stores.txt", text + "\n")
    write_json(args.out / "fuzz_stores.json",
               {"seed": args.seed, "per_kind": args.per_kind, "seconds": seconds,
                "summary": {k: {"outcomes": dict(v["outcomes"]), "damage": dict(v["damage"]),
                                "max_peak_rss": v["max_peak_rss"]}
                            for k, v in summary.items()},
                "bad": [r.__dict__ for r in bad]})
    return 1 if bad or heavy else 0


if __name__ == "__main__":
    sys.exit(main())
