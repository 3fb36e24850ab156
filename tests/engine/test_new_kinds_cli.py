"""Issue 57's kinds through the tools, on an R-MAT graph (its nodes' degrees vary: no probe
degree of the dry run's is the graph's): ``plexus-train --model K`` with dropout on gives the
same losses on 1x1x1 and 2x1x2 (within 1e-5), its ledger's bytes equal what the schedule
declares for the run, one training epoch's ledger bytes per axis (the difference of a 4- and a
2-epoch run) equal ``plexus-model``'s price of that grid (``--json``), and a
``plexus-partition --model K`` store trains as the ``--dataset`` run does.

The tools' mains are called in this process (their ranks are still processes of their own):
what is tested is each kind through the tools' code, and an interpreter started per tool cost
six starts of torch per kind (issue 58 item 5); the console scripts' processes are tested end to
end in tests/train/test_train_cli.py and tests/core/test_bounds.py."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from cli_helpers import tool_here

pytestmark = pytest.mark.slow

SPEC = "rmat:scale=7,features=12,classes=4"
KINDS = {"appnp": ("--layers", "2", "--hops", "3", "--teleport", "0.2"),
         "gcnii": ("--layers", "4", "--alpha", "0.2", "--theta", "0.7", "--no-shared-weights"),
         "gatv2": ("--layers", "2", "--hidden", "4", "--heads", "2", "--out-heads", "3",
                   "--attn-dropout", "0.3")}
# sparse exchanges off: their rows come from the graph, which the model prices per grid only
COMMON = ("--sparse-comm", "off", "--dropout", "0.5")


def _run(prog: str, *args: str) -> subprocess.CompletedProcess:
    done = tool_here(prog, *args, timeout=600)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _train(tmp_path, name: str, *args: str) -> tuple[list[float], dict]:
    log = tmp_path / f"{name}.json"
    _run("plexus-train", *args, "--threads", "1", "--quiet", "--eval-every", "0",
         "--log-json", str(log))
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r["loss"] for r in records if "loss" in r], records[-1]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_new_kind_trains_prices_and_stores(tmp_path, kind):
    model = ("--model", kind, *KINDS[kind], *COMMON)
    source = ("--dataset", SPEC, "--no-cache")
    one, _ = _train(tmp_path, "one", *source, "--grid", "1x1x1", "--epochs", "4", *model)
    four, summary = _train(tmp_path, "four", *source, "--grid", "2x1x2", "--epochs", "4",
                           *model)
    two, short = _train(tmp_path, "two", *source, "--grid", "2x1x2", "--epochs", "2", *model)
    assert len(one) == 4 and summary["model"]["kind"] == kind
    np.testing.assert_allclose(four, one, rtol=0, atol=1e-5)
    for s in (summary, short):  # the busiest rank's ledger against the schedule, per axis
        recorded, declared = s["comm_bytes_max_rank"], s["comm_bytes_declared_max_rank"]
        assert recorded == declared and sum(recorded.values()) > 0, (recorded, declared)
    epoch = {a: (summary["comm_bytes_max_rank"][a] - short["comm_bytes_max_rank"][a]) / 2
             for a in "xyz"}
    priced = json.loads(_run("plexus-model", "--dataset", SPEC, *model,
                             "--grid", "2x1x2", "--json").stdout)
    [config] = [c for w in priced["worlds"] for c in w["configs"] if c["grid"] == [2, 1, 2]]
    assert priced["spec"]["model"]["kind"] == kind
    assert {a: sum(v.values()) for a, v in config["comm"]["bytes"].items()} == epoch
    assert sum(epoch.values()) > 0

    store = tmp_path / "store"
    layers = KINDS[kind][KINDS[kind].index("--layers") + 1]
    _run("plexus-partition", "--dataset", SPEC, "--grid", "2x1x2",
         "--model", kind, "--layers", layers, "--out", str(store), "--threads", "1")
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["model"] == kind
    stored, _ = _train(tmp_path, "stored", "--shards", str(store), "--epochs", "4", *model)
    np.testing.assert_allclose(stored, four, rtol=0, atol=1e-5)
