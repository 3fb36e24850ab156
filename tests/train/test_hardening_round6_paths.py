"""Hardening, round 6 (issue 56, N1-N3 and the input claims): no path trusted by its name. Every
output goes through the one gate (`plexus_datasets.base.gate`): nothing is written through a
link a co-user planted, into a co-user's file or folder, or over the run's own input. The
two-user cases run a forked child as uid 65534 (`helpers.as_nobody`), the victim's files are
compared byte for byte before and after."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from cli_helpers import cli_env
from fuzzing.storedamage import contents
from helpers import NOBODY, as_nobody, assert_one_line, sticky_folder
from plexus.train.cli import main as train_main

TINY = "rmat:scale=6,edge_factor=4,features=8,classes=3"
RUN = ["--dataset", TINY, "--grid", "1x1x1", "--epochs", "1", "--quiet", "--no-cache"]
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root to act as a second user")


@pytest.fixture
def shared():
    """A folder everyone may create in, as /tmp (sticky)."""
    with sticky_folder("plexus-round6-") as folder:
        yield folder


@pytest.fixture
def victim(shared):
    """The user's private folder with a file and a folder they care about."""
    folder = shared / "victim"
    folder.mkdir(mode=0o700)
    (folder / "thesis.tex").write_text("\\chapter{Two years}\n")
    (folder / "project").mkdir()
    (folder / "project" / "notes.md").write_text("# notes\n")
    return folder


def _plant_link(link: str, to: str) -> str:
    os.symlink(to, link)
    return "planted"


def _refused(argv: list[str], capsys, *needles: str) -> str:
    assert train_main(argv) == 2
    return assert_one_line(capsys.readouterr().err, *needles, prog="plexus-train")


# ---- N1: file outputs through a co-user's link ------------------------------------------------
@ROOT_ONLY
@pytest.mark.parametrize("flag", ["--log-json", "--log-csv", "--export"])
def test_a_file_output_through_a_co_users_link_is_refused_and_the_target_kept(flag, shared,
                                                                              victim, capsys):
    kept = contents(victim)
    link = shared / "real.out"
    assert as_nobody(_plant_link, str(link), str(victim / "thesis.tex")) == "planted"
    _refused([*RUN, flag, str(link)], capsys, flag, "a symlink")
    assert contents(victim) == kept and os.path.islink(link)


def _plant_file(path: str) -> str:
    with open(path, "w") as f:
        f.write("theirs\n")
    os.chmod(path, 0o666)
    return "planted"


@ROOT_ONLY
@pytest.mark.parametrize("flag", ["--log-json", "--log-csv", "--export"])
def test_a_file_output_on_a_co_users_file_is_refused(flag, shared, capsys):
    theirs = shared / "theirs.out"
    assert as_nobody(_plant_file, str(theirs)) == "planted"
    _refused([*RUN, flag, str(theirs)], capsys, flag, f"owned by uid {NOBODY}")
    assert theirs.read_text() == "theirs\n" and theirs.stat().st_uid == NOBODY


@pytest.mark.parametrize("flag", ["--log-json", "--log-csv", "--export", "--checkpoint",
                                  "--tensorboard"])
def test_an_output_in_a_folder_others_can_write_is_refused(flag, tmp_path, capsys):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)  # not sticky: anyone may swap what is in it
    _refused([*RUN, flag, str(open_folder / "out")], capsys, flag, "not sticky")
    assert os.listdir(open_folder) == []


def test_a_users_own_link_in_a_private_folder_is_still_followed(tmp_path):
    real = tmp_path / "logs" / "run.json"
    real.parent.mkdir()
    real.write_text("an older log\n")
    (tmp_path / "run.json").symlink_to(real)
    assert train_main([*RUN, "--log-json", str(tmp_path / "run.json")]) == 0
    assert (tmp_path / "run.json").is_symlink() and real.read_text().startswith("{")


