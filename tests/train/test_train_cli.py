"""plexus-train end to end: accuracy, grid independence, resume, torchrun, errors, logs.

Worlds are expensive on a small machine, so one 200-epoch run on 2x2x2 (``reference``) serves
as the accuracy check, the JSON-format check and the uninterrupted run every other run is
compared with. Other runs are short (10-20 epochs) and use few ranks. Timeouts only catch hangs:
they are generous because a busy machine slows everything down. Runs checked only by what they
compute and write call plexus-train's main in this process (`train_here`: an interpreter fewer
each, issue 58 item 5); those whose console output or command's own start matter are processes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cli_helpers import launched, losses, read_log, train, train_here
from helpers import REPO, assert_one_line
from plexus.train import checkpoint as ckpt
from plexus.engine.config import ModelConfig, TrainConfig
from plexus_partition.launch.env import (LaunchError, detect_environment, slurm_tasks_on_node,
                                         threads_per_worker)
from plexus.train.runlog import JsonLog
from plexus.train import main

EPOCH_KEYS = {"epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_time_s",
              "eval_time_s"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The default run (Kipf setup on the embedded Cora) on 2x2x2, 200 epochs, with a JSON log."""
    out = tmp_path_factory.mktemp("reference")
    log = out / "run.json"
    proc = train("--grid", "2x2x2", "--log-json", str(log), timeout=1200)
    assert proc.returncode == 0, proc.stderr
    records, summary = read_log(log)
    return {"proc": proc, "log": log, "records": records, "summary": summary}


@pytest.mark.slow
def test_default_cora_run_reaches_kipf_accuracy(reference):
    summary = reference["summary"]
    assert summary["best_test_acc"] >= 0.80, summary
    assert summary["final"]["test_acc"] >= 0.79, summary
    assert summary["dataset"] == "cora" and summary["grid"] == "2x2x2"


@pytest.mark.slow
def test_console_output_is_plain_lines_from_rank_0(reference):
    out = reference["proc"].stdout
    assert "\r" not in out  # no progress bar when stdout is not a terminal
    epoch_lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epoch_lines) == 200  # one per epoch, from rank 0 only
    assert epoch_lines[0].startswith("epoch   1/200  loss ")
    # the summary's first lines; the timers and tables only with --verbose (and in the JSON log)
    assert "best validation: epoch" in out and "max/mean" not in out
    assert "  communication: " in out and "communication, all ranks: x " not in out
    timers = reference["summary"]["timers"]
    assert all(name in timers for name in ("spmm", "gemm", "all_reduce:x", "all_gather:z"))
    assert reference["proc"].stderr.strip() == ""


#: what depends on the machine and its load in a run's output, masked before the README's
#: sample is compared with a real run: times, the memory measured, the cores and threads, where
#: the shard store is and whether this run built it
_LOAD = [(re.compile(r"\d+(?:\.\d+)? ?(?:ms|us|s)\b"), "T"),
         (re.compile(r"(built|reusing|reused) (the (cached )?shard store )?\S*/cora-2x2x2-\w+"
                     r"( in T)?"), "STORE"),
         (re.compile(r"\d+ threads? per rank(, [^,)]*)?"), "THREADS")]


