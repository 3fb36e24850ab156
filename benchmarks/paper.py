"""The Plexus paper's measured strong-scaling curve, and ``plexus-model`` priced at its points.

The figures are arXiv 2505.04083 v2, Fig. 10 (read off the figure's vector data): every run a
3-layer GCN, hidden 128, on Perlmutter (4 A100 and 4 Slingshot NICs per node). They validate
the ``perlmutter-a100`` profile: nothing in the profile is fitted to them
(`plexus/perfmodel/node_profiles/perlmutter-a100.json` cites where each constant was measured).
Used by ``paper_validation.py`` and ``comm_tables.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

from plexus.perfmodel.cli import model_main

#: {dataset: {GPUs: measured epoch in ms}}, Fig. 10.
MEASURED_MS = {
    "ogbn-papers100M": {64: 2783, 128: 1894, 256: 1357, 512: 932, 1024: 640, 2048: 536},
    "ogbn-products": {4: 155, 8: 137, 16: 112.5, 32: 95.4, 64: 70.5, 128: 48.1, 256: 41.1,
                      512: 25.3},
}
#: The paper's model: what every row here is priced at.
MODEL = ["--layers", "3", "--hidden", "128"]
#: The paper's algorithm on top of that: learnable input features (its AG(H) of layer 0 and
#: RS(dH) back), aggregate first, no bias, no dropout, every sum an all-reduce as one flat
#: NCCL ring, fp32 payloads.
PAPER_MODE = ["--learnable-features", "--order", "agg", "--no-bias", "--dropout", "0",
              "--no-input-dropout", "--sparse-comm", "off", "--gather-input",
              "--collectives", "flat"]
PROFILE = "perlmutter-a100"
GPUS_PER_NODE = 4


def priced(dataset: str, gpus: list[int], extra: list[str], profile: str = PROFILE) -> dict:
    """{GPUs: the fastest grid's JSON row} of ``plexus-model --dataset DATASET --gpus ...
    --gpus-per-node 4 --profile PROFILE`` with the paper's model and ``extra`` options (the
    calibration variable ignored: the profile as shipped)."""
    out = io.StringIO()
    saved = os.environ.pop("PLEXUS_CALIBRATION", None)
    try:
        with contextlib.redirect_stdout(out):
            status = model_main(["--dataset", dataset, "--gpus", ",".join(map(str, gpus)),
                                 "--gpus-per-node", str(GPUS_PER_NODE), "--profile", profile,
                                 "--json", "--top", "1", *MODEL, *extra])
    finally:
        if saved is not None:
            os.environ["PLEXUS_CALIBRATION"] = saved
    if status != 0:
        raise RuntimeError(f"plexus-model failed for {dataset} {' '.join(extra)}")
    doc = json.loads(out.getvalue())
    return {w["world_size"]: w["configs"][0] for w in doc["worlds"]}


def measured_commit() -> str:
    """The commit the figures are computed at (``+changes`` when tracked files differ from it):
    what a results file's header names."""
    repo = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":!benchmarks/results")  # the results being written are not the code
    return head + ("+changes" if changed else "")


def header(script: str, *notes: str) -> list[str]:
    """A results file's first lines: the script, the time, the commit and the load (the model is
    arithmetic: load does not change it), then ``notes`` as comment lines and a blank one."""
    import time  # noqa: PLC0415

    return [f"# benchmarks/{script}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"commit {measured_commit()}, load {os.getloadavg()[0]:.1f} (the model is "
            "arithmetic: load does not matter)", *(f"# {n}" for n in notes), ""]
