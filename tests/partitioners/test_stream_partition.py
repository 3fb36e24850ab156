"""The out-of-core partitioner: the store it streams from disk (small chunks, several buckets,
several processes) is byte for byte the store `write_store` cuts from the graph in memory; a
killed run resumes to the same store; bad input is one typed error / one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli_env
from helpers import assert_one_line
from engine_checks import directed_toy_graph
from plexus_datasets import load_dataset
from plexus_datasets.diskgraph import DiskGraphError
from plexus_datasets.diskwrite import write_graph
from plexus_datasets.graph import DatasetError, normalize
from plexus_datasets.rmat import parse_rmat_params, rmat_graph
from plexus_datasets.base.tasks import CONSUMED
from plexus_datasets.work import Runner, read_marker
from plexus_partition import (make_permutation, partition_to_store, read_manifest, read_shard,
                                 shard_graph, write_store)
from plexus_partition import PartitionError, PartitionInterrupted
from plexus_partition.jobs import PoolRunner
from test_partitioners import coords_of, shape_of
from test_shard_store import assert_same_shard

SMALL = dict(chunk_edges=997, bucket_entries=1499)  # many chunks and buckets on small graphs
MIX = ["agg", "combine", "dense"]


def store_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def assert_same_store(a: Path, b: Path) -> None:
    """Same files, byte for byte (rank files and manifest)."""
    fa, fb = store_bytes(a), store_bytes(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        assert fa[name] == fb[name], name
    ma = read_manifest(a)
    assert [r["sha256"] for r in ma["ranks"]] == [r["sha256"] for r in read_manifest(b)["ranks"]]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def toy():
    return directed_toy_graph()


@pytest.mark.parametrize("grid,layers,orders,perm,aggregation,jobs", [
    ((2, 2, 2), 3, "agg", "double", "gcn", 2),
    ((2, 1, 2), 3, MIX, "balanced", "mean", 1),
    ((1, 3, 1), 2, "combine", "none", "sum", 2),
    ((3, 1, 1), 2, "agg", "single", "gcn", 1),
])
def test_cora_streamed_equals_in_memory(tmp_path, cora, grid, layers, orders, perm, aggregation,
                                        jobs):
    shape = shape_of(grid)
    write_store(cora, tmp_path / "mem", shape, layers, orders, perm, 3, aggregation=aggregation)
    disk = write_graph(cora, tmp_path / "graph")
    partition_to_store(disk, tmp_path / "disk", shape, layers, orders, perm, 3,
                       aggregation=aggregation, jobs=jobs, **SMALL)
    assert_same_store(tmp_path / "mem", tmp_path / "disk")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("perm,aggregation", [
    ("none", "gcn"), ("none", "mean"), ("single", "mean"), ("double", "sum"),
    ("balanced", "mean"), ("balanced", "sum"),
])
def test_directed_toy_every_permutation_and_aggregation(tmp_path, toy, perm, aggregation):
    """The directed toy graph (self loops, a node without in-neighbours), every permutation and
    every aggregation (with Cora's and R-MAT's cases, each pair of them): streamed (chunks of 7
    edges, buckets of 11 entries) equals in memory, and every shard equals `shard_graph`."""
    shape = shape_of((2, 1, 2))
    write_store(toy, tmp_path / "mem", shape, 3, MIX, perm, 1, aggregation=aggregation)
    partition_to_store(write_graph(toy, tmp_path / "g"), tmp_path / "disk", shape, 3, MIX, perm,
                       1, aggregation=aggregation, chunk_edges=7, bucket_entries=11)
    assert_same_store(tmp_path / "mem", tmp_path / "disk")
    adj_hat = normalize(toy.adj, toy.directed, aggregation)
    built = make_permutation(adj_hat, perm, 1, 4)
    for coords in coords_of(shape):
        want = shard_graph(toy, shape, coords, 3, MIX, built, 1, adj_hat=adj_hat,
                           aggregation=aggregation)
        assert_same_shard(want, read_shard(tmp_path / "disk", coords))


@pytest.mark.parametrize("spec,perm,aggregation,orders,jobs", [
    ("scale=12,edge_factor=8,features=6,classes=4", "balanced", "gcn", MIX, 2),
    ("scale=13,edge_factor=6,features=5,classes=3,seed=2", "double", "mean", "agg", 1),
    ("scale=14,edge_factor=4,features=4,classes=3", "single", "sum", "combine", 2),
])
def test_rmat_generated_in_pieces_equals_in_memory(tmp_path, spec, perm, aggregation, orders,
                                                   jobs):
    """``rmat:`` generated straight to disk in chunks, then partitioned in pieces, gives the store
    `write_store` cuts from `rmat_graph` in memory."""
    shape = shape_of((2, 2, 1))
    write_store(rmat_graph(**parse_rmat_params(spec)), tmp_path / "mem", shape, 3, orders, perm,
                0, aggregation=aggregation)
    partition_to_store(f"rmat:{spec}", tmp_path / "disk", shape, 3, orders, perm, 0,
                       aggregation=aggregation, jobs=jobs, chunk_edges=20_000,
                       bucket_entries=30_000)
    assert_same_store(tmp_path / "mem", tmp_path / "disk")
    assert leftovers(tmp_path) == []


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_memory_graph_with_jobs_and_the_cli_agree(tmp_path, toy):
    shape = shape_of((1, 2, 2))
    # the CLI records the kind it cuts for (--model, default gcn): the library is given it
    write_store(toy, tmp_path / "a", shape, 2, "agg", "double", 0, model="gcn")
    partition_to_store(toy, tmp_path / "b", shape, 2, "agg", "double", 0, jobs=2, chunk_edges=5,
                       bucket_entries=9, model="gcn")
    assert_same_store(tmp_path / "a", tmp_path / "b")
    write_graph(toy, tmp_path / "g")
    cmd = [sys.executable, "-m", "plexus_partition.cli", "--dataset", f"graph:{tmp_path / 'g'}",
           "--grid", "1x2x2", "--layers", "2", "--orders", "agg", "--perm", "double", "--out",
           str(tmp_path / "c"),
           "--jobs", "2", "--chunk-edges", "13", "--bucket-entries", "17"]
    done = subprocess.run(cmd, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "non-zeros/s per process, 2 processes" in done.stdout
    assert_same_store(tmp_path / "a", tmp_path / "c")


def _partition_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "plexus_partition.cli", "--dataset",
            "rmat:scale=13,edge_factor=8,features=8,classes=4", "--grid", "2x1x2", "--layers", "2",
            "--orders", "agg", "--out", str(out), "--chunk-edges", "4000", "--bucket-entries", "6000", "--verbose",
            *extra]


@pytest.mark.slow
def test_kill_9_mid_partition_keeps_the_old_store_and_a_rerun_resumes(tmp_path):
    """A real partition process (and its workers) killed with SIGKILL part-way; the previous
    store is untouched, and running the same command again finishes the finished tasks'
    remainder and writes the store an uninterrupted run writes."""
    out = tmp_path / "store"
    write_store(rmat_graph(scale=6, edge_factor=4, features=8, classes=4), out,
                shape_of((2, 1, 2)), 2)
    old = store_bytes(out)
    proc = subprocess.Popen(_partition_cmd(out, "--force", "--jobs", "2"), env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline, killed = time.time() + 120, False
    while time.time() < deadline and proc.poll() is None:
        markers = list(tmp_path.glob(".store.work-*/done/sort/*.json"))
        if len(markers) >= 3:
            os.kill(proc.pid, signal.SIGKILL)  # the pool's workers die with it
            killed = True
            break
        time.sleep(0.005)
    output = proc.communicate(timeout=30)[0]
    assert killed, f"the partition finished before it could be killed: {output[-3000:]}"
    assert store_bytes(out) == old
    time.sleep(0.5)  # the workers' parent-death signal
    done = subprocess.run(_partition_cmd(out, "--force"), env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    resumed = [line for line in done.stdout.splitlines() if "phase sort:" in line][0]
    run, total = (int(v) for v in resumed.split(", ")[1].split()[0].split("/"))
    assert 0 < run < total  # finished sort tasks were not redone
    fresh = tmp_path / "fresh"
    write_store(rmat_graph(scale=13, edge_factor=8, features=8, classes=4), fresh,
                shape_of((2, 1, 2)), 2, model="gcn")  # the CLI records its --model
    assert_same_store(out, fresh)
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_ranks_of_a_launcher_job_share_the_work(tmp_path, toy):
    """Two processes with the variables torchrun sets take a share of every phase each and
    write the store one process writes."""
    write_graph(toy, tmp_path / "g")
    write_store(toy, tmp_path / "one", shape_of((2, 2, 1)), 2, "agg", "balanced", 4,
                model="gcn")  # what the CLI records by default
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(2):
        env = dict(cli_env(), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, "-m", "plexus_partition.cli", "--dataset",
               f"graph:{tmp_path / 'g'}", "--grid", "2x2x1", "--layers", "2", "--orders", "agg",
               "--perm",
               "balanced", "--seed", "4", "--out", str(tmp_path / "two"), "--chunk-edges", "9",
               "--bucket-entries", "15", "--verbose"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert "2 processes" in outs[0][0] and outs[1][0] == ""
    assert_same_store(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow  # a tool's process or a world's ranks (issue 58: the slow rule at run time)
def test_ranks_of_a_launcher_job_share_the_nodes_blas_threads(tmp_path):
    """A rank of an srun job (no OMP_NUM_THREADS) keeps numpy's BLAS to its share of the node's
    cores (`init_process_group`), as PoolRunner's workers keep theirs to one: with a rank per
    core, one thread."""
    script = """
