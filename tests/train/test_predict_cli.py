"""``plexus-predict``: a plexus-train run's export and its checkpoint, run over a graph on a
grid, write what `plexus.load_pyg`'s PyG model of the export computes (the oracle), in
``--save-predictions``'s format; bad input is one line and exit status 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import plexus
from helpers import assert_one_line
from plexus.train import main as train_main
from plexus.train.predict import main
from plexus_datasets import load_dataset


@pytest.mark.slow
def test_export_and_checkpoint_predict_what_pyg_computes(tmp_path, capsys):
    pytest.importorskip("torch_geometric")
    ck, export = tmp_path / "ck", tmp_path / "gcn.pt"
    assert train_main(["--grid", "1x1x1", "--epochs", "3", "--checkpoint", str(ck),
                       "--export", str(export), "--quiet"]) == 0
    cora = load_dataset("cora").to_pyg()
    with torch.no_grad():
        want = plexus.load_pyg(export)(cora.x, cora.edge_index).numpy()
    for source, grid in (("--weights", "1x1x1"), ("--checkpoint", "1x1x2")):
        out = tmp_path / f"pred{source}"
        given = export if source == "--weights" else ck
        assert main([source, str(given), "--dataset", "cora", "--grid", grid, "--out",
                     str(out)]) == 0, capsys.readouterr().err
        assert "plexus-predict: gcn on cora (2,708 nodes)" in capsys.readouterr().out
        saved = plexus.load_outputs(out)
        np.testing.assert_allclose(saved["logits"], want, rtol=0, atol=1e-5, err_msg=source)
        np.testing.assert_array_equal(saved["pred"], want.argmax(1))


@pytest.mark.parametrize("args,message", [
    (["--dataset", "cora", "--out", "o"], "one of the arguments --weights --checkpoint is "
                                          "required"),
    (["--weights", "nope.pt", "--dataset", "cora", "--out", "o"], "nope.pt: no such file"),
    (["--checkpoint", "nope", "--dataset", "cora", "--out", "o"], "no checkpoint at"),
    (["--weights", "w.pt", "--dataset", "cora", "--out", "o", "--grid", "3x3"], "bad grid"),
])
def test_bad_input_is_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert_one_line(err)
    assert message in err, err