def _masked(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.startswith("plexus-train: note: "):  # only where ranks outnumber the cores
            continue
        if line.startswith("  memory per rank: peak RSS"):
            line = re.sub(r"\d+(?:\.\d+)? [KMG]iB", "M", line)
        for pattern, repl in _LOAD:
            line = pattern.sub(repl, line)
        out.append(line)
    return out


@pytest.mark.slow
def test_the_readme_sample_is_this_runs_output(reference):
    """README.md's sample of `./run train --grid 2x2x2` is this run's output line for line (it
    cannot go stale: a line added to or dropped from the output fails here), with only what
    depends on the machine's load masked; epochs 2-199 are elided there as one "..." line."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"It prints \(epochs 2-199 left out here\):\n\n```\n(.*?)```", text, re.S)
    assert block, "the README's sample run is gone"
    sample = block.group(1).splitlines()
    out = reference["proc"].stdout.splitlines()
    epochs = [i for i, line in enumerate(out) if line.startswith("epoch ")]
    assert len(epochs) == 200
    shown = out[:epochs[1]] + ["..."] + out[epochs[-1]:]
    assert _masked(sample) == _masked(shown)
    # what the masks keep is checked: the accuracies, losses and bytes are the run's own
    assert "  best validation: epoch" in block.group(1) and "MiB sent" in block.group(1)


@pytest.mark.slow
def test_json_log_format(reference):
    records, summary = reference["records"], reference["summary"]
    assert [r["epoch"] for r in records] == list(range(1, 201))
    for r in records:
        assert set(r) == EPOCH_KEYS
        assert np.isfinite(r["loss"]) and r["epoch_time_s"] > 0
        assert all(0.0 <= r[k] <= 1.0 for k in ("train_acc", "val_acc", "test_acc"))
    best = max(records, key=lambda r: r["val_acc"])  # the earliest on ties, as max() does
    assert summary["best_epoch"] == best["epoch"]
    assert summary["best_val_acc"] == best["val_acc"]
    assert summary["best_test_acc"] == best["test_acc"]
    assert summary["world_size"] == 8 and summary["epochs"] == 200
    assert set(summary["comm_bytes"]) == {"x", "y", "z"}
    assert all(v > 0 for v in summary["comm_bytes"].values())
    for name in ("spmm", "gemm", "all_reduce:x", "all_reduce:y", "all_gather:z"):
        t = summary["timers"][name]
        assert t["max"] >= t["mean"] > 0, name
    assert summary["ogb"] is None
    log = reference["log"]
    assert not log.with_name(log.name + ".tmp").exists()  # published atomically


@pytest.mark.slow
def test_same_losses_on_1x1x1(reference, tmp_path):
    log = tmp_path / "serial.json"
    proc = train_here("--grid", "1x1x1", "--epochs", "20", "--eval-every", "0", "--quiet",
                      "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    records, summary = read_log(log)
    assert all(r["val_acc"] is None for r in records)  # --eval-every 0: only at the end
    assert summary["final"]["test_acc"] is not None
    np.testing.assert_allclose(losses(records), losses(reference["records"][:20]), atol=1e-4,
                               rtol=0)


def _cora_store(path: Path, grid: dict[str, int]) -> None:
    """A plexus-partition store of Cora cut for the default model's orders (what a run without
    --order computes, so its losses are comparable bit for bit)."""
    from plexus_datasets import load_dataset
    from plexus.engine.config import ModelConfig
    from plexus_partition.store import write_store

    g = load_dataset("cora")
    write_store(g, path, grid, 2, ModelConfig().orders(g.num_features, g.num_classes), "double",
                0)


@pytest.mark.slow
def test_resume_equals_uninterrupted_run_on_same_and_other_grid(reference, tmp_path):
    ref = losses(reference["records"][:20])
    first = tmp_path / "ck"
    proc = train("--grid", "2x2x2", "--epochs", "10", "--checkpoint", str(first), "--quiet")
    assert proc.returncode == 0, proc.stderr
    other = tmp_path / "ck-other"
    shutil.copytree(first, other)

    # the same grid
    log = tmp_path / "resumed.json"
    proc = train("--grid", "2x2x2", "--epochs", "20", "--checkpoint", str(first), "--resume",
                 "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stdout
    records, summary = read_log(log)
    assert [r["epoch"] for r in records] == list(range(11, 21))
    np.testing.assert_allclose(losses(records), ref[10:], atol=1e-5, rtol=0)
    best = max(reference["records"][:20], key=lambda r: r["val_acc"])
    assert summary["best_epoch"] == best["epoch"]  # the best epoch survives the interruption

    # another grid, reading its shards from a plexus-partition store
    store = tmp_path / "store"
    _cora_store(store, {"x": 1, "y": 2, "z": 1})
    log = tmp_path / "resumed-other.json"
    proc = train("--grid", "1x2x1", "--shards", str(store), "--epochs", "20", "--checkpoint",
                 str(other), "--resume", "--quiet", "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    records, _ = read_log(log)
    np.testing.assert_allclose(losses(records), ref[10:], atol=1e-5, rtol=0)
    state = ckpt.load_checkpoint(other)
    assert ckpt.saved_epoch(state) == 20 and state["extra"]["grid"] == "1x2x1"


@pytest.mark.slow
def test_training_from_a_shard_store_equals_in_memory_bit_for_bit(tmp_path):
    """The same 8 epochs on 1x1x2 with each rank cutting its own shard from the dataset
    (--no-cache), reading the cached store the launcher partitioned the dataset into, and reading
    a plexus-partition store: the same losses and accuracies bit for bit."""
    store = tmp_path / "store"
    _cora_store(store, {"x": 1, "y": 1, "z": 2})
    logs, out = {}, {}
    runs = {"memory": ("--grid", "1x1x2", "--no-cache"),
            "cache": ("--grid", "1x1x2", "--cache", str(tmp_path / "cache")),
            "store": ("--shards", str(store))}
    for name, extra in runs.items():
        logs[name] = tmp_path / f"{name}.json"
        proc = train("--epochs", "8", "--log-json", str(logs[name]), *extra)
        assert proc.returncode == 0, proc.stderr
        out[name] = proc.stdout
    assert out["cache"].count("plexus-train: built the shard store ") == 1
    assert "shard store" not in out["memory"]
    assert read_log(logs["cache"])[1]["cache"]["built"] is True
    keys = ("loss", "train_acc", "val_acc", "test_acc")
    table = {name: [[r[k] for k in keys] for r in read_log(log)[0]] for name, log in logs.items()}
    assert table["memory"] == table["cache"] == table["store"]


@pytest.mark.slow
def test_grid_auto_trains_on_the_grid_the_model_picks(tmp_path):
    from plexus.engine.config import ModelConfig
    from plexus_datasets import load_dataset
    from plexus_datasets import gcn_nnz as graph_nnz
    from plexus.perfmodel import ModelSpec
    from plexus.train.plan import auto_grid

    g = load_dataset("cora")
    picked = auto_grid(2, ModelSpec(g.num_nodes, graph_nnz(g), g.num_features, g.num_classes,
                                    ModelConfig(), name=g.name))
    log = tmp_path / "auto.json"
    proc = train_here("--grid", "auto", "--world-size", "2", "--epochs", "3", "--quiet",
                      "--log-json", str(log))
    assert proc.returncode == 0, proc.stderr
    summary = read_log(log)[1]
    assert summary["grid"] == str(picked) and summary["world_size"] == 2


def _cora_as_ogb_npz(path: Path) -> None:
    """Cora in the gnn-benchmark .npz format, under a name that makes it an "ogbn-" dataset."""
    from plexus_datasets import load_dataset

    g = load_dataset("cora")
    a = sp.csr_matrix(g.adj)
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=g.features, labels=g.labels,
             train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)


@pytest.mark.slow
def test_torchrun_trains_the_same_and_reports_the_ogb_metric(reference, tmp_path):
    data = tmp_path / "ogbn-arxiv.npz"
    _cora_as_ogb_npz(data)
    log = tmp_path / "torchrun.json"
    proc = train("--nproc-per-node", "4", "-m", "plexus.train", "--grid", "1x2x2",
                 "--dataset", f"npz:{data}", "--epochs", "10", "--log-json", str(log),
                 launcher=("torchrun",))
    assert proc.returncode == 0, proc.stderr
    assert sum(line.startswith("epoch  1/10") for line in proc.stdout.splitlines()) == 1
    # rank 0 partitioned the dataset into the cache once; every rank read its own shard
    assert proc.stdout.count("plexus-train: built the shard store ") == 1
    records, summary = read_log(log)
    np.testing.assert_allclose(losses(records), losses(reference["records"][:10]), atol=1e-5,
                               rtol=0)
    # the OGB evaluator sees every test node once: its accuracy is the run's own
    assert summary["dataset"] == "ogbn-arxiv.npz" and summary["world_size"] == 4
    assert summary["ogb"]["metric"] == "acc"
    assert summary["ogb"]["value"] == pytest.approx(summary["final"]["test_acc"], abs=1e-12)


# ---- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--grid", "2x2"], "bad grid '2x2'"),
    (["--grid", "2x0x1"], "bad grid"),
    (["--grid", "1x1x1", "--world-size", "2"], "has 1 ranks but --world-size is 2"),
    (["--grid", "1x1x1", "--dataset", "nope"], "unknown dataset spec 'nope'"),
    (["--grid", "1x1x1", "--dataset", "ogbn-arxiv"], "--root"),
    (["--grid", "1x1x1", "--dataset", "cora", "--root", "/nonexistent/dir"], "not a directory"),
    (["--grid", "1x1x1", "--dataset", "npz:/nonexistent/g.npz"], "not found"),
    (["--grid", "1x1x1", "--epochs", "-1"], "--epochs must be >= 0"),
    (["--grid", "1x1x1", "--dropout", "1"], "--dropout must be in [0, 1)"),
    (["--grid", "1x1x1", "--lr", "0"], "--lr must be > 0"),
    (["--grid", "1x1x1", "--order", "sideways"], "unknown order 'sideways'"),
    (["--grid", "1x1x1", "--order", "agg,combine,agg"], "lists 3 layers"),
    (["--grid", "1x1x1", "--resume"], "--resume needs --checkpoint"),
    (["--grid", "1x1x1", "--resume", "--checkpoint", "/nonexistent/ck"], "no checkpoint"),
    (["--grid", "1x1x1", "--shards", "/nonexistent/store"], "not a shard store"),
    (["--grid", "1x1x1", "--log-json", "/"], "--log-json /: is a directory"),
    (["--grid", "1x1x1", "--epochs", "ten"], "invalid int value"),
    (["--grid", "1x1x1", "--no-such-option"], "unrecognized arguments"),
    (["--grid", "1x1x1", "--comm-dtype", "bf16", "--dtype", "fp16"], "--comm-dtype bf16 needs "
                                                                     "--dtype fp32"),
    (["--grid", "1x1x1", "--keep-input", "on", "--learnable-features"],
     "--keep-input on needs fixed input features"),
    (["--grid", "1x1x1", "--comm-dtype", "fp8"], "invalid choice: 'fp8'"),
])
def test_bad_input_is_one_line_and_status_2(args, message, capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert_one_line(err, prog="plexus-train")
    assert message in err


def test_grid_must_match_the_launchers_world_size(capsys, monkeypatch):
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    assert main(["--grid", "1x2x2"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("plexus-train: error: grid 1x2x2 has 4 ranks but the launcher started"
                           " 2; make X·Y·Z equal the world size")


def test_incompatible_checkpoint_is_refused(tmp_path, capsys):
    def save(directory, model, dataset):
        payload = ckpt.make_checkpoint({"epoch": 3, "params": {}, "adam": {}}, model,
                                       TrainConfig(), dataset)
        ckpt.save_checkpoint(directory, payload)

    cora = ckpt.DatasetInfo("cora", 2708, 1433, 7)
    save(tmp_path / "wide", ModelConfig(hidden=32), cora)
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "wide"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "incompatible model: hidden 32 (now 16)")
    save(tmp_path / "elu", ModelConfig(activation="elu"), cora)  # the same parameters
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "elu"), "--resume"]) == 2
    assert_one_line(capsys.readouterr().err, "incompatible model: activation 'elu' (now 'relu')")
    save(tmp_path / "other", ModelConfig(), ckpt.DatasetInfo("citeseer", 3327, 3703, 6))
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "other"), "--resume"]) == 2
    assert "was trained on citeseer" in capsys.readouterr().err
    # same name and sizes, other content (e.g. another --seed of a generated graph)
    save(tmp_path / "content", ModelConfig(), ckpt.DatasetInfo("cora", 2708, 1433, 7, "0" * 64))
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "content"), "--resume"]) == 2
    assert "was trained on another cora (N=2708, F=1433, C=7): the graph's content differs" \
        in capsys.readouterr().err
    # a checkpoint already past --epochs
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "content"), "--resume",
                 "--epochs", "2"]) == 2
    assert "is at epoch 3, past --epochs 2; give --epochs 3 or more" in capsys.readouterr().err
    # a file that is not a checkpoint's structure
    (tmp_path / "bad").mkdir()
    torch.save({"format": 1, "state": {"epoch": "three"}}, tmp_path / "bad" / "checkpoint.pt")
    assert main(["--grid", "1x1x1", "--checkpoint", str(tmp_path / "bad"), "--resume"]) == 2
    assert "not a plexus-train checkpoint" in capsys.readouterr().err


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_command_line_errors_exit_2_without_traceback():
    proc = train("--grid", "2x2x2", "--dataset", "nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("plexus-train: error: unknown dataset spec")
    assert_one_line(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


# ---- units ---------------------------------------------------------------------------------
def test_environment_detection():
    assert detect_environment({}) is None
    tr = detect_environment({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                             "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"})
    assert (tr.kind, tr.rank, tr.world_size, tr.local_rank, tr.local_world_size,
            tr.master_addr, tr.master_port) == ("torchrun", 3, 4, 1, 2, "n1", 1234)
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
             "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "MASTER_ADDR": "n0"}
    job = detect_environment(slurm)
    assert (job.kind, job.rank, job.world_size, job.local_rank, job.local_world_size,
            job.master_port) == ("slurm", 5, 8, 1, 4, 29500)
    # an allocation without an srun step (salloc, the batch script itself) is no launcher
    assert detect_environment({k: v for k, v in slurm.items() if k != "SLURM_STEP_ID"}) is None
    assert detect_environment({**slurm, "SLURM_NTASKS": "1"}) is None  # srun --pty bash
    assert detect_environment({**slurm, "SLURM_STEP_ID": "4294967291"}) is None  # batch step
    with pytest.raises(LaunchError, match="MASTER_ADDR"):
        detect_environment({k: v for k, v in slurm.items() if k != "MASTER_ADDR"})
    assert slurm_tasks_on_node("2(x3),1", 3) == 1 and slurm_tasks_on_node("2(x3),1", 2) == 2
    assert threads_per_worker(8, cores=2, environ={}) == 1
    assert threads_per_worker(2, cores=16, environ={}) == 8


def test_json_log_appears_only_when_complete(tmp_path):
    path = tmp_path / "log.json"
    log = JsonLog(path)
    log.write({"epoch": 1, "loss": float("nan")})
    assert not path.exists() and path.with_name("log.json.tmp").exists()
    log.close()
    assert json.loads(path.read_text()) == {"epoch": 1, "loss": None}
    assert not path.with_name("log.json.tmp").exists()


@pytest.mark.slow
def test_summary_records_measured_memory_per_rank(tmp_path):
    import time

    log = tmp_path / "run.json"
    begun = time.time()
    proc = train("--grid", "2x1x1", "--epochs", "3", "--log-json", str(log), timeout=600)
    took = time.time() - begun
    assert proc.returncode == 0, proc.stderr
    summary = read_log(log)[1]
    # the wall time counts from the command's start: start-up (interpreter, imports, starting
    # the workers) is its own part, and the total is most of what the command took (not the
    # workers' exit after the summary); it was 1.5 s of 10.9 before start-up was counted
    wall = summary["wall_time"]
    assert summary["startup_from"] == "the command's start" and wall["startup_s"] > 0.5
    assert 0.6 * took < wall["total_s"] <= took
    assert "wall time: " in proc.stdout and " = start-up " in proc.stdout
    memory = summary["memory"]
    assert set(memory) == {"peak_rss_bytes", "tracked_peak_bytes", "cuda_peak_bytes",
                           "predicted_bytes", "predicted_setup_bytes", "train_peak_rss_bytes",
                           "setup_peak_rss_bytes", "predicted_bytes_per_rank",
                           "predicted_setup_bytes_per_rank"}
    assert memory["cuda_peak_bytes"] is None  # a CPU run
    assert len(memory["peak_rss_bytes"]) == len(memory["tracked_peak_bytes"]) == 2
    for rss, train_rss, tracked in zip(memory["peak_rss_bytes"], memory["train_peak_rss_bytes"],
                                       memory["tracked_peak_bytes"]):
        # tensors are part of what the process holds; a Cora rank holds megabytes of them
        assert 2**20 < tracked < rss
        assert train_rss is None or tracked < train_rss <= rss
    assert memory["predicted_bytes"] > 0
    # each rank's own figure, never above the one for the rank that holds the most
    assert len(memory["predicted_bytes_per_rank"]) == 2
    assert 0 < max(memory["predicted_bytes_per_rank"]) <= memory["predicted_bytes"]
    assert "memory per rank: peak RSS " in proc.stdout
    assert "; predicted " in proc.stdout and "; model " not in proc.stdout  # not the GNN's size


@pytest.mark.slow
def test_an_mlp_run_ends_with_its_summary(tmp_path):
    """An MLP reads no Â: its ranks hold no adjacency block, and the summary's graph record
    (gathered from every rank's share of Â) must not look one up (it raised KeyError)."""
    log = tmp_path / "mlp.json"
    proc = train_here("--model", "mlp", "--grid", "2x1x1", "--epochs", "2", "--log-json",
                      str(log))
    assert proc.returncode == 0, proc.stderr
    summary = read_log(log)[1]
    assert summary["graph"]["nnz"] == 0 and summary["graph"]["nodes"] == 2708


def test_device_flag(capsys):
    """--device cuda on a machine without CUDA: one line, status 2, before anything starts;
    --device cpu is the gloo path every CPU run takes."""
    from plexus_partition.launch.env import LaunchError, default_device, use_cuda
    from plexus.train import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["--grid", "1x1x1", "--epochs", "1", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "--device cuda: device cuda asked for, but CUDA is not available: this "
                    "torch is a CPU build")
    with pytest.raises(LaunchError, match="CUDA is not available"):
        use_cuda("cuda")
    assert default_device("cpu").type == "cpu" and default_device(None).type == "cpu"
    assert main(["--grid", "1x1x1", "--epochs", "1", "--device", "cpu", "--quiet"]) == 0


# ---- no --grid: --grid auto over this machine's cores ---------------------------------------
def test_no_grid_is_grid_auto_over_the_local_cores(capsys, monkeypatch):
    """Without --grid (or with --grid auto and no --world-size) outside a launcher, the
    performance model picks a grid of one rank per CPU core and one line says so."""
    import plexus_partition.launch.env as env_module
    from plexus.train.cli import build_plan, build_parser

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the default is one rank per GPU")
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(env_module, "available_cores", lambda: 3)
    for argv in ([], ["--grid", "auto"]):
        opts = launched(build_parser().parse_args(argv))
        line = capsys.readouterr().out
        assert opts.grid is not None and opts.grid.world_size == 3, argv
        assert line.startswith(f"plexus-train: --grid auto: chose {opts.grid} for 3 ranks, one "
                               "per CPU core here (predicted epoch "), line
        assert line.count("\n") == 1, line
    # --world-size still sets the count; a given grid is taken as it is, silently
    opts = launched(build_parser().parse_args(["--world-size", "2"]))
    assert opts.grid.world_size == 2 and "for 2 ranks (predicted" in capsys.readouterr().out
    opts = launched(build_parser().parse_args(["--grid", "1x1x1"]))
    assert str(opts.grid) == "1x1x1" and capsys.readouterr().out == ""


def test_the_launcher_resolves_the_plan_once_and_a_launched_rank_the_same_way(tmp_path):
    """The launching process of a local run resolves the run's one plan before any worker
    starts: the grid of --grid auto, the graph's sizes, the memory and output checks; a rank of
    torchrun/srun gets the same request from the same function and resolves it once it has
    joined (`plexus.train.resolve`). Defaults come from the configurations themselves."""
    from dataclasses import fields

    from plexus_partition.model.layout import DEFAULT_PERMUTATION
    from plexus_partition.launch.env import JobEnv
    from plexus.train.cli import build_plan, build_parser
    from plexus.train.plan import CHECKPOINT_EVERY, ResolvedRun, RunRequest

    argv = ["--grid", "auto", "--world-size", "2", "--quiet", "--log-json",
            str(tmp_path / "log.json")]
    launcher = launched(build_parser().parse_args(argv))
    assert isinstance(launcher, ResolvedRun) and launcher.grid.world_size == 2
    # Cora: 2708 nodes, 10556 directed edges plus a self loop each in Â, 1433 features, 7 classes
    s = launcher.sizes
    assert (s.num_nodes, s.nnz, s.num_features, s.num_classes) == (2708, 10556 + 2708, 1433, 7)
    assert not launcher.rank_checks_memory  # the launching process priced it from the graph
    assert (launcher.perm, launcher.checkpoint_every, launcher.train) == (
        DEFAULT_PERMUTATION, CHECKPOINT_EVERY, TrainConfig())
    env = JobEnv("torchrun", 0, 2, 0, 2, "127.0.0.1", 29500)
    rank = build_plan(build_parser().parse_args(argv), env)
    assert type(rank) is RunRequest and rank.grid is None  # resolved once the rank joined
    assert all(getattr(rank, f.name) == getattr(launcher, f.name)
               for f in fields(RunRequest) if f.name != "grid")


@pytest.mark.slow
def test_plexus_train_without_options_trains(tmp_path):
    """The bare command runs (here on one visible core: one rank, so the test stays cheap)."""
    import os
    import subprocess

    from cli_helpers import cli_env

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the default is one rank per GPU")
    core = min(os.sched_getaffinity(0))
    proc = subprocess.run(["plexus-train", "--epochs", "2"], env=cli_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert proc.returncode == 0, proc.stderr
    assert ("plexus-train: --grid auto: chose 1x1x1 for 1 ranks, one per CPU core here ("
            in proc.stdout), proc.stdout
    assert "summary: gcn 2x16 on cora, grid 1x1x1" in proc.stdout, proc.stdout
