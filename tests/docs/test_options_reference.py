"""docs/options.md, the options reference, is what every tool's ``--help`` says: the page is
docs/options.py's output from the parsers (so it is never stale), and, read back as a table, it
lists exactly the options each tool's help text lists, with the same words for each (the oracle:
argparse's own ``format_help``, the text ``--help`` prints, parsed here independently of the
generator)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from helpers import REPO

PAGE = REPO / "docs" / "options.md"


def _generator():
    spec = importlib.util.spec_from_file_location("docs_options", REPO / "docs" / "options.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def page_sections() -> dict[str, list[tuple[str, str]]]:
    """section title -> [(option, meaning)] read back from the Markdown page."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:], [])
        m = re.fullmatch(r"\| `(.+?)` \| .*? \| (.*) \|", line)
        if m and current is not None:
            current.append((m[1].replace("\\|", "|"), m[2].replace("\\|", "|")))
    return sections


def help_options(text: str) -> list[str]:
    """The options (and positional arguments) a ``--help`` text lists, as ``  --grid
    XxYxZ|auto   help...`` lines start."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^  (\S.*?)(?:  |$)", line)
        if m:
            found.append(m[1])
    return found


def parsers() -> dict[str, object]:
    """section title -> the parser whose --help it documents."""
    out = {}
    for tool, target in GEN.TOOLS:
        parser = GEN.parser_of(target)
        subs = GEN.subcommands(parser)
        out.update({f"{tool} {n}": s for n, s in subs} if subs else {tool: parser})
    return out


def test_the_page_is_the_generators_output():
    assert GEN.main(["--check"]) == 0, "run ./run python docs/options.py --write"


def test_the_page_does_not_depend_on_where_it_is_generated(tmp_path, monkeypatch):
    # CI generates in another clone with another interpreter: a default taken from the
    # current folder or sys.executable would make the committed page stale there
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.executable", str(tmp_path / "elsewhere" / "python"))
    assert GEN.generate() == PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize("title", [t for t, _ in GEN.TOOLS])
def test_every_tool_has_its_section(title):
    assert any(s == title or s.startswith(title + " ") for s in page_sections())


def test_the_page_lists_what_each_help_lists():
    sections = page_sections()
    tools = parsers()
    assert set(sections) - {"Options of the command-line tools"} == set(tools)
    for title, parser in tools.items():
        text = parser.format_help()  # what `TOOL --help` prints
        flat = "".join(text.split())  # argparse wraps lines (at hyphens too)
        listed = [o for o, _ in sections[title]]
        in_help = [o for o in help_options(text) if not o.startswith("-h, --help")]
        assert listed == in_help, title
        for option, meaning in sections[title]:
            assert "".join(meaning.split()) in flat, f"{title} {option}: {meaning[:80]}"
    # the reference is whole: plexus-train's options that users ask about most are there
    train = dict(sections["plexus-train"])
    assert {"--comm-dtype {fp32,bf16,fp16}", "--save-predictions DIR", "--export FILE.pt"} \
        <= set(train), sorted(train)
