"""A run's request resolved once (`plexus.train.resolve.resolve`): the launching process's
`ResolvedRun` and rank 0's under torchrun/srun have a concrete grid and the graph's sizes, all
ranks build the same request, and a rank given a resolved run only reads and checks its shard.

The expectations are independent of the resolver: Cora's sizes known by hand, the grid given on
the command line or the one the store was cut for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from plexus_datasets import load_dataset
from plexus_partition.launch.env import JobEnv
from plexus_partition.model.grid import GridShape
from plexus.train.cli import build_parser, build_plan
from plexus.train.errors import UsageError
from plexus.train.plan import ResolvedRun, RunRequest
from plexus.perfmodel import Calibration
from plexus.train.resolve import resolve, resolve_at_launch, sizes_at_launch

# Cora: 2708 nodes; Â holds its 10556 directed edges and a self loop per node; 1433 features,
# 7 classes, undirected (Â = Âᵀ under the GCN aggregation), single-label
CORA = (2708, 10556 + 2708, 1433, 7, False, True)
STORE_GRID = "1x2x2"  # the store's: four ranks


def cora_sizes(run: ResolvedRun) -> tuple:
    s = run.sizes
    return s.num_nodes, s.nnz, s.num_features, s.num_classes, s.multilabel, s.symmetric


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Cora cut for `STORE_GRID` by plexus-partition."""
    from plexus_partition.cli import main as partition

    out = tmp_path_factory.mktemp("resolve") / "store"
    assert partition(["--dataset", "cora", "--grid", STORE_GRID, "--out", str(out)]) == 0
    return out


def torchrun(rank: int, world: int = 4) -> JobEnv:
    """The job environment torchrun gives rank ``rank`` of ``world`` on one host."""
    return JobEnv("torchrun", rank, world, rank, world, "127.0.0.1", 29500)


def plan(argv: list[str], env: JobEnv | None):
    """The options' request; a local run's (``env`` None) as its launching process resolves it."""
    request = build_plan(build_parser().parse_args([*argv, "--quiet"]), env)
    return request if env is not None else resolve_at_launch(request)


# ---- (a) no holes: the launcher's and a rank's resolved runs --------------------------------
@pytest.mark.parametrize("argv, grid", [
    (["--grid", "auto", "--world-size", "2"], None),  # chosen: any grid of 2 ranks
    (["--dataset", "cora", "--grid", "2x1x1"], "2x1x1"),
    (["--shards", "STORE"], STORE_GRID),
])
def test_the_launcher_resolves_a_grid_and_the_graphs_sizes(argv, grid, store):
    run = plan([str(store) if a == "STORE" else a for a in argv], None)
    assert isinstance(run, ResolvedRun)
    assert isinstance(run.grid, GridShape) and run.grid.world_size == (
        2 if grid is None else GridShape.parse(grid).world_size)
    if grid is not None:
        assert run.grid == GridShape.parse(grid)
    if argv[0] == "--shards":  # a manifest records neither the task kind nor Â's symmetry:
        assert cora_sizes(run)[:4] == CORA[:4] and run.rank_checks_memory  # the ranks price it
    else:
        assert cora_sizes(run) == CORA and not run.rank_checks_memory  # priced at launch


@pytest.mark.parametrize("argv", [["--grid", "auto"], ["--dataset", "cora", "--grid", "2x2x1"],
                                  ["--shards", "STORE"]])
def test_rank_0_resolves_the_request_every_rank_built_alike_with_no_holes(argv, store):
    """Under torchrun each of the 4 ranks builds the request (unresolved: it has not joined
    yet), all alike; rank 0 resolves it where the group exists (`resolved_by_rank_0` sends the
    run to the others): a run on 4 ranks with Cora's sizes, its memory left to the ranks."""
    argv = [str(store) if a == "STORE" else a for a in argv]
    requests = [plan(argv, torchrun(rank)) for rank in range(4)]
    assert all(type(r) is RunRequest for r in requests)
    assert all(r == requests[0] for r in requests[1:])
    resolution = resolve(requests[0], 4, Calibration(), ranks_per_host=4)
    # the rank that loaded the graph to learn its sizes cuts its shard from it
    assert (resolution.graph is None) == bool(requests[0].shards)
    if resolution.graph is not None:
        assert resolution.graph.num_nodes == CORA[0]
    run = resolution.run
    assert run.grid.world_size == 4 and run.rank_checks_memory  # no launcher priced it
    assert cora_sizes(run)[:4] == CORA[:4]
    if argv[0] == "--shards":
        assert run.grid == GridShape.parse(STORE_GRID)
    elif argv[1] != "auto":
        assert run.grid == GridShape.parse(argv[3])


