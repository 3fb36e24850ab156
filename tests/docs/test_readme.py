"""The commands of the README and of the docs/ pages work as written, and the README's figures
are the committed results'.

Every command of the fenced ``sh``/``bash`` blocks of README.md and docs/*.md is either run here,
exactly as
written, by ``bash -c`` in a fresh environment (no ``.venv/bin`` on PATH, no launcher variables)
from a copy of the repository root, or listed in ``EXPENSIVE`` with the reason it is not; a new
command that is in neither list fails `test_every_readme_command_is_classified`, so a README
command can never silently stop working. The copy of the root is a directory of symbolic links
to the repository's entries (``run``, ``pyproject.toml``, ``.venv``, the packages): the commands
run there, and what they write (``ck-requeue/``, ``shards/``, ...) lands there, not in the
checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
README = REPO / "README.md"
#: the pages whose commands are checked: the README (the front door) and the reference in docs/
#: it links (docs/design.md, the design document, is not a page of commands)
PAGES = [README, *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "design.md")]
TRAINING = REPO / "docs" / "training.md"

# Run in this order (later ones use what earlier ones wrote), each within its time limit.
CHEAP = [
    "./run plexus-partition --help",
    "./run plexus-partition --dataset cora --grid 2x1x2 --layers 2 --stats-only",
    "./run plexus-partition --dataset cora --grid 1x1x2 --layers 2 --perm double --out "
    "shards/cora-1x1x2",
    "./run train --shards shards/cora-1x1x2 --epochs 20",
    "./run plexus-partition --dataset rmat:scale=14 --grid 2x2x1 --layers 2 --jobs 2 --out "
    "shards/rmat14",
    "./run plexus-model --help",
    "./run plexus-model --world-size 8 --dataset cora",
    "./run plexus-model --world-size 8 --dataset cora --model gat --heads 8 --hidden 8 --dtype bf16",
    "./run train --grid 1x1x1 --epochs 5 --checkpoint ck-requeue/ --resume auto",
    "./run train --grid 1x1x1 --epochs 10 --checkpoint ck-requeue/ --resume auto",
    "./run train --grid 1x1x1 --epochs 5 --log-csv epochs.csv --tensorboard tb/",
    "./run plexus-bench calibrate --out cal.json --quick",
    "./run plexus-model --world-size 4 --dataset cora --calibration cal.json --ranks-per-host 4",
    "./run plexus-model --dataset ogbn-papers100M --gpus 64,256,1024 --gpus-per-node 4",
    "./run plexus-model --recipe ogbn-papers100M-gcn --gpus 256 --profile dgx-h100 --dtype bf16",
]

# Not run here, and why.
EXPENSIVE = {
    "./run python -m plexus_datasets.proteins_standin proteins-standin --nodes 2000":
        "tests/datasets/test_proteins.py writes stand-ins with the same function and checks their "
        "layout",
    "./run train --dataset ogbn-proteins --root proteins-standin --recipe ogbn-proteins-gcn "
    "--grid 1x1x2 --epochs 10": "about 25 s; tests/datasets/test_proteins.py trains plexus-train "
                                "on a stand-in through to OGB's Evaluator",
    "./run test": "the whole suite, this test among it",
    './run test -m "not slow"': "the suite's fast subset, this test's cheap checks among it",
    "./run train --grid 2x2x2": "8 ranks x 200 epochs; tests/train/test_train_cli.py runs this job",
    "./run train --grid 1x1x1": "200 epochs (about a minute on 2 cores); the few-epoch 1x1x1 "
                                "commands run here",
    "./run train --grid 2x2x4 --dataset ogbn-arxiv --root ~/data --layers 3 --hidden 128":
        "needs the ogbn-arxiv files and 16 ranks",
    "./run train --grid auto --world-size 8 --dataset rmat:scale=16":
        "8 ranks on a 65k-node graph; --grid auto is tested on Cora in tests/train/test_ux.py",
    "./run train --grid 2x2x2 --checkpoint ck/ --log-json run.json": "8 ranks x 200 epochs",
    "./run train --grid 1x2x2 --checkpoint ck/ --resume --epochs 400":
        "needs the previous line's checkpoint; 4 ranks x 200 more epochs",
    "./run torchrun --nproc-per-node 4 -m plexus.train --grid 1x2x2 --dataset cora":
        "4 ranks x 200 epochs; tests/train/test_train_cli.py runs torchrun",
    './run torchrun --nnodes 4 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint '
    '"$HEAD:29500" -m plexus.train --grid 4x2x2 --dataset ogbn-products --root /data/ogb':
        "4 nodes and the ogbn-products files",
    "(sbatch script)": "needs SLURM and 4 GPU nodes",
    './run torchrun --nnodes 8 --nproc-per-node 16 --rdzv-backend c10d --rdzv-endpoint '
    '"$HEAD:29500" -m plexus_partition.cli --dataset ogbn-papers100M --root /shared/ogb '
    '--grid 8x8x4 --layers 3 --out /shared/stores/papers-8x8x4':
        "128 processes on 8 nodes and the ogbn-papers100M files; "
        "tests/partitioners/test_stream_partition.py runs two launcher ranks",
    "./run plexus-model --world-size 64 --dataset ogbn-products --root /data/ogb --layers 3 "
    "--hidden 128": "needs the ogbn-products files",
    "./run plexus-sweep --dataset rmat:scale=15,edge_factor=16,features=128,classes=16 "
    "--world-sizes 1,2,4 --grids all,auto --epochs 6 --repeats 2 --hidden 128 --out study/":
        "a 24-run sweep; tests/studies/test_studies.py runs a small one",
    "./run plexus-sweep --dataset rmat:scale=15,edge_factor=16,features=128,classes=16 "
    "--world-sizes 1,2,4 --grids auto --weak --epochs 6 --repeats 2 --hidden 128 --out study/":
        "a weak-scaling sweep; tests/studies/test_studies.py runs one under torchrun",
    "./run plexus-report study/": "needs a sweep's logs; tests/studies/test_studies.py reports one",
    "./run plexus-sweep --dataset ogbn-products --root /data/ogb --world-sizes 4,8,16,32 "
    "--grids auto,all --epochs 20 --repeats 3 --layers 3 --hidden 128 --out study/ --launcher "
    "slurm --tasks-per-node 4 --gpus-per-node 4 --time 00:30:00 --partition gpu --setup "
    "'module load cuda'": "needs the ogbn-products files (it only writes SLURM scripts); "
                          "tests/studies/test_studies.py writes and checks such scripts",
    "bash study/slurm/submit.sh": "needs SLURM (sbatch)",
    "./run plexus-bench check --world-size 2":
        "two worlds of the engine's checks; tests/bench/test_bench_check.py runs this very check",
    "./run python docs/api.py api-docs/":
        "the API reference; tests/docs/test_apidocs.py runs this very command into a temporary "
        "folder",
}

# "Install into your own environment": commands for a user's own environment, not ./run's (so
# they are the README's only bare commands); not run here: they install into the environment
# that runs the tests.
OWN_ENVIRONMENT = {
    "pip install torch --index-url https://download.pytorch.org/whl/cpu":
        "downloads torch from pytorch.org (no internet here)",
    "pip install ./datasets ./partitioners .": "would install into the test environment",
    'pip install ./datasets ./partitioners ".[test]"': "would install into the test environment",
    "plexus-train --grid 1x1x1 --epochs 2": "needs the installed package's scripts on PATH; "
                                            "tests/docs/test_wheel.py runs it from a wheel "
                                            "installed in a fresh virtual environment",
}
EXPENSIVE.update(OWN_ENVIRONMENT)


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(command as written, its key: without the trailing comment, spaces collapsed) of every
    fenced sh/bash block; a block that starts with ``#!`` is one script, "(sbatch script)"."""
    out = []
    for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        if block.startswith("#!"):
            out.append((block, "(sbatch script)"))
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key = " ".join(re.split(r"\s+#\s", line, maxsplit=1)[0].split())
            out.append((line, key))
    return out


