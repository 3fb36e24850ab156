"""The partitioner project holds each kind's torch-free spec, never the engine's code (issue 57:
a kind's torch code had lived under ``partitioners/``, duck-typed against the stage toolkit).
An AST walk of every module under ``partitioners/`` refuses torch (outside the launcher's
process-group and device modules), the engine's flags, and the attributes of the engine's stage
toolkit (`plexus.engine.graph3d.StageGraph`) and serial model (`plexus.engine.serial`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import REPO

PARTITIONERS = REPO / "partitioners"
#: where the partitioner may touch torch: joining a torchrun/srun process group and choosing
#: devices (ARCHITECTURE.md: torch is imported only where such a group is joined), the threads
#: of a torch a rank has loaded already
TORCH_ALLOWED = {"plexus_partition/launch/env.py", "plexus_partition/launch/group.py",
                 "plexus_partition/jobs.py", "plexus_partition/cli.py"}
#: the engine's own flags (`plexus.engine.flags`)
ENGINE_FLAGS = {"--dtype", "--recompute", "--comm-dtype", "--sparse-comm"}
#: words the toolkit shares with the partitioner's own values (a plan's ``plan``, a config's
#: ``model``/``seed``/``dtype``, a shard's ``graph``/``num_nodes``/``input_ids``/``output_ids``,
#: a schedule's ``exchange``/``rate``/``edges``/``forward``/``loss``, a file's ``stat``):
#: refused only on ``g`` and ``m``, the toolkit's and the serial model's names in a kind's code
SHARED = {"dropout", "dtype", "edges", "exchange", "graph", "input_ids", "model", "num_nodes",
          "output_ids", "plan", "rate", "seed", "training", "params", "stats", "comm", "engine",
          "d_in", "d_out", "real", "forward", "loss", "accuracy", "stat"}
ENGINE_NAMES = {"g", "m"}


def _public_attributes(path: Path, class_name: str, data: bool = True) -> set[str]:
    """The public methods of ``class_name`` in ``path`` and (``data``) the attributes its
    methods set on ``self``."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    names |= {n.attr for n in ast.walk(cls) if data and isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self"
              and isinstance(n.ctx, ast.Store)}
    return {n for n in names if not n.startswith("_")}


#: the toolkit's methods and attributes; the serial model's methods (its data attributes are a
#: graph's words: features, labels, adj)
TOOLKIT = (_public_attributes(REPO / "plexus" / "engine" / "graph3d.py", "StageGraph")
           | _public_attributes(REPO / "plexus" / "engine" / "serial.py", "SerialModel",
                                data=False))


def offences(path: Path, rel: str) -> list[str]:
    """What in the module at ``path`` (``rel`` under partitioners/) belongs to the engine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if rel not in TORCH_ALLOWED:
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch"
                                                    for a in node.names):
                found.append(f"{where}: imports torch")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                found.append(f"{where}: imports from torch")
            elif isinstance(node, ast.Name) and node.id == "torch":
                found.append(f"{where}: torch")
        if isinstance(node, ast.Attribute) and node.attr in TOOLKIT:
            on_g = isinstance(node.value, ast.Name) and node.value.id in ENGINE_NAMES
            if on_g or node.attr not in SHARED:
                found.append(f"{where}: the engine's .{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in ENGINE_FLAGS:
                    found.append(f"{where}: the engine's flag {arg.value}")
    return found


def test_the_partitioner_holds_no_torch_code_engine_flag_or_toolkit_attribute():
    modules = sorted(PARTITIONERS.rglob("*.py"))
    assert len(modules) > 30 and len(TOOLKIT) > 25  # the walk sees the project and the toolkit
    found = [o for m in modules if "build" not in m.parts
             for o in offences(m, m.relative_to(PARTITIONERS).as_posix())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("code, what", [
    ("import torch\n", "imports torch"),
    ("def f():\n    from torch.nn.functional import batch_norm\n", "imports from torch"),
    ("def stage(self, g, H, step):\n    return g.conv(H, step, None)\n", "the engine's .conv"),
    ("def stage(self, g, H, step):\n    return g.plan\n", "the engine's .plan"),
    ("def serial(self, m, p, H, step):\n    return m.stat('mean', 0)\n", "the engine's .stat"),
    ("def stage(self, x, H, step):\n    return x.head_sums\n", "the engine's .head_sums"),
    ("def f(p):\n    p.add_argument('--comm-dtype')\n", "flag --comm-dtype"),
])
def test_the_walk_finds_each_kind_of_engine_code(tmp_path, code, what):
    """The checker itself: each kind of offence, written into a module, is reported."""
    module = tmp_path / "kind.py"
    module.write_text(code)
    assert any(what in o for o in offences(module, "plexus_partition/model/ops/kind.py"))


def test_plans_and_configs_may_share_the_toolkits_words(tmp_path):
    module = tmp_path / "ok.py"
    module.write_text("def f(z, cfg):\n    return z.plan, cfg.seed, cfg.model\n")
    assert offences(module, "plexus_partition/model/ok.py") == []
