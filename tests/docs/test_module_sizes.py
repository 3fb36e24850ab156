"""No product module (the three projects' modules) over 450 lines without a stated reason: a module
that big either holds more than one job (split it by job) or says, in its module docstring, on a
line starting ``Kept over 450 lines:``, why it is kept whole (issue 47: small modules with one
job)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO, product_modules

LIMIT = 450
MARKER = "Kept over 450 lines:"


def unexplained(source: str, limit: int = LIMIT) -> str | None:
    """Why ``source`` (a module's text) breaks the rule, None where it keeps it: at most
    ``limit`` lines, or a module docstring with a line starting `MARKER` and a reason after it."""
    lines = len(source.splitlines())
    if lines <= limit:
        return None
    doc = ast.get_docstring(ast.parse(source)) or ""
    for line in doc.splitlines():
        if line.startswith(MARKER) and line[len(MARKER):].strip():
            return None
    return f"{lines} lines and no line starting {MARKER!r} with a reason in its docstring"


def test_every_big_module_states_why_it_is_kept_whole():
    bad = {str(p.relative_to(REPO)): why for p in product_modules()
           if (why := unexplained(p.read_text(encoding="utf-8"))) is not None}
    assert not bad, ("split these by job, or say why not on a line starting "
                     f"{MARKER!r} in the module docstring: {bad}")


def test_the_rule_finds_a_big_module_and_accepts_a_reason():
    body = "x = 1\n" * 460
    assert unexplained(body) is not None  # no docstring at all
    assert unexplained('"""Does one thing."""\n' + body) is not None
    assert unexplained(f'"""Does one thing.\n\n{MARKER}\n"""\n' + body) is not None  # no reason
    assert unexplained(f'"""Does one thing.\n\n{MARKER} one owner.\n"""\n' + body) is None
    assert unexplained('"""Small."""\n' + "x = 1\n" * 449) is None  # 450 lines: within
    assert unexplained('"""Small."""\n' + "x = 1\n" * 450) is not None  # 451: over

