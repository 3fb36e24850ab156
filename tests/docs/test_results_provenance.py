"""Every figure says how it was made (issue 48 item 8): each file of ``benchmarks/results/`` has
a provenance entry (``provenance.json``: date and commit) and a row in its README, and every
figure the top README or a docs/ page quotes beside a results file is found in that file.

The figure check is independent of the code that writes the README's headline block
(`benchmarks/headline.py`, which ``test_readme`` compares with the README): it reads the
committed files as plain text. A figure is a number followed by ×/x, %, GiB, MiB, s or ms; it
is found when a number in one of the files named in the same paragraph, list item or table row
rounds to it (0.97 matches 0.966). A figure after "about" is derived from quoted ones (the
headline's restatements), and is left out.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import REPO

RESULTS = REPO / "benchmarks" / "results"
PROVENANCE = json.loads((RESULTS / "provenance.json").read_text(encoding="utf-8"))
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?=\s?(?:×|x\b|%|GiB|MiB|s\b|ms\b))")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")


def result_entries() -> list[str]:
    return sorted(p.name for p in RESULTS.iterdir() if p.name not in ("README.md",
                                                                       "provenance.json"))


def test_every_results_file_has_a_provenance_entry():
    missing = [n for n in result_entries() if n not in PROVENANCE]
    assert not missing, f"benchmarks/results/provenance.json lacks {missing}"
    stale = [k for k in PROVENANCE if not k.startswith("_") and not (RESULTS / k).exists()]
    assert not stale, f"provenance.json names files that are not there: {stale}"
    for name, entry in PROVENANCE.items():
        if name.startswith("_"):
            continue
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), name
        assert re.fullmatch(r"[0-9a-f]{7,40}", entry["commit"]), name
        assert entry.get("with", name) in PROVENANCE, name


def test_the_provenance_commits_are_in_the_history():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    commits = {e["commit"] for k, e in PROVENANCE.items() if not k.startswith("_")}
    unknown = [c for c in sorted(commits)
               if subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=REPO,
                                 capture_output=True).returncode != 0]
    assert not unknown, f"provenance.json names commits git does not know: {unknown}"


def test_every_results_file_has_a_row_in_its_readme():
    rows = [line for line in (RESULTS / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]

    def named(name: str) -> bool:
        stem, dot, ext = name.partition(".")
        for row in rows:
            cells = row.split(" | ")[0]
            if f"`{name}`" in cells or f"`{name}/`" in cells:
                return True
            if dot and f"`{stem}." in cells and f"`.{ext}`" in cells:  # `x.txt`, `.json`
                return True
        return False

    missing = [n for n in result_entries() if not named(n)]
    assert not missing, f"benchmarks/results/README.md has no row for {missing}"


def units(text: str) -> list[str]:
    """Paragraphs, list items (with their continuation lines) and table rows."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        starts = line.startswith(("|", "- ", "#", "<!--", "```"))
        if not line.strip() or starts:
            if block:
                out.append(" ".join(block))
                block = []
            if starts and not line.startswith("|"):
                block = [line]
            elif line.strip():
                out.append(line)
            continue
        block.append(line.strip())
    return out


def _found(figure: str, numbers: set[str]) -> bool:
    decimals = len(figure.partition(".")[2])
    target = float(figure)
    for n in numbers:
        if len(n.partition(".")[2]) >= decimals and round(float(n), decimals) == target:
            return True
    return False


def unfound_figures(readme: str) -> list[str]:
    """Every figure of ``readme`` beside a named results file that none of those files holds."""
    names = {p.name for p in RESULTS.iterdir() if p.is_file()}
    missing = []
    for unit in units(readme):
        cited = [n for n in re.findall(r"`(?:benchmarks/results/)?([\w./-]+)`", unit)
                 if n in names and n.endswith((".txt", ".csv"))]
        if not cited:
            continue
        corpus = " ".join((RESULTS / n).read_text(encoding="utf-8", errors="replace")
                          for n in cited).replace(",", "")
        numbers = set(NUMBER.findall(corpus))
        for m in FIGURE.finditer(unit):
            if unit[max(0, m.start() - 6):m.start()] == "about ":
                continue
            if not _found(m.group(1), numbers):
                missing.append(f"{m.group(1)} (beside {', '.join(cited)}): "
                               f"...{unit[max(0, m.start() - 60):m.end() + 5]}")
    return missing


def test_every_figure_the_readme_quotes_is_in_the_results_file_it_names():
    readme = "\n\n".join(p.read_text(encoding="utf-8")
                         for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
                         if p.name != "design.md")  # the design document states no results
    assert sum(1 for u in units(readme) if "benchmarks/results" in u or ".txt`" in u) > 10
    assert unfound_figures(readme) == []


def test_a_retyped_figure_is_caught():
    """The check fails on a figure the named file does not hold (the oracle: a figure changed
    by hand in the README's text)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    line = next(x for x in readme.splitlines() if "`gat.txt`" in x and "×" in x)
    m = re.search(r"(\d+\.\d+)×", line)
    wrong = line.replace(m.group(0), "7.77×", 1)
    assert unfound_figures(readme.replace(line, wrong)) != []
    assert unfound_figures(line) == []