COMMANDS = [c for page in PAGES for c in readme_commands(page.read_text(encoding="utf-8"))]


def test_every_readme_command_is_classified():
    keys = [key for _, key in COMMANDS]
    unknown = [k for k in keys if k not in CHEAP and k not in EXPENSIVE]
    assert not unknown, ("README commands neither run by this test nor listed with a reason: "
                         f"{unknown}")
    gone = [k for k in [*CHEAP, *EXPENSIVE] if k not in keys]
    assert not gone, f"listed here but no longer in README.md or docs/: {gone}"
    # the parser sees every kind: plain lines, a continued line, the batch script
    assert "(sbatch script)" in keys and any("--rdzv-endpoint" in k for k in keys)


def test_the_readme_is_a_front_door():
    """At most 300 lines (issue 59: it was 1,041), and it links every docs/ page."""
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= 300, text.count("\n")
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in text, f"the README does not link docs/{page.name}"


def test_no_bare_console_script_in_the_readme():
    # a bare plexus-train is "command not found" in a fresh shell: every command goes via ./run
    for line, key in COMMANDS:
        if key != "(sbatch script)" and not key.startswith("bash ") \
                and key not in OWN_ENVIRONMENT:  # a generated script; a user's own environment
            assert key.startswith("./run "), line


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A stand-in for the repository root: links to each of its entries, nothing else."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv: ./run would set up a new environment")
    root = tmp_path_factory.mktemp("readme-root")
    outputs = {"ck", "ck-requeue", "shards", "tb", "epochs.csv", "run.json", "cal.json"}
    for entry in REPO.iterdir():
        if entry.name != ".git" and entry.name not in outputs:  # a user's earlier outputs
            (root / entry.name).symlink_to(entry)
    return root


