"""Count the checks of test files, at a commit and in the tree, to show a consolidation weakened
nothing (issue 58 item 5): per file, its test functions, ``assert`` statements, and other checks
(``pytest.raises``, ``pytest.fail``, ``pytest.approx``, `assert_one_line`-style helpers called
``assert_*``), read from the source (a parametrized test counts once).

    python benchmarks/assertions.py REV [FILE ...]   # default: every tests/**/*.py changed since REV
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def counts(source: str) -> tuple[int, int, int]:
    """(test functions, assert statements, other checks) of one file's source."""
    tree = ast.parse(source)
    tests = sum(isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
                for n in ast.walk(tree))
    asserts = sum(isinstance(n, ast.Assert) for n in ast.walk(tree))
    other = 0
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            other += name in ("pytest.raises", "pytest.fail", "pytest.approx") or \
                name.split(".")[-1].startswith("assert_")
    return tests, asserts, other


def at(rev: str, path: str) -> str | None:
    """The file's text at ``rev`` (None where it did not exist)."""
    proc = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True,
                          text=True)
    return proc.stdout if proc.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    files = args.files or sorted(subprocess.run(
        ["git", "diff", "--name-only", args.rev, "--", "tests"], cwd=ROOT, capture_output=True,
        text=True, check=True).stdout.split())
    total = [0] * 6
    print(f"{'file':60} tests  asserts  other  (at {args.rev} -> now)")
    for rel in (f for f in files if f.endswith(".py")):
        before = at(args.rev, rel)
        now = (ROOT / rel).read_text(encoding="utf-8") if (ROOT / rel).is_file() else None
        b = counts(before) if before is not None else (0, 0, 0)
        a = counts(now) if now is not None else (0, 0, 0)
        total = [t + x for t, x in zip(total, (*b, *a))]
        print(f"{rel:60} {b[0]:>3}->{a[0]:<3} {b[1]:>4}->{a[1]:<4} {b[2]:>3}->{a[2]:<3}")
    print(f"{'total':60} {total[0]:>3}->{total[3]:<3} {total[1]:>4}->{total[4]:<4} "
          f"{total[2]:>3}->{total[5]:<3}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
