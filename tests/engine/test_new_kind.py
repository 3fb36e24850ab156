"""A new layer kind needs its spec file, its layer file and their registry lines, nothing else
of Plexus (issue 47: "a new-kind commit touches its file, the registry and tests only"; issue 57:
the spec torch-free in the partitioner project, the torch code in the engine). The test makes
such a commit in a copy of the partitioner project and of the engine — PyG's GraphConv with
``aggr="mean"`` as a kind of its own, ``graphconvmean`` — and, with the datasets project of this
checkout unchanged, checks that the whole stack takes it from the declaration: the serial
model equals PyG's layer (logits and gradients, undirected and directed), ``plexus-train
--model graphconvmean`` trains with the same losses on 1x1x1 and 2x1x2 and the bytes its
ledger records equal what the schedule declares, a ``plexus-partition --model graphconvmean``
store trains as the ``--dataset`` run does, and ``plexus-model`` prices it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

# the new kind's files as a developer writes them: the closest kind's (GraphConv, aggr "add"),
# copied and changed to the mean: its spec, then its layer
SPEC_EDITS = (("class GraphConv(", "class GraphConvMean("),
              ('name = "graphconv"', 'name = "graphconvmean"'),
              ('root_weight_kind("graphconv", "sum",', 'root_weight_kind("graphconvmean", "mean",'),
              ("GraphConv(aggr='add'): sum", "GraphConv(aggr='mean'): mean"))
LAYER_EDITS = (("class GraphConv(", "class GraphConvMean("),
               ('name = "graphconv"', 'name = "graphconvmean"'))


def kind_file(template: str, edits: tuple[tuple[str, str], ...]) -> str:
    for old, new in edits:
        assert template.count(old) == 1, old
        template = template.replace(old, new)
    return template


def add_to_registry(folder, template: str, edits) -> None:
    """Write ``graphconvmean.py`` beside ``graphconv.py`` in ``folder`` and list it in the
    folder's registry (``__init__.py``): two changed lines, the import and ``MODULES``."""
    (folder / "graphconvmean.py").write_text(kind_file((folder / template).read_text(), edits))
    registry = (folder / "__init__.py").read_text()
    edited = registry.replace("graphconv, sage\n", "graphconv, graphconvmean, sage\n", 1)
    edited = edited.replace("graphconv, batchnorm)", "graphconv, graphconvmean, batchnorm)", 1)
    changed = [(a, b) for a, b in zip(registry.splitlines(), edited.splitlines()) if a != b]
    assert len(changed) == 2 and len(edited.splitlines()) == len(registry.splitlines())
    (folder / "__init__.py").write_text(edited)


# serial model vs PyG's GraphConv(aggr="mean") stack with the same weights
SERIAL_VS_PYG = '''
import numpy as np, torch, torch.nn.functional as F
from engine_checks import directed_toy_graph, toy_graph
from plexus.engine.config import ModelConfig
from plexus.engine.serial import SerialModel
from plexus.testing.pyg_reference import PygStack, copy_weights
for g in (toy_graph(), directed_toy_graph()):
    cfg = ModelConfig(2, 8, 0.0, kind="graphconvmean")
    serial = SerialModel(g, cfg, seed=3)
    stack = PygStack(cfg, g.num_features, g.num_classes)
    assert type(stack.convs[0]).__name__ == "GraphConv" and stack.convs[0].aggr == "mean"
    pairs = copy_weights(stack, serial)
    assert set(pairs) == set(serial.named_shards())
    coo = g.adj.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    x, mask = torch.from_numpy(g.features), torch.from_numpy(g.train_mask)
    ours, theirs = serial(), stack(x, edge_index)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    serial.loss(ours).backward()
    F.cross_entropy(theirs[mask], torch.from_numpy(g.labels)[mask]).backward()
    for s, target in pairs.items():
        want = target.grad.T if s[0] == "W" else target.grad.reshape(serial.params[s].grad.shape)
        torch.testing.assert_close(serial.params[s].grad, want, rtol=1e-5, atol=1e-5)
print("serial equals PyG")
'''
SPEC = "rmat:scale=7,features=12,classes=4"


def test_a_new_kind_needs_its_file_and_one_registry_line(tmp_path):
    part, engine = tmp_path / "partitioners", tmp_path / "engine"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(REPO / "partitioners", part, ignore=skip)
    shutil.copytree(REPO / "plexus", engine / "plexus", ignore=skip)
    # the commit: two new files (the spec, the layer), two changed lines of each registry
    add_to_registry(part / "plexus_partition" / "model" / "ops", "graphconv.py", SPEC_EDITS)
    add_to_registry(engine / "plexus" / "engine" / "kinds", "graphconv.py", LAYER_EDITS)

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                             "OMP_NUM_THREADS")}
    # the copies first: this checkout's datasets and tests after them
    env["PYTHONPATH"] = os.pathsep.join(map(str, (part, engine, REPO / "tests", REPO,
                                                  REPO / "datasets")))

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600)
        assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    assert "serial equals PyG" in run("-c", SERIAL_VS_PYG).stdout

    def train(name: str, *source: str) -> tuple[list[float], dict]:
        log = tmp_path / f"{name}.json"
        run("-m", "plexus.train", *source, "--epochs", "4", "--threads", "1", "--quiet",
            "--log-json", str(log))
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [r["loss"] for r in records if "loss" in r], records[-1]  # epochs, the summary

    one, _ = train("one", "--dataset", SPEC, "--grid", "1x1x1", "--model", "graphconvmean",
                   "--no-cache")
    four, summary = train("four", "--dataset", SPEC, "--grid", "2x1x2", "--model",
                          "graphconvmean", "--no-cache")
    assert len(one) == 4 and summary["model"]["kind"] == "graphconvmean"
    np.testing.assert_allclose(four, one, rtol=0, atol=1e-5)
    # per axis: what the ledger recorded on the busiest rank, what the schedule declares
    recorded, declared = summary["comm_bytes_max_rank"], summary["comm_bytes_declared_max_rank"]
    assert recorded == declared and sum(recorded.values()) > 0, (recorded, declared)

    store = tmp_path / "store"
    run("-m", "plexus_partition.cli", "--dataset", SPEC, "--grid", "2x1x2", "--model",
        "graphconvmean", "--layers", "2", "--out", str(store), "--threads", "1")
    manifest = json.loads((store / "manifest.json").read_text())
    assert (manifest["model"], manifest["gnn_layers"], manifest["aggregation"]) == \
        ("graphconvmean", 2, "mean")
    stored, _ = train("stored", "--shards", str(store))
    np.testing.assert_allclose(stored, four, rtol=0, atol=1e-5)

    priced = run("-m", "plexus.perfmodel", "--dataset", SPEC, "--model", "graphconvmean",
                 "--grid", "2x1x2").stdout
    assert "graphconvmean" in priced, priced[-1000:]