def fresh_env() -> dict[str, str]:
    """What a new login shell has: no venv on PATH, no launcher or Python variables."""
    keep = {k: os.environ[k] for k in ("HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TERM")
            if k in os.environ}
    python_dir = str(Path(shutil.which("python3") or sys.executable).parent)
    path = [p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p)]
    if str(REPO / ".venv") not in python_dir and python_dir not in path:
        path.append(python_dir)
    return {**keep, "PATH": os.pathsep.join(path)}


@pytest.mark.slow
@pytest.mark.parametrize("command", CHEAP)
def test_readme_command_runs_as_written(command, sandbox):
    written = next(line for line, key in COMMANDS if key == command)
    proc = subprocess.run(["bash", "-c", written], cwd=sandbox, env=fresh_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{written}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "error" not in proc.stderr.lower(), proc.stderr
    if command.endswith("--help"):
        assert proc.stdout.startswith("usage: ")
    if "--resume auto" in command:  # the first starts fresh, the second resumes
        assert ("no checkpoint at" in proc.stdout) == ("--epochs 5 " in command), proc.stdout
    if "--tensorboard" in command:
        assert (sandbox / "epochs.csv").read_text().count("\n") == 1 + 5
        assert list((sandbox / "tb").glob("events.out.tfevents.*")) or \
            "tensorboard package is not installed" in proc.stderr


@pytest.mark.slow
def test_bare_console_script_needs_the_venv_on_path(sandbox):
    # what the README warns about: without ./run (or an activated venv) the name is unknown
    if shutil.which("plexus-train", path=fresh_env()["PATH"]):
        pytest.skip("a plexus-train is installed outside the venv on this machine")
    proc = subprocess.run(["bash", "-c", "plexus-train --help"], cwd=sandbox, env=fresh_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127 and "command not found" in proc.stderr
    proc = subprocess.run(["bash", "-c", "source .venv/bin/activate && plexus-train --help"],
                          cwd=sandbox, env=fresh_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: plexus-train")


# ---- figures ------------------------------------------------------------------------------
@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_readme_figures_are_the_committed_results():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "headline.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    block = subprocess.run([sys.executable, str(REPO / "benchmarks" / "headline.py")],
                           capture_output=True, text=True, timeout=120).stdout
    ratio = re.search(r"^plexus-torch-agg: ([\d.]+) x PyG adj_t wall",
                      (REPO / "benchmarks/results/baseline.txt").read_text(), re.MULTILINE)
    assert ratio and f"epoch time: {ratio[1]}× PyG's" in block
    assert re.search(r"baseline.txt`, \d{4}-\d\d-\d\d, commit [0-9a-f]{7}", block)
    text = README.read_text(encoding="utf-8")
    assert block.strip() in text
    # no figure "N.NN× PyG" outside the generated block
    outside = text.replace(block.strip(), "")
    assert not re.search(r"[\d.]+\s*×\s*PyG", outside), "a PyG ratio typed outside the block"
    # the results page quotes the same ratio and the same commit
    results = (REPO / "benchmarks/results/README.md").read_text(encoding="utf-8")
    assert f"= {ratio[1]} × PyG" in results
    assert re.search(r"commit (\w+)", block)[1] in results


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_headline_check_fails_when_the_readme_differs(tmp_path):
    # the check can fail: a copy of the script beside a README whose figure was retyped
    script = (REPO / "benchmarks" / "headline.py").read_text(encoding="utf-8")
    fake_repo = tmp_path / "repo"
    (fake_repo / "benchmarks").mkdir(parents=True)
    (fake_repo / "benchmarks" / "headline.py").write_text(script)
    (fake_repo / "benchmarks" / "results").symlink_to(REPO / "benchmarks" / "results")
    (fake_repo / "README.md").write_text(README.read_text().replace("0.75× PyG", "0.70× PyG"))
    proc = subprocess.run([sys.executable, str(fake_repo / "benchmarks" / "headline.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "differs from benchmarks/results" in proc.stderr


def test_benchmark_readme_commands_name_real_scripts_and_options():
    # too long to run here (minutes each; tests/bench/test_benchmarks_smoke.py runs every script
    # with --smoke): check that each script exists and takes every option the command gives it
    text = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    lines = [line for _, line in readme_commands(text)]
    assert len(lines) >= 5
    for line in lines:
        words = line.split()
        assert words[:2] == ["./run", "python"], line
        script = REPO / words[2]
        assert script.is_file(), line
        source = script.read_text(encoding="utf-8") + (
            REPO / "benchmarks" / "common.py").read_text(encoding="utf-8")
        for flag in (w for w in words[3:] if w.startswith("--")):
            assert f'"{flag}"' in source, f"{line}: {script.name} has no {flag}"


def test_readme_grid_auto_sample_is_what_the_command_prints(capsys):
    """docs/training.md quotes `--grid auto`'s line for Cora on 2 ranks: it must be the line
    printed (the model's predictions are deterministic)."""
    from plexus.train.cli import build_parser
    from cli_helpers import launched

    text = " ".join(TRAINING.read_text(encoding="utf-8").split())
    quoted = re.search(r"`\./run train --grid auto --world-size 2` prints `(plexus-train: --grid "
                       r"auto: .*?)`", text)
    assert quoted, "docs/training.md's --grid auto sample is gone"
    launched(build_parser().parse_args(["--grid", "auto", "--world-size", "2"]))
    assert capsys.readouterr().out.strip() == quoted.group(1)


def test_readme_lists_every_console_script():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = {name for project in ("pyproject.toml", "datasets/pyproject.toml",
                                    "partitioners/pyproject.toml")
               for name in tomllib.loads((REPO / project).read_text())["project"].get("scripts", {})}
    text = " ".join(README.read_text(encoding="utf-8").split())
    listed = re.search(r"The console scripts \((.*?)\) live in", text)
    assert listed and set(re.findall(r"`([\w-]+)`", listed.group(1))) == set(scripts)


# ---- the "From PyG" page, run as written -----------------------------------------------------
_FAKE_PLANETOID = '''\
import numpy as np, torch, torch_geometric.datasets
from torch_geometric.data import Data
from plexus_datasets import load_dataset


def _cora_as_pyg(root, name):  # no download here: the embedded Cora, as PyG's Planetoid gives it
    assert name == "Cora"
    g = load_dataset("cora")
    adj = g.adj.tocoo()
    mask = lambda m: torch.from_numpy(np.asarray(m, dtype=bool))
    return [Data(x=torch.from_numpy(g.features), y=torch.from_numpy(g.labels),
                 edge_index=torch.from_numpy(np.vstack([adj.row, adj.col]).astype(np.int64)),
                 train_mask=mask(g.train_mask), val_mask=mask(g.val_mask),
                 test_mask=mask(g.test_mask))]


torch_geometric.datasets.Planetoid = _cora_as_pyg
'''


@pytest.mark.slow
def test_the_from_pyg_example_trains_cora_as_written(tmp_path):
    """The README's "From PyG" script, as written, with PyG's Planetoid answering from the
    embedded Cora (no download here): Kipf & Welling's accuracy (the oracle: their paper's
    ~0.81) at the best validation epoch on a 4-rank grid, and a weights file PyG loads."""
    pytest.importorskip("torch_geometric")
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## From PyG\n.*?```python\n(.*?)```", text, re.S)
    assert block and "plexus.launch(" in block.group(1)
    script = tmp_path / "from_pyg.py"
    script.write_text(_FAKE_PLANETOID + block.group(1), encoding="utf-8")
    from cli_helpers import cli_env  # noqa: PLC0415

    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = re.search(r"test_acc=([\d.]+)", proc.stdout)
    assert best and float(best[1]) >= 0.78, proc.stdout
    import plexus  # noqa: PLC0415
    import torch  # noqa: PLC0415

    assert isinstance(plexus.load_pyg(tmp_path / "gcn.pt"), torch.nn.Module)
