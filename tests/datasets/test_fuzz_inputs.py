"""Fuzzing every input file kind (issue 16) and the Python API's graph inputs (issue 24): each
damaged or hostile input either loads or ends in one typed one-line error, never a signal, a
traceback, a hang or a pickle payload that runs. Study folders (plexus-sweep, plexus-report)
are fuzzed the same way (`fuzzing.studies`).

The bounded, seeded run here loads the cases in a child process as the command lines do
(`fuzzing.inputs`, in ``tests/fuzzing/``); a few command-line runs check the same from the
outside (exit status 2, exactly one ``error:`` line). ``benchmarks/fuzz_inputs.py`` runs a larger
set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cli_helpers import train
from helpers import assert_one_line
from plexus_datasets.planetoid import EMBEDDED_DIR
from fuzzing import harness, inputs, samples

SEED = 16
PER_KIND = 25


FILE_KINDS = tuple(k for k in inputs.KINDS if k != "export")  # exports: the forked run below


@pytest.mark.slow
def test_every_input_kind_loads_or_fails_in_one_line(tmp_path):
    cases = inputs.make_cases(tmp_path, SEED, PER_KIND, FILE_KINDS, cora=EMBEDDED_DIR)
    cases += inputs.cora_flip_cases(tmp_path, EMBEDDED_DIR, 15, SEED)
    results = harness.run_cases(cases, tmp_path)
    bad = [(case.name, outcome, detail) for case, outcome, detail in results
           if outcome not in harness.GOOD]
    assert not bad, "\n".join(map(str, bad))
    counts = harness.summarize(results)
    for kind in FILE_KINDS:  # the mutations do reach the checks
        assert counts[kind]["error"] > 0, (kind, counts[kind])
    assert sum(c["ok"] for c in counts.values()) > 0  # and not everything is refused
    assert not (tmp_path / harness.MARKER_NAME).exists()


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_graph_directories_and_exports_in_a_process_each_within_a_gib(tmp_path):
    """A sample of the readers' cases (``benchmarks/fuzz_readers.py`` runs 500 per kind): size
    bombs, FIFOs, nested and lying headers each load or fail in one line, every case in a
    process of its own whose peak RSS stays under 1 GiB."""
    cases = inputs.make_cases(tmp_path, SEED, 6, inputs.READER_KINDS, bomb_bytes=128 << 20)
    results = harness.run_cases_forked(cases, tmp_path)
    bad = [(case.name, outcome, detail, rss) for case, outcome, detail, rss in results
           if outcome not in harness.GOOD or rss > inputs.RSS_LIMIT_KB]
    assert not bad, "\n".join(map(str, bad))
    counts = harness.summarize(results)
    assert all(counts[kind]["error"] > 0 for kind in inputs.READER_KINDS), counts


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_a_forked_case_that_dies_is_seen(tmp_path):
    """The per-case harness reports a case that kills its process and goes on, with each
    case's own peak RSS."""
    cases = [harness.Case("graph", "dies", selftest="signal"),
             harness.Case("graph", "after", "cora:nope")]
    results = harness.run_cases_forked(cases, tmp_path)
    assert [(c.name, o) for c, o, _, _ in results] == [("dies", "signal"), ("after", "error")]
    assert all(rss > 10_000 for *_, rss in results)  # kB: the interpreter at least


@pytest.mark.slow
def test_damaged_study_folders_are_one_line_or_work(tmp_path):
    """A few damaged sweep and report folders (``benchmarks/fuzz_inputs.py --kinds sweep,report``
    runs hundreds): status 0 or one line, nothing written outside the folder, no hang."""
    from fuzzing import studies

    cases = studies.make_cases(tmp_path, SEED, 3)
    results = harness.run_cases(cases, tmp_path, runner="fuzzing.studies")
    bad = [(case.name, case.spec, outcome, detail) for case, outcome, detail in results
           if outcome not in harness.GOOD]
    assert not bad, "\n".join(map(str, bad))
    counts = harness.summarize(results)
    assert set(counts) == {"sweep", "report"} and all(c["error"] for c in counts.values())