def test_a_big_graph_is_resolved_by_rank_0_not_loaded_by_the_launcher(tmp_path, monkeypatch):
    """A graph too big to load in the launching process (here: any file) whose sizes its spec
    does not tell: the launcher learns no sizes and hands its workers the request, and rank 0
    resolves it from the graph it loads anyway."""
    import plexus.train.checks as checks

    g = load_dataset("cora")
    a = sp.csr_matrix(g.adj)
    np.savez(tmp_path / "g.npz", adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=np.array(a.shape), attr_matrix=g.features, labels=g.labels,
             train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    monkeypatch.setattr(checks, "PRECHECK_MAX_BYTES", 0)
    argv = ["--dataset", f"npz:{tmp_path / 'g.npz'}", "--grid", "2x1x1", "--no-cache"]
    request = plan(argv, None)
    assert type(request) is RunRequest and request.grid == GridShape.parse("2x1x1")
    assert sizes_at_launch(request) is None
    found = resolve(request, 2, Calibration(), ranks_per_host=2)
    assert found.graph is not None and found.run.rank_checks_memory
    assert found.run.grid == GridShape.parse("2x1x1") and cora_sizes(found.run) == CORA


def test_rank_0_resolving_checks_the_outputs_it_alone_writes(tmp_path):
    """Rank 0 writes the JSON log (and every other output) and is the rank that resolves: under
    torchrun a log path that is a folder is refused by its resolution."""
    argv = ["--dataset", "cora", "--grid", "2x1x1", "--log-json", str(tmp_path)]
    request = plan(argv, torchrun(0, world=2))
    assert type(request) is RunRequest
    with pytest.raises(UsageError, match="--log-json"):
        resolve(request, 2, Calibration(), ranks_per_host=2)



def test_resume_auto_is_decided_once_by_whoever_resolves(tmp_path, capsys):
    """Under torchrun every rank's request keeps ``--resume auto`` undecided; the resolution
    decides it once for the job (from whether the checkpoint file exists then) and says so once
    when it starts afresh; the ranks receive a plain yes or no."""
    ck = tmp_path / "ck"
    ck.mkdir()
    argv = ["--dataset", "cora", "--grid", "2x1x1", "--checkpoint", str(ck), "--resume", "auto"]
    requests = [build_plan(build_parser().parse_args(argv), torchrun(r, world=2))
                for r in range(2)]
    assert [r.resume for r in requests] == ["auto", "auto"]
    assert capsys.readouterr().out == ""  # no rank decided, nor said anything
    fresh = resolve(requests[0], 2, Calibration(), ranks_per_host=2).run
    assert fresh.resume is False
    said = capsys.readouterr().out.splitlines()
    assert said == [f"plexus-train: --resume auto: no checkpoint at {ck / 'checkpoint.pt'} "
                    "yet; starting from epoch 0"]
    (ck / "checkpoint.pt").write_bytes(b"the ranks read and check it (load_resume)")
    again = resolve(requests[0], 2, Calibration(), ranks_per_host=2).run
    assert again.resume is True and capsys.readouterr().out == ""

# ---- (c) a rank given a resolved run reads and checks its shard, and chooses nothing --------
def test_a_rank_given_a_resolved_run_never_chooses_a_grid(monkeypatch):
    import plexus.train.plan as plan_module
    import plexus.train.resolve as resolve_module
    from plexus.train.prepare import load_local

    run = plan(["--grid", "auto", "--world-size", "2"], None)
    assert isinstance(run, ResolvedRun)

    def chooser(*args, **kwargs):
        raise AssertionError("a rank given a resolved run chose a grid")

    for module, name in ((plan_module, "choose_run_grid"), (plan_module, "auto_grid_choice"),
                         (plan_module, "choose_grid"), (plan_module, "rank_configs"),
                         (resolve_module, "choose_run_grid")):
        monkeypatch.setattr(module, name, chooser)
    for rank in range(2):
        setup = load_local(run, rank, 2, torch.device("cpu"), 2)
        setup.release()
        assert setup.grid == run.grid and setup.shard.num_nodes == CORA[0]
        assert dict(setup.shard.coords) == run.grid.coords(rank)
    with pytest.raises(Exception, match="3"):  # the job's size must be the grid's
        load_local(run, 0, 3, torch.device("cpu"), 3)


def test_a_rank_refuses_a_shard_of_another_graph_than_it_was_resolved_for():
    from plexus.train.prepare import load_local

    run = plan(["--dataset", "cora", "--grid", "1x1x1"], None)
    other = replace(run, sizes=replace(run.sizes, num_nodes=CORA[0] + 1))
    with pytest.raises(UsageError, match="2708 nodes.*resolved for 2709"):
        load_local(other, 0, 1, torch.device("cpu"), 1)


def test_the_old_name_of_the_request_still_imports_with_a_warning():
    import plexus.train.plan as plan_module

    with pytest.warns(DeprecationWarning, match="RunRequest"):
        assert plan_module.RunPlan is RunRequest
