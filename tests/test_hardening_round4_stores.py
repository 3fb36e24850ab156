"""Hardening, round 4 (issue 37), the stores' half: outputs directories known by their
signature, work directories created fresh and never followed through links, work keyed by the
source and checked before reuse, stores written under a lock, hand-edited markers and a full
disk in one line, a second user kept out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from plexus.api.outputs import MARKER, OutputsError, _publish, check_outputs_target

TINY = ["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=3"]


def one_line(err: str, prog: str, *needles: str) -> str:
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err[-3000:]
    for needle in needles:
        assert needle in err, err
    return err


# ---- 1: an outputs directory is known by what Plexus writes, never by a file name ------------
def real_outputs(target: Path, rows: int = 5) -> Path:
    """An outputs directory as `plexus.save_outputs` leaves it (its rank-0 publishing step)."""
    tmp = target.parent / f".{target.name}.partial-test"
    tmp.mkdir(parents=True)
    np.lib.format.open_memmap(tmp / "pred.npy", mode="w+", dtype=np.int64, shape=(rows,))
    _publish(tmp, target, rows, {"pred": ((rows,), np.dtype(np.int64))}, {"epoch": 1})
    return target


def test_a_users_directory_with_an_outputs_json_is_never_replaced(tmp_path, capsys):
    from plexus.train import main

    res = tmp_path / "res"
    res.mkdir()
    (res / MARKER).write_text('{"mine": 1}\n')
    (res / "thesis.tex").write_text("x")
    assert main(["--grid", "1x1x1", *TINY, "--save-predictions", str(res)]) == 2
    one_line(capsys.readouterr().err, "plexus-train", f"--save-predictions {res}",
             "refusing to replace it")
    assert (res / "thesis.tex").read_text() == "x"


def _forge(kind: str, res: Path) -> None:
    if kind == "extra file":
        (res / "thesis.tex").write_text("x")
    elif kind == "no format":
        meta = json.loads((res / MARKER).read_text())
        del meta["format"]
        (res / MARKER).write_text(json.dumps(meta))
    elif kind == "array not there":
        (res / "pred.npy").unlink()
    elif kind == "marker a link":
        (res.parent / "elsewhere.json").write_text((res / MARKER).read_text())
        (res / MARKER).unlink()
        (res / MARKER).symlink_to(res.parent / "elsewhere.json")
    elif kind == "array a link":
        (res / "pred.npy").rename(res.parent / "keep.npy")
        (res / "pred.npy").symlink_to(res.parent / "keep.npy")
    elif kind == "a subdirectory":
        (res / "logits.npy").mkdir()


@pytest.mark.parametrize("kind", ["extra file", "no format", "array not there", "marker a link",
                                  "array a link", "a subdirectory"])
def test_only_the_exact_signature_counts_as_an_earlier_outputs_directory(kind, tmp_path):
    res = real_outputs(tmp_path / "res")
    assert check_outputs_target(res) == res  # the genuine one is replaced ...
    _forge(kind, res)
    with pytest.raises(OutputsError, match="refusing to replace it"):  # ... nothing else
        check_outputs_target(res)


def test_an_earlier_outputs_directory_is_replaced_whole(tmp_path):
    res = real_outputs(tmp_path / "res", rows=5)
    real_outputs(res, rows=7)
    assert np.load(res / "pred.npy").shape == (7,)
    assert sorted(os.listdir(res)) == [MARKER, "pred.npy"]
    assert [p.name for p in tmp_path.iterdir()] == ["res"]