import json, os
from threadpoolctl import threadpool_info
from plexus_partition.jobs import GroupRunner
from plexus_partition.launch.env import JobEnv, available_cores
from plexus.runtime.local import free_port
env = JobEnv("slurm", 0, 1, 0, available_cores(), "127.0.0.1", free_port())
runner = GroupRunner(os.environ["WORK"], env, 60.0, progress=False)
print(json.dumps([pool["num_threads"] for pool in threadpool_info()]))
runner.close()
"""
    env = {k: v for k, v in cli_env().items()
           if not k.endswith("_NUM_THREADS") and k != "OPENBLAS_MAIN_FREE"}
    env["WORK"] = str(tmp_path / "work")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    threads = json.loads(done.stdout.splitlines()[-1])
    assert threads and max(threads) == 1


# --------------------------------------------------------------------------- bad input


def _damage(graph_dir: Path, how: str) -> None:
    header = json.loads((graph_dir / "graph.json").read_text())
    if how == "truncated":
        f = graph_dir / "src.npy"
        f.write_bytes(f.read_bytes()[:-5])
    elif how == "header lies":
        header["num_nodes"] += 1
        header["arrays"]["labels"]["shape"] = [header["num_nodes"]]
        header["arrays"]["features"]["shape"][0] = header["num_nodes"]
        from plexus_datasets.diskgraph import header_sha256  # noqa: PLC0415 - forge it well

        header["content_sha256"] = header_sha256(header)
        (graph_dir / "graph.json").write_text(json.dumps(header))
    elif how == "wrong dtype":
        np.save(graph_dir / "dst.npy", np.load(graph_dir / "dst.npy").astype(np.float64))
    elif how == "bad id":
        dst = np.load(graph_dir / "dst.npy")
        dst[len(dst) // 2] = header["num_nodes"] + 3
        np.save(graph_dir / "dst.npy", dst)
    elif how == "nan feature":
        x = np.load(graph_dir / "features.npy")
        x[5, 1] = np.nan
        np.save(graph_dir / "features.npy", x)
    elif how == "corrupt header":
        (graph_dir / "graph.json").write_text("{\"format\": \"plexus-graph\", \"vers")


BAD_DIRECTORIES = [("truncated", "src.npy: truncated"), ("header lies", "holds"),
                   ("wrong dtype", "dst.npy: holds float64"), ("bad id", "outside [0, "),
                   ("nan feature", "NaN/Inf in the features of node 5"),
                   ("corrupt header", "unreadable header")]


def _damaged(tmp_path: Path, toy, how: str) -> tuple[Path, list[str]]:
    """The toy graph written under ``tmp_path`` and damaged ``how``; the folder's names then."""
    g = tmp_path / "g"
    write_graph(toy, g)
    _damage(g, how)
    return g, sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("how,needle", BAD_DIRECTORIES)