@ROOT_ONLY
def test_calibrate_out_through_a_co_users_link_is_refused_before_timing(shared, victim,
                                                                        monkeypatch, capsys):
    from plexus.bench.cli import bench_main
    from plexus.perfmodel import benchcli

    def never(*args, **kwargs):
        raise AssertionError("measured, though the output was refused")

    monkeypatch.setattr(benchcli, "calibrate", never)
    kept = contents(victim)
    link = shared / "cal.json"
    assert as_nobody(_plant_link, str(link), str(victim / "thesis.tex")) == "planted"
    assert bench_main(["calibrate", "--world-size", "1", "--quick", "--out", str(link)]) == 2
    assert_one_line(capsys.readouterr().err, "a symlink", prog="plexus-bench")
    assert contents(victim) == kept


# ---- N3: folders through a co-user's link: nothing written in the link's target --------------
@ROOT_ONLY
@pytest.mark.parametrize("flag", ["--checkpoint", "--tensorboard", "--save-predictions"])
def test_an_output_folder_through_a_co_users_link_writes_nothing_there(flag, shared, victim,
                                                                       capsys):
    kept, names = contents(victim), _entries(victim)
    link = shared / "ckA"
    assert as_nobody(_plant_link, str(link), str(victim / "project")) == "planted"
    _refused([*RUN, flag, str(link)], capsys, flag, "a symlink")
    assert contents(victim) == kept  # no lock, no temporary file, no events file
    assert _entries(victim) == names  # nor an empty folder


