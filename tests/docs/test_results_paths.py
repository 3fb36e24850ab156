"""Committed results name no absolute path of the machine that made them (issue 58 item 6): a
folder of the measuring machine (``/work/...``, ``/tmp/...``, ``/home/<user>/...``, ``/root/...``,
``/Users/...``, ``/mnt/...``, ``/scratch/...``) means nothing elsewhere and tells who ran it
where; a results file writes such a place as a variable (``$WORK/``, ``$TMPDIR/``, ``$HOME/``) or
relative to the checkout. Every text file under ``benchmarks/results`` is read."""

from __future__ import annotations

import re

from helpers import REPO

RESULTS = REPO / "benchmarks" / "results"
TEXT = (".txt", ".json", ".csv", ".md", ".tsv", ".log", ".jsonl")
# an absolute path of one of the machine's own folders, not a part of a longer path or URL
ABSOLUTE = re.compile(r"(?<![\w$.~/-])/(?:work|tmp|home|root|Users|mnt|scratch|private|var/tmp)/")


def _absolute_paths(text: str) -> list[str]:
    return [text[max(0, m.start() - 30):m.end() + 30].replace("\n", " ")
            for m in ABSOLUTE.finditer(text)]


def test_no_results_file_names_an_absolute_path_of_its_machine():
    files = [p for p in sorted(RESULTS.rglob("*")) if p.is_file() and p.suffix in TEXT]
    assert len(files) > 30, "the results' text files are read"
    found = [f"{p.relative_to(REPO)}: ...{hit}..." for p in files
             for hit in _absolute_paths(p.read_text(encoding="utf-8", errors="replace"))]
    assert not found, "absolute paths of the measuring machine:\n" + "\n".join(found[:20])


def test_the_scan_sees_each_kind_of_path_and_leaves_the_rest():
    for text in ("out /work/meas/x.json", "at /tmp/plexus-1/cache", "'/root/out'",
                 "(/home/alice/runs)", '"/Users/bob/x"', "--out /mnt/data/r", "\n/scratch/j/1"):
        assert _absolute_paths(text), text
    for text in ("$WORK/meas/x.json", "$TMPDIR/plexus-1/cache", "benchmarks/results/tmp/x",
                 "https://example.org/tmp/x", "a/work/b", "~/work/x", "4/2/tmp"):
        assert not _absolute_paths(text), text