def test_bad_graph_directory_is_one_line_and_exit_2_with_nothing_left(tmp_path, toy, how,
                                                                      needle):
    g, before = _damaged(tmp_path, toy, how)
    with pytest.raises(DiskGraphError) as err:
        partition_to_store(f"graph:{g}", tmp_path / "s", shape_of((2, 1, 1)), 2,
                           chunk_edges=50, bucket_entries=80)
    assert_one_line(err, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow  # the command line's own process (the library's cases are the table above)
@pytest.mark.parametrize("how,needle", [c for c in BAD_DIRECTORIES
                                        if c[0] in ("truncated", "nan feature")])
def test_a_bad_graph_directory_on_the_command_line_is_one_line_and_exit_2(tmp_path, toy, how,
                                                                         needle):
    g, before = _damaged(tmp_path, toy, how)
    cmd = [sys.executable, "-m", "plexus_partition.cli", "--dataset", f"graph:{g}", "--grid",
           "2x1x1", "--layers", "2", "--out", str(tmp_path / "s"), "--jobs", "2",
           "--chunk-edges", "50"]
    done = subprocess.run(cmd, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("plexus-partition: error: ") and needle in done.stderr
    assert_one_line(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_configuration_errors(tmp_path, toy):
    with pytest.raises(PartitionError, match="axis x has 64 ranks"):
        partition_to_store(toy, tmp_path / "s", shape_of((64, 1, 1)), 2)
    with pytest.raises(PartitionError, match="unknown aggregation"):
        partition_to_store(toy, tmp_path / "s", shape_of((2, 1, 1)), 2, aggregation="max")
    assert list(tmp_path.iterdir()) == []



def test_a_partition_job_is_a_frozen_value_its_phases_apart(tmp_path, toy):
    """`PartitionJob`: a frozen value; ``prepare`` checks and resolves without writing
    anything (bad values refused there, before any lock or work directory); ``convert`` of a
    graph in memory on one process is that graph; ``run`` writes the store the in-memory
    partitioner writes, byte for byte, through ``publish``."""
    import dataclasses

    from plexus_partition.pipeline import PartitionJob

    shape = shape_of((2, 1, 2))
    job = PartitionJob(toy, tmp_path / "disk", shape, 3, MIX, "double", 1, aggregation="mean",
                       chunk_edges=7, bucket_entries=11)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 2  # type: ignore[misc]
    prep = job.prepare()
    assert list(tmp_path.iterdir()) == []  # nothing written yet
    assert prep.out == tmp_path / "disk" and prep.aggregation == "mean" and prep.spec is None
    assert [p.order for p in prep.plans] == MIX and prep.key is None  # in memory: no resuming
    assert job.convert(prep, None, tmp_path / "w") is prep.source  # type: ignore[arg-type]
    with pytest.raises(PartitionError, match="jobs must be >= 1"):
        dataclasses.replace(job, jobs=0).prepare()
    with pytest.raises(PartitionError, match="orders 'auto' need the hidden width"):
        dataclasses.replace(job, orders="auto").prepare()
    assert list(tmp_path.iterdir()) == []
    write_store(toy, tmp_path / "mem", shape, 3, MIX, "double", 1, aggregation="mean")
    manifest = job.run()
    assert_same_store(tmp_path / "mem", tmp_path / "disk")
    assert manifest == read_manifest(tmp_path / "disk")
    assert leftovers(tmp_path) == []

def test_a_job_cut_alone_is_no_rank_of_the_launchers_group(tmp_path, monkeypatch):
    """plexus-train's cache cuts a store on rank 0 (in a child process) while its peers wait:
    under torchrun that cut joined the job's group as if every rank took part, and waited at
    its first phase's barrier for ranks that never came (a scaling sweep's R-MAT 17 run on 1x1x4
    hung). ``alone=True`` partitions in this process whatever the launcher says."""
    from plexus_partition.pipeline import PartitionJob

    for key, value in {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "29555"}.items():
        monkeypatch.setenv(key, value)
    job = PartitionJob("rmat:scale=6,edge_factor=4,features=8,classes=3", tmp_path / "s",
                       shape_of((2, 1, 2)), 2, "agg")
    assert job.prepare().env.world_size == 4  # a rank of the torchrun job (the CLI's case)
    assert PartitionJob("rmat:scale=6,edge_factor=4,features=8,classes=3", tmp_path / "s",
                        shape_of((2, 1, 2)), 2, "agg", alone=True).prepare().env is None


def test_a_graph_without_edges(tmp_path):
    import scipy.sparse as sp

    from plexus_datasets.graph import Graph

    n = 13
    g = Graph("empty", sp.csr_matrix((n, n), dtype=np.float32), np.ones((n, 3), np.float32),
              np.arange(n) % 2, np.arange(n) < 4, np.arange(n) == 5, np.arange(n) == 6, 2)
    shape = shape_of((2, 1, 2))
    write_store(g, tmp_path / "mem", shape, 2, "agg", "double", 0)
    partition_to_store(write_graph(g, tmp_path / "g"), tmp_path / "disk", shape, 2)
    assert_same_store(tmp_path / "mem", tmp_path / "disk")
    assert read_manifest(tmp_path / "disk")["nnz"] == n  # the self loops of Â only


def _die_on_three(i: int) -> dict:
    if i == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return {"i": i}


def test_a_worker_that_dies_ends_the_run_and_keeps_the_finished_tasks(tmp_path):
    with PoolRunner(tmp_path, 2, progress=False) as runner:
        with pytest.raises(PartitionInterrupted, match="run the same command again"):
            runner.run("phase", _die_on_three, [(i,) for i in range(6)])
    finished = {i for i in range(6) if (tmp_path / "done" / "phase" / f"{i:06d}.json").exists()}
    assert 3 not in finished
    with PoolRunner(tmp_path, 2, progress=False) as runner:  # a rerun redoes only what is left
        results = runner.run("phase", _rerun, [(i,) for i in range(6)])
    assert results == [{"i": i} if i in finished else {"rerun": i} for i in range(6)]


def _rerun(i: int) -> dict:
    return {"rerun": i}


def _consume(folder: str, i: int) -> dict:
    if i == 3:
        raise ValueError("task 3 fails")
    return {"i": i, CONSUMED: [str(Path(folder) / f"in{i}")]}


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_task_removes_the_inputs_it_consumed_only_once_its_marker_is_written(tmp_path, jobs):
    """The sort and dedup tasks' way of freeing their inputs: removed after the task's marker
    (which does not list them), kept when the task fails, so a rerun finds them."""
    for i in range(4):
        (tmp_path / f"in{i}").mkdir()
        (tmp_path / f"in{i}" / "part.npy").write_bytes(b"x")
    work = tmp_path / "work"
    tasks = [(str(tmp_path), i) for i in range(4)]
    with (PoolRunner(work, jobs, progress=False) if jobs > 1 else Runner(work, False)) as runner:
        with pytest.raises(ValueError, match="task 3 fails"):
            runner.run("phase", _consume, tasks)
    assert (tmp_path / "in3" / "part.npy").exists()
    for i in range(3):
        assert not (tmp_path / f"in{i}").exists()
        marker = work / "done" / "phase" / f"{i:06d}.json"
        assert read_marker(marker) == {"i": i}


@pytest.mark.parametrize("phase,crash_in", [("canon-dedup", "scan_pieces"), ("sort", "ranks")])
def test_a_lost_marker_of_a_consuming_task_is_a_damaged_work_directory(tmp_path, monkeypatch,
                                                                      phase, crash_in):
    """A dedup or sort task removes its inputs once recorded; if its marker is lost afterwards
    (deleted by hand, an unsynced file after a power cut), the rerun must not cut a store
    without those entries: it stops, one typed line, naming the damaged work directory."""
    from plexus_partition import rankfile, stream

    g = tmp_path / "g"
    write_graph(rmat_graph(scale=8, edge_factor=4, features=4, classes=3), g)  # coo: canon runs

    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(*((stream, "scan_pieces", crash) if crash_in == "scan_pieces"
                          else (rankfile, "rank_task", crash)))
    run = dict(chunk_edges=400, bucket_entries=600)
    with pytest.raises(RuntimeError, match="killed"):
        partition_to_store(f"graph:{g}", tmp_path / "s", shape_of((2, 1, 2)), 2, **run)
    monkeypatch.undo()
    markers = sorted(tmp_path.glob(f".s.work-*/**/done/{phase}/*.json"))
    assert len(markers) > 1
    markers[0].unlink()
    with pytest.raises((PartitionError, DatasetError),
                       match="work directory is damaged") as err:
        partition_to_store(f"graph:{g}", tmp_path / "s", shape_of((2, 1, 2)), 2, **run)
    assert_one_line(err)
    assert not (tmp_path / "s").exists()