@pytest.fixture(scope="module")
def crafted_ogb(tmp_path_factory):
    """An ogbn-arxiv directory whose split cache would create a marker file when unpickled."""
    import torch

    root = tmp_path_factory.mktemp("ogb")
    d = samples.write_ogb(root)
    marker = root / harness.MARKER_NAME
    torch.save({"train": samples.Payload(marker), "valid": 1, "test": 2},
               d / "split/time/split_dict.pt")
    return root, marker


@pytest.mark.slow
@pytest.mark.parametrize("prog, args", [
    ("plexus-train", ["--grid", "1x1x1", "--epochs", "1"]),
    ("plexus-partition", ["--grid", "1x1x1", "--layers", "2", "--stats-only"]),
    ("plexus-model", ["--world-size", "2"]),
])
def test_a_crafted_ogb_pickle_never_runs(crafted_ogb, prog, args):
    root, marker = crafted_ogb
    proc = train("--dataset", "ogbn-arxiv", "--root", str(root), *args, launcher=(prog,),
                 timeout=120)
    assert not marker.exists()
    assert_one_line(proc, "split_dict.pt", "refused", prog=prog)


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_an_npz_with_a_broken_indptr_is_one_line_not_a_segfault(tmp_path):
    p = tmp_path / "g.npz"
    adj = sp.random(50, 50, density=0.2, format="csr", random_state=0, dtype=np.float32)
    indptr = adj.indptr.astype(np.int64)
    indptr[5] = 10**6  # issue 16's reproduction: signal 11 in scipy
    np.savez(p, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=indptr,
             adj_shape=np.array(adj.shape))
    proc = train("--dataset", f"npz:{p}", "--grid", "1x1x1", "--layers", "2", "--stats-only",
                 launcher=("plexus-partition",), timeout=120)
    assert_one_line(proc, "adj_* indptr", prog="plexus-partition")


@pytest.mark.slow
def test_swapped_shard_files_end_the_job_with_one_line(tmp_path):
    store = tmp_path / "s"
    samples.write_store(store)
    a, b = sorted(store.glob("rank-*.npz"))[:2]
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    samples.rehash(store)
    proc = train("--shards", str(store), "--epochs", "1", timeout=300)
    assert_one_line(proc, "holds the shard of rank", "swapped", prog="plexus-train")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_an_empty_dataset_spec_is_refused():
    proc = train("--dataset", "", "--grid", "1x1x1", "--epochs", "1", timeout=120)
    assert_one_line(proc, "--dataset is empty", prog="plexus-train")


def test_fuzz_cases_are_seeded(tmp_path):
    """The same seed writes the same files (a failure can be replayed)."""
    def digest(work: Path) -> list[tuple[str, bytes]]:
        cases = inputs.make_cases(work, 3, 4, kinds=("npz", "mtx", "edgelist", "planetoid"))
        assert len(cases) == 16
        return sorted((str(p.relative_to(work)), p.read_bytes().replace(bytes(work), b"W"))
                      for p in work.rglob("*") if p.is_file())

    assert digest(tmp_path / "a") == digest(tmp_path / "b")


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_the_outcome_sorter_sees_a_signal_and_a_payload(tmp_path):
    """The harness can fail: a case that kills its process, or that creates the marker file,
    is reported as such, and the cases after it still run."""
    cases = [harness.Case("npz", "fine", "rmat:scale=4"),
             harness.Case("npz", "dies", selftest="signal"),
             harness.Case("npz", "runs", str(tmp_path / harness.MARKER_NAME),
                          selftest="payload"),
             harness.Case("npz", "after", "cora:nope")]
    results = harness.run_cases(cases, tmp_path)
    assert [(c.name, o) for c, o, _ in results] == [("fine", "ok"), ("dies", "signal"),
                                                   ("runs", "payload"), ("after", "error")]
