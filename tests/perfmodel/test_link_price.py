"""``plexus-model --task link``: a link-prediction step priced on every grid (the encoder
without the node loss, then the pair operator: `plexus.perfmodel.linkcost.estimate_link`, whose
bytes the link worlds hold to the engine's ledger collective by collective, tests/link_checks.py
``check_step_bytes``). Here the command's wiring: its header, its JSON, the batches a memory
limit cuts, and its refusals."""

from __future__ import annotations

import json

import pytest

from helpers import assert_one_line
from plexus.perfmodel.cli import model_main as main

GRAPH = ["--nodes", "1000", "--nnz", "11000", "--features", "32", "--classes", "4",
         "--hidden", "16", "--world-size", "4"]


def _configs(capsys, *args: str) -> dict[tuple, dict]:
    assert main([*GRAPH, "--json", "--top", "0", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    return doc, {tuple(c["grid"]): c for c in doc["configs"]}


def test_the_link_task_prices_the_pairs_beside_the_encoder(capsys):
    node_doc, node = _configs(capsys)
    link_doc, link = _configs(capsys, "--task", "link", "--decoder", "dot", "--pairs", "500")
    assert (node_doc["task"], link_doc["task"]) == ("node", "link")
    assert set(node) == set(link) and len(link) == 6  # the factorizations of 4
    # a grid with more than one rank over the embedding's rows sends the pairs' ends: more
    # bytes than the node step, whose loss sums are only a few elements
    assert any(link[g]["comm_bytes"] > node[g]["comm_bytes"] for g in link)
    assert link[(1, 1, 4)]["comm"] != node[(1, 1, 4)]["comm"]
    assert main([*GRAPH, "--task", "link", "--pairs", "500"]) == 0
    out = capsys.readouterr().out
    assert "task: link prediction, one training step of 500 positive pairs and as many " \
           "negatives, mlp decoder (3 layers of 16) on the encoder's 16 output columns" in out


def test_a_memory_limit_cuts_the_pairs_into_batches(capsys):
    """The engine's batches take an eighth of the free memory: a limit bounds the pairs'
    buffers, so a step of a million pairs needs less memory under one than without."""
    _, free = _configs(capsys, "--task", "link", "--pairs", "1000000")
    _, limited = _configs(capsys, "--task", "link", "--pairs", "1000000", "--memory-limit", "1")
    for grid, c in free.items():
        assert limited[grid]["memory_bytes"] < c["memory_bytes"], grid


@pytest.mark.parametrize("args,words", [
    (("--decoder", "dot"), "--decoder is an option of --task link"),
    (("--pairs", "10"), "--pairs is an option of --task link"),
    (("--task", "link", "--pairs", "0"), "--pairs must be >= 1"),
])
def test_link_options_refused_in_one_line(capsys, args, words):
    assert main([*GRAPH, *args]) == 2
    assert_one_line(capsys.readouterr().err, words, prog="plexus-model")
