"""benchmarks/mutants.py stays current (issue 58 item 4): every mutant is plantable in the code as it
is, names a killing test that exists, and a stale one is refused."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

from helpers import REPO

MUTANTS = runpy.run_path(str(REPO / "benchmarks" / "mutants.py"))


def test_every_mutant_is_plantable_at_head_and_names_a_test_that_exists():
    assert MUTANTS["stale"]() == []
    assert MUTANTS["stale"]([(*m[:4], "") for m in MUTANTS["EQUIVALENT"]]) == []
    names = [m[0] for m in MUTANTS["MUTANTS"]] + [m[0] for m in MUTANTS["EQUIVALENT"]]
    assert len(names) == len(set(names)), "mutant names are used once"
    for name, _, _, _, test in MUTANTS["MUTANTS"]:
        path, _, function = test.partition("::")
        function = function.split("[", 1)[0]  # one case of a parametrized test: its function
        source = (REPO / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(function)}\(", source, re.M), (name, test)


def test_a_stale_mutant_is_refused_naming_it(tmp_path: Path):
    (tmp_path / "m.py").write_text("x = 1\n")
    stale = MUTANTS["stale"]([("gone", "m.py", "x = 2", "x = 3", ""),
                              ("moved", "nowhere.py", "x = 1", "x = 3", ""),
                              ("nothing", "m.py", "x = 1", "x = 1", ""),
                              ("fine", "m.py", "x = 1", "x = 0", "")], root=tmp_path)
    assert stale == ["gone: its text is not in m.py", "moved: nowhere.py does not exist",
                     "nothing: plants nothing"]
