"""The run's input claims come from the dataset spec's own list of files (issue 56, item 3): every
spec form with a path, walked from `SPEC_FORMS`, claims exactly what its loader opens (the oracle:
the interpreter's ``open`` audit events while the graph loads), so no output overwrites it, and a
new format is covered the day it is added (a form without an example here fails)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from helpers import assert_one_line
from plexus.train.outputs import OutputCollision, check_claims, dataset_files, run_claims
from plexus_datasets import SPEC_FORMS, load_dataset
from plexus_datasets.planetoid import EMBEDDED_DIR

TINY = "rmat:scale=5,edge_factor=4,features=4,classes=2"
_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, bytes)):
        _opened.append(args[0] if isinstance(args[0], str) else args[0].decode())


sys.addaudithook(_audit)  # (a hook stays for the process: it records only inside `_opens`)


def _opens(spec: str) -> set[Path]:
    """The files loading ``spec`` opens (resolved)."""
    global _opened
    _opened = []
    try:
        load_dataset(spec)
        return {Path(p).resolve() for p in _opened if Path(p).is_file()}
    finally:
        _opened = None


def _npz(d: Path) -> str:
    adj = sp.csr_matrix(np.eye(4, k=1, dtype=np.float32))
    np.savez(d / "g.npz", adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=np.array(adj.shape), labels=np.array([0, 1, 1, 0]))
    return f"npz:{d / 'g.npz'}"


def _mtx(d: Path) -> str:
    scipy.io.mmwrite(str(d / "g.mtx"), sp.coo_matrix(np.eye(5, k=1)))
    return f"mtx:{d / 'g.mtx'}"


def _edgelist(d: Path) -> str:
    (d / "g.txt").write_text("# tiny\n10\t30\n30\t7\n1000\t10\n")
    return f"edgelist:{d / 'g.txt'}"


def _graph(d: Path) -> str:
    from plexus_datasets.diskwrite import write_graph

    write_graph(load_dataset(TINY), d / "G")
    return f"graph:{d / 'G'}"


def _planetoid(d: Path) -> str:
    shutil.copytree(EMBEDDED_DIR, d / "cora")
    return f"planetoid:{d / 'cora'}"


def _planetoid_prefix(d: Path) -> str:
    return _planetoid(d) + "/ind.cora"


#: An example of every spec form that names a path (the scheme before its colon)
EXAMPLES = {"npz": [_npz], "mtx": [_mtx], "edgelist": [_edgelist], "graph": [_graph],
            "planetoid": [_planetoid, _planetoid_prefix]}
PATH_FORMS = [f.split(":")[0] for f in SPEC_FORMS
              if ":" in f and any(w in f.split(":")[1] for w in ("PATH", "DIR"))]


def test_every_spec_form_with_a_path_has_an_example():
    assert PATH_FORMS and set(PATH_FORMS) == set(EXAMPLES), (PATH_FORMS, sorted(EXAMPLES))


@pytest.mark.parametrize("make", [m for f in PATH_FORMS for m in EXAMPLES.get(f, [])],
                         ids=lambda m: m.__name__.strip("_"))
def test_every_file_a_spec_reads_is_claimed_and_no_output_may_overwrite_it(make, tmp_path):
    spec = make(tmp_path)
    opened = {p for p in _opens(spec) if tmp_path.resolve() in p.parents}
    assert opened, spec  # the oracle saw the loader read its files
    claimed = {p.resolve() for p in dataset_files(spec, None, None)}
    assert opened <= claimed, sorted(opened - claimed)
    for path in sorted(opened):
        for flag in ("export", "log_json", "log_csv"):
            outputs = {"checkpoint": None, "log_json": None, "log_csv": None,
                       "tensorboard": None, "save_predictions": None, "export": None,
                       flag: str(path)}
            with pytest.raises(OutputCollision, match="would overwrite the input") as e:
                check_claims(run_claims(**outputs, inputs=claimed))
            assert_one_line(e)
