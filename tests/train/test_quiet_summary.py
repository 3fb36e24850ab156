"""plexus-train's summary (issue 59 items 3 and 6): its first lines by default (the results, the
wall time and what it counts, memory, the bytes in all), the timers and the per-axis and per-collective tables with
--verbose, all of them always in the JSON log; the first line and the summary name every
precision in force."""

from __future__ import annotations

import json

from plexus.train import main

RUN = ["--grid", "1x1x1", "--epochs", "2", "--no-cache", "--comm-dtype", "bf16"]
DEFAULT_LINES = ("summary: ", "  best validation: ", "  final epoch ", "  wall time: ",
                 "    (start-up: from ", "  memory per rank: ", "  communication: ",
                 "  (--verbose: ")


def run(tmp_path, capsys, *extra: str) -> tuple[list[str], dict]:
    log = tmp_path / f"run{len(extra)}.json"
    assert main([*RUN, "--log-json", str(log), *extra]) == 0
    out = capsys.readouterr().out.splitlines()
    summary = json.loads(log.read_text().splitlines()[-1])
    return out, summary


def summary_block(out: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(out) if line.startswith("summary: "))
    return out[start:]


def test_the_default_summary_is_its_first_lines_and_verbose_adds_the_tables(tmp_path, capsys):
    out, summary = run(tmp_path, capsys)
    block = summary_block(out)
    assert [next(p for p in DEFAULT_LINES if line.startswith(p)) for line in block] == \
        list(DEFAULT_LINES), block
    # every precision in force, on the run's first line and the summary's
    assert out[0].startswith("plexus-train: ") and out[0].endswith(
        ", precision fp32, messages bf16 (--comm-dtype)"), out[0]
    assert block[0].endswith(", precision fp32, messages bf16 (--comm-dtype)"), block[0]
    # the JSON log keeps what the console leaves out
    assert summary["timers"] and set(summary["comm_bytes"]) == {"x", "y", "z"}
    assert summary["comm_collectives"]["collectives"] is not None
    assert summary["dtype"] == "fp32" and summary["comm_dtype"] == "bf16"

    verbose, _ = run(tmp_path, capsys, "--verbose")
    full = "\n".join(summary_block(verbose))
    for name in summary["timers"]:  # each timer of the JSON log, with its max and mean
        assert any(line.strip().startswith(name + " ") and "max/mean" in line
                   for line in summary_block(verbose)), name
    assert "  communication, all ranks: x " in full
    assert "--verbose:" not in full


def test_a_bf16_run_says_so_first_and_last(tmp_path, capsys):
    log = tmp_path / "bf16.json"
    assert main(["--grid", "1x1x1", "--epochs", "1", "--no-cache", "--dtype", "bf16",
                 "--log-json", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(", precision bf16 (--dtype)"), out[0]
    assert summary_block(out)[0].endswith(", precision bf16 (--dtype)")
    assert json.loads(log.read_text().splitlines()[-1])["dtype"] == "bf16"


def test_help_names_every_kind(capsys):
    """--help's first line lists every layer kind --model takes, not three of them."""
    import pytest

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    described = text[text.index("Train a GNN"):text.index("with 3D tensor")]
    for kind, layer in (("gcn", "GCNConv"), ("sage", "SAGEConv"), ("gin", "GINConv"),
                        ("mlp", "Linear"), ("gat", "GATConv"), ("graphconv", "GraphConv")):
        assert f"{kind}: {layer}" in described, described