def _entries(folder: Path) -> list[str]:
    """Every name under ``folder``, folders and links too (`contents` holds files only)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@ROOT_ONLY
def test_the_key_folder_through_a_co_users_link_is_refused_and_nothing_made_there(
        shared, victim, monkeypatch, capsys):
    from plexus_datasets.base import owned

    kept, names = contents(victim), _entries(victim)
    link = shared / "config"
    assert as_nobody(_plant_link, str(link), str(victim / "project")) == "planted"
    monkeypatch.setenv(owned.CONFIG_ENV, str(link))
    with pytest.raises(owned.NotOursError, match="a symlink another user could have made") as e:
        owned.user_key()
    assert_one_line(e)
    _refused([*RUN, "--log-json", str(victim / "run.json")], capsys, owned.CONFIG_ENV,
             "a symlink")
    assert contents(victim) == kept and _entries(victim) == names  # no key, no hard-linked copy


# ---- N2: a co-user's checkpoint or checkpoint folder ------------------------------------------
@ROOT_ONLY
def test_a_co_users_checkpoint_is_refused_on_resume_before_it_is_loaded(shared, capsys,
                                                                        monkeypatch):
    from plexus.train import checkpoint as ckpt

    mine, ck = shared / "mine", shared / "ckA"
    assert train_main([*RUN, "--checkpoint", str(mine)]) == 0
    # the co-user, a child of uid 65534, makes their folder and copies a checkpoint into it
    assert as_nobody(_their_checkpoint, str(mine / "checkpoint.pt"), str(ck)) == "planted"
    assert (ck / "checkpoint.pt").stat().st_uid == NOBODY
    before = contents(ck)
    loaded = []
    monkeypatch.setattr(ckpt.torch, "load", lambda *a, **k: loaded.append(a) or {})
    _refused([*RUN, "--epochs", "3", "--checkpoint", str(ck), "--resume"], capsys,
             "--resume", f"owned by uid {NOBODY}")
    assert loaded == [] and contents(ck) == before


def _their_checkpoint(source: str, folder: str) -> str:
    import shutil

    os.mkdir(folder)
    os.chmod(folder, 0o777)
    shutil.copyfile(source, os.path.join(folder, "checkpoint.pt"))
    return "planted"


def _their_open_folder(path: str) -> str:
    os.mkdir(path)
    os.chmod(path, 0o777)
    return "planted"


@ROOT_ONLY
def test_a_co_users_empty_folder_is_not_used_as_a_checkpoint_folder(shared, capsys):
    ck = shared / "ckB"
    assert as_nobody(_their_open_folder, str(ck)) == "planted"
    _refused([*RUN, "--checkpoint", str(ck)], capsys, "--checkpoint", f"uid {NOBODY}")
    assert os.listdir(ck) == []


# ---- an output over the run's own input ---------------------------------------------------------
@pytest.fixture
def graph_dir(tmp_path) -> Path:
    from plexus_datasets import load_dataset
    from plexus_datasets.diskwrite import write_graph

    out = tmp_path / "G"
    write_graph(load_dataset(TINY), out)
    return out


# the issue's --export G/indices.npy on a csr graph; write_graph writes coo (src/dst): its arrays
@pytest.mark.parametrize("flag, name", [("--export", "src.npy"), ("--log-json", "dst.npy"),
                                        ("--log-csv", "graph.json"),
                                        ("--export", "features.npy")])
def test_an_output_over_a_graph_directorys_file_is_refused(graph_dir, flag, name, capsys):
    assert (graph_dir / name).is_file()  # the input's own array, not a stand-in
    kept = contents(graph_dir)
    argv = ["--dataset", f"graph:{graph_dir}", "--grid", "1x1x1", "--epochs", "1", "--quiet",
            "--no-cache", flag, str(graph_dir / name)]
    _refused(argv, capsys, "would overwrite the input")
    assert contents(graph_dir) == kept


# ---- item 6: a run's folders never in the system's; no empty TensorBoard folder left -----------
# --save-predictions /usr/share/x wrote its outputs there, exit 0, as root (found in round 6's audit)
@pytest.mark.parametrize("flag, path", [("--checkpoint", "/"), ("--checkpoint", "/etc"),
                                        ("--checkpoint", "/usr/lib/plexus-ck"),
                                        ("--tensorboard", "/etc"), ("--tensorboard", "/"),
                                        ("--tensorboard", "/etc/plexus-tb"),
                                        ("--save-predictions", "/usr/share/plexus-preds"),
                                        ("--save-predictions", "/etc/plexus-preds")])
def test_a_runs_folder_in_the_systems_is_refused(flag, path, capsys):
    if flag == "--tensorboard":
        pytest.importorskip("tensorboard")
    made = os.path.lexists(path)
    _refused([*RUN, flag, path], capsys, flag, "system")
    assert os.path.lexists(path) == made  # nothing made there


@pytest.mark.parametrize("path", ["/", "/etc", "/usr/share/plexus-cache", "/tmp"])
def test_a_cache_in_the_systems_folders_is_refused_and_nothing_made_there(path, capsys):
    """--cache /etc wrote its locks/, sources/, verified/ and a store into /etc, exit 0, as
    root (found in round 6's audit); /usr/share/x was made."""
    def cache_names() -> set[str] | None:  # a cache's own entries (others come and go in /tmp)
        if not os.path.lexists(path):
            return None
        return {n for n in os.listdir(path) if n in ("locks", "sources", "verified", "graphs",
                                                    "work") or n.startswith("rmat-s6")}

    before = cache_names()
    _refused([*RUN[:-1], "--cache", path], capsys, f"--cache {path}: is ", "system",
             "give a private --cache DIR")
    assert cache_names() == before


@pytest.mark.parametrize("out", ["/", "/etc", "/usr/share/plexus-store"])
def test_a_shard_store_in_the_systems_folders_is_refused(out, capsys):
    """plexus-partition --out /usr/share/x wrote its store there, exit 0, as root (found in
    round 6's audit); its main, in this process."""
    from plexus_partition.cli import main as partition_main

    made = os.path.lexists(out)
    assert partition_main(["--dataset", TINY, "--grid", "1x1x1", "--out", out]) == 2
    assert_one_line(capsys.readouterr().err, f"{out}: is ", "system",
                    "refusing to make it a run's folder", prog="plexus-partition")
    assert os.path.lexists(out) == made


def test_a_sweeps_results_folder_in_the_systems_is_refused():
    from plexus.studies.folder import FolderError, ResultsFolder

    for path in ("/", "/etc", "/usr/share/plexus-sweep"):
        with pytest.raises(FolderError) as e:
            ResultsFolder(path, create=True)
        assert_one_line(e, "system")
    assert not os.path.lexists("/usr/share/plexus-sweep")


@pytest.mark.parametrize("out", ["/", "/etc", "/usr/share/plexus-sweep"])
def test_plexus_sweep_out_in_the_systems_is_one_line_exit_2(out, capsys):
    """The issue's command, through plexus-sweep's main (in this process: refused before any
    run starts)."""
    from plexus.studies.cli import sweep_main

    made = os.path.lexists(out)
    assert sweep_main(["--dataset", TINY, "--grids", "1x1x1", "--epochs", "1", "--out",
                       out]) == 2
    assert_one_line(capsys.readouterr().err, out, "system", "refusing to make it a run's folder",
                    prog="plexus-sweep")
    assert os.path.lexists(out) == made


def test_the_tensorboard_check_leaves_no_folder_behind(tmp_path):
    """The start-up check makes and probes the folder: a run that fails after it (a full disk,
    a refused option later) would leave it empty; the check removes a folder it made, and the
    writer makes it again when it starts."""
    pytest.importorskip("tensorboard")
    from plexus.train.epochlogs import TensorBoardLog, check_targets

    tb = tmp_path / "deep" / "tb"
    check_targets(None, str(tb))
    assert not tb.exists()
    (tmp_path / "kept").mkdir()
    check_targets(None, str(tmp_path / "kept"))
    assert (tmp_path / "kept").is_dir()  # a folder that was there stays
    log = TensorBoardLog(tb)
    log.close()
    assert any(p.name.startswith("events.") for p in tb.iterdir())


def test_a_full_disk_while_the_outputs_are_made_leaves_no_partial_folder(tmp_path, monkeypatch):
    import errno

    import numpy as np

    from plexus.api import outputs

    made = []

    def full(path, **kwargs):
        if made:
            raise OSError(errno.ENOSPC, "No space left on device")
        made.append(path)
        return real(path, **kwargs)

    real = np.lib.format.open_memmap
    monkeypatch.setattr(np.lib.format, "open_memmap", full)
    shapes = {"pred": ((10,), np.dtype(np.int64)), "logits": ((10, 3), np.dtype(np.float32))}
    with pytest.raises(OSError, match="No space left"):
        outputs._create_files(tmp_path / "preds", shapes)
    assert made and os.listdir(tmp_path) == []  # the first file was made, then all removed


# a full disk as the command meets it (RLIMIT_FSIZE: a write past the limit fails with EFBIG, as a
# full disk's with ENOSPC): the 64 nodes' pred.npy is 640 bytes, logits.npy 896, so at 700 the
# second file fails; at 0 and 10 bytes TensorBoard's first event does not fit
@pytest.mark.slow
@pytest.mark.parametrize("limit, flag, code, needle, there", [
    (700, "--save-predictions", 1, "cannot write --save-predictions: out: File too large", False),
    *[(limit, "--tensorboard", 2, "--tensorboard out: cannot write there (File too large)", there)
      for limit in (0, 10) for there in (False, True)],  # a folder of the user's stays, as it was
])
def test_a_full_disk_leaves_no_partial_output_behind(limit, flag, code, needle, there, tmp_path):
    if flag == "--tensorboard":
        pytest.importorskip("tensorboard")
    if there:
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "kept.txt").write_text("kept\n")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    def full() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(["plexus-train", *RUN, "--epochs", "2", flag, "out"], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=full)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert_one_line(proc.stderr, needle, prog="plexus-train")
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == before  # no .out.partial-*, no empty folder, no events file of no events
