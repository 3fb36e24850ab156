"""Fuzz the readers of graph directories and weights exports, one process per case, and print
each kind's outcomes with the largest peak RSS of any case.

    python benchmarks/fuzz_readers.py [--per-kind 500] [--seed 0] [--out DIR] [--smoke]

Cases (``tests/fuzzing/inputs.py``, kinds ``graph`` and ``export``): bytes flipped and truncated,
hand-edited headers and PyG descriptions, arrays whose headers declare far more rows than the
file holds, FIFOs and devices in place of files, JSON nested thousands deep, declared layer
widths of 2^20 and 2^40, "device": "meta", GINConv nested 3,000 deep, and an export whose
deflated tensor inflates to 1 GiB. Each case runs in a child forked for it
(``run_cases_forked`` of ``tests/fuzzing/harness.py``), its peak RSS read with ``os.wait4``
(the inherited interpreter with torch included). Acceptable: ``ok`` and ``error`` (one typed line),
and a peak at most 1 GiB. Writes ``fuzz_readers.txt`` under ``--out``; exit status 1 on anything
else.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/fuzzing

from fuzzing import harness, inputs  # noqa: E402
from plexus.bench.output import write_text  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-kind", type=int, default=500, help="mutated cases per reader kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    p.add_argument("--smoke", action="store_true", help="5 cases per kind")
    args = p.parse_args(argv)
    per_kind = 5 if args.smoke else args.per_kind
    kinds = inputs.READER_KINDS
    with tempfile.TemporaryDirectory(prefix="plexus-fuzz-readers-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        cases = inputs.make_cases(work, args.seed, per_kind, kinds)
        made = time.perf_counter() - start
        results = harness.run_cases_forked(cases, work, timeout=4 * 3600)
        ran = time.perf_counter() - start - made

    counts = harness.summarize(results)
    limit_mb = inputs.RSS_LIMIT_KB // 1024
    lines = [f"fuzz_readers: seed {args.seed}, {per_kind} cases per kind, one process per case; "
             f"written in {made:.1f}s, run in {ran:.1f}s",
             "", f"{'kind':<8}" + "".join(f"{o:>11}" for o in harness.OUTCOMES)
             + f"{'total':>8}{'peak RSS':>12}{'over ' + str(limit_mb) + ' MB':>14}"]
    for kind in kinds:
        c = counts.get(kind, {})
        rss = [r for case, _, _, r in results if case.kind == kind]
        over = sum(r > inputs.RSS_LIMIT_KB for r in rss)
        lines.append(f"{kind:<8}" + "".join(f"{c.get(o, 0):>11}" for o in harness.OUTCOMES)
                     + f"{sum(c.values()):>8}{max(rss, default=0) // 1024:>9} MB{over:>14}")
    bad = [(case, outcome, detail, rss) for case, outcome, detail, rss in results
           if outcome not in harness.GOOD or rss > inputs.RSS_LIMIT_KB]
    lines += ["", f"unacceptable outcomes (or peaks over {limit_mb} MB): {len(bad)}",
              f"(peak RSS: os.wait4's ru_maxrss of the case's own process, forked from an "
              f"interpreter with torch imported; hangs: still running after "
              f"{harness.CASE_LIMIT_S} s)"]
    lines += [f"  {case.name}: {outcome}: {detail} ({rss // 1024} MB)"
              for case, outcome, detail, rss in bad]
    text = "\n".join(lines)
    print(text)
    write_text(args.out / "fuzz_readers.txt", text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
