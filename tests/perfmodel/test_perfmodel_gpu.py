"""The performance model on GPU clusters: links priced by placement, node profiles, GPU
calibration files (written from injected timings: no GPU here), the GPU memory flag, and what
every prediction says priced it.

No timing assertions: every number checked here is arithmetic.
"""

from __future__ import annotations

import itertools
import json

import pytest

from helpers import assert_one_line
from plexus_partition.model.grid import GridShape
from plexus_partition.model.ops.base import FUSED_DROPOUT_PASSES
from plexus_datasets.ogb_loader import OGB_NAMES
from plexus_datasets.ogb_sizes import OGB_SIZES, ogb_sizes
from plexus.perfmodel import (UNCALIBRATED, Calibration, CalibrationError, ModelSpec, Placement,
                              collectives, epoch_compute, load_calibration, load_profile,
                              partition_memory, estimate, profile_names, resolve_calibration)
from plexus.perfmodel.calibration import write_calibration
from plexus.perfmodel.cli import model_main
from plexus.perfmodel.gpucal import cuda_document, link_groups, measure_compute
from plexus.core.units import format_bytes

INTRA = (2e-6, 1 / 300e9)
INTER = (1e-5, 1 / 25e9)


def cluster(**extra) -> Calibration:
    return Calibration.from_dict({
        "spmm_flops": 1e12, "gemm_flops": 2e13, "elementwise_rate": 2e11, "device": "cuda",
        "gpus_per_node": 4, "nodes": 2,
        "links": {"intra": {"alpha": INTRA[0], "beta": INTRA[1]},
                  "inter": {"alpha": INTER[0], "beta": INTER[1]}}, **extra}, source="test")


# ---- placement and links ---------------------------------------------------------------------
def test_axis_links_match_where_the_ranks_sit():
    # every grid of 8 and 16 ranks on nodes of 2, 4 and 8: an axis is intra exactly when each
    # of its groups (ranks differing only in that coordinate) lies in one node
    for world, per_node in itertools.product((8, 16), (2, 4, 8)):
        for grid in GridShape.factorizations(world):
            links = Placement(per_node).axis_links(grid.as_dict())
            for axis in "xyz":
                groups = {}
                for r in range(world):
                    c = grid.coords(r)
                    groups.setdefault(tuple(v for a, v in c.items() if a != axis), []).append(r)
                nodes = [[r // per_node for r in g] for g in groups.values()]
                inside = all(len(set(n)) == 1 for n in nodes)
                # "strided4" / "strided": every node of every group holds 4+ / 2+ of its ranks
                least = min(min(n.count(v) for v in set(n)) for n in nodes)
                want = ("intra" if inside else "strided4" if least >= 4 else
                        "strided" if least >= 2 else "inter")
                assert links[axis] == want, (grid, per_node, axis)


def test_two_node_placement_priced_by_hand():
    # 2x2x2 on 2 nodes of 4 GPUs: ranks (x·2 + y)·2 + z, node = rank // 4 = x; z and y stay in
    # a node (intra), x crosses it (inter)
    spec = ModelSpec.of(4096, 40_000, 64, 8, num_layers=2, hidden=32, order="agg")
    cal = cluster()
    p = estimate(spec, (2, 2, 2), cal, placement=Placement(4))
    assert p.links == {"x": "inter", "y": "intra", "z": "intra"}
    by_hand = {"x": 0.0, "y": 0.0, "z": 0.0}
    for c in collectives(spec, (2, 2, 2)):
        alpha, beta = INTER if c.axis == "x" else INTRA
        by_hand[c.axis] += c.steps * alpha + c.elements * 4 * beta
    assert p.comm_s_per_axis == pytest.approx(by_hand)
    assert by_hand["x"] > 0 and by_hand["y"] > 0 and by_hand["z"] > 0
    # on one node of 8 every axis is intra
    one = estimate(spec, (2, 2, 2), cal, placement=Placement(8))
    assert set(one.links.values()) == {"intra"} and one.comm_s < p.comm_s


def test_bf16_rates_price_a_bf16_run():
    spec = ModelSpec.of(4096, 40_000, 64, 8, num_layers=2, hidden=32, dtype_bytes=2)
    cal = cluster(precisions={"bf16": {"spmm_flops": 4e12, "gemm_flops": 3e14,
                                       "elementwise_rate": 5e11}})
    comp = epoch_compute(spec, (1, 1, 1))
    p = estimate(spec, (1, 1, 1), cal)
    assert p.compute_s == pytest.approx(comp.spmm_flops / 4e12 + comp.gemm_flops / 3e14
                                        + comp.elementwise / 5e11)


# ---- profiles and calibration files ----------------------------------------------------------
def test_profiles_name_their_source_and_round_trip(tmp_path):
    assert {"perlmutter-a100", "dgx-h100"} <= set(profile_names())
    for name in profile_names():
        prof = load_profile(name)
        assert prof.profile == name and prof.reference and name in prof.label
        assert not prof.calibrated and {"intra", "inter"} <= {c for c, _, _ in prof.links}
        path = write_calibration(prof.to_dict(), tmp_path / f"{name}.json")
        back = load_calibration(path)
        for field in ("spmm_flops", "gemm_flops", "elementwise_rate", "links", "precisions",
                      "device", "gpu", "device_memory", "gpus_per_node", "profile",
                      "reference"):
            assert getattr(back, field) == getattr(prof, field), (name, field)


@pytest.mark.parametrize("change, named", [
    ({"links": {"inter": {"alpha": 1e-5, "beta": 4e-11}}}, "'intra' is missing"),
    ({"links": {"intra": {"alpha": 1e-6, "beta": 1e-12}}, "nodes": 2}, "'inter' is missing"),
    ({"links": {"intra": {"alpha": 1e-6}}}, "links.intra must be"),
    ({"links": {"nvlink": {"alpha": 1e-6, "beta": 1e-12}}}, "links.nvlink must be"),
    ({"links": {"intra": {"alpha": 1e-6, "beta": 0}}}, "links.intra.beta must be a positive"),
    ({"gemm_flops": -2.0}, "gemm_flops must be a positive"),
    ({"precisions": {"bf16": {"spmm_flops": 0, "gemm_flops": 1e14,
                              "elementwise_rate": 1e11}}}, "precisions.bf16.spmm_flops"),
])
def test_bad_calibration_file_refused(tmp_path, capsys, change, named):
    doc = {"spmm_flops": 1e12, "gemm_flops": 2e13, "device": "cuda", "gpus_per_node": 4,
           "links": {"intra": {"alpha": 1e-6, "beta": 1e-12}}, **change}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CalibrationError, match=named):
        load_calibration(path)
    assert model_main(["-G", "8", "--nodes", "100", "--nnz", "1000", "--features", "8",
                       "--classes", "2", "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "plexus-model: error:", named.split()[0])


def test_placement_across_nodes_needs_the_inter_class(tmp_path, capsys):
    one_node = cluster(nodes=1, links={"intra": {"alpha": 1e-6, "beta": 1e-12}})
    spec = ModelSpec.of(4096, 40_000, 64, 8)
    estimate(spec, (2, 2, 1), one_node, placement=Placement(4))  # fits in the node: fine
    with pytest.raises(CalibrationError, match="no 'inter' link class"):
        estimate(spec, (2, 2, 2), one_node, placement=Placement(4))
    path = write_calibration({**one_node.to_dict(), "source": "x"}, tmp_path / "one.json")
    assert model_main(["--gpus", "8", "--gpus-per-node", "4", "--nodes", "4096", "--nnz",
                       "40000", "--features", "64", "--classes", "8", "--calibration",
                       str(path)]) == 2
    assert "calibrate across nodes" in capsys.readouterr().err


# ---- GPU calibration from injected timings ---------------------------------------------------
def test_link_groups_by_hand():
    assert link_groups(8, 4) == {"intra": [[0, 1, 2, 3], [4, 5, 6, 7]],
                                 "inter": [[0, 4], [1, 5], [2, 6], [3, 7]]}
    assert link_groups(4, 4) == {"intra": [[0, 1, 2, 3]]}
    assert link_groups(1, 1) == {}


def test_cuda_calibration_document_from_injected_timings(tmp_path):
    torch = pytest.importorskip("torch")
    seconds = 2e-3

    def timer(fn, reps):  # runs the kernel once (shapes checked), reports a fixed time
        fn()
        return seconds

    fp32 = measure_compute(torch.device("cpu"), "fp32", timer, quick=True,
                           mask_pass=lambda x: x * 2)
    spmm = fp32["measurements"]["spmm"][0]
    assert spmm["flops"] == pytest.approx(2 * spmm["nnz"] * spmm["width"] / seconds)
    mask = fp32["measurements"]["elementwise"][1]
    assert mask["op"] == "dropout_mask"
    assert mask["rate"] == pytest.approx(FUSED_DROPOUT_PASSES * mask["elements"] / seconds)
    bf16 = {**fp32, "spmm_flops": 2 * fp32["spmm_flops"]}  # (CPU torch has no bf16 CSR SpMM)
    # link records made from known α-β pairs: the fit recovers them per class
    pairs = {"intra": (3e-6, 1 / 200e9), "inter": (2e-5, 1 / 20e9)}
    timed = {}
    for cls, (alpha, beta) in pairs.items():
        p = 4 if cls == "intra" else 2
        timed[cls] = [{"op": op, "world": p, "elements": n,
                       "seconds": (2 if op == "all_reduce" else 1) * (p - 1)
                       * (alpha + n / p * 4 * beta)}
                      for op in ("all_reduce", "all_gather") for n in (1, 4096, 1 << 20)]
    doc = cuda_document({"fp32": fp32, "bf16": bf16}, timed, "Fake GPU", 80e9, 8, 4, "x")
    cal = load_calibration(write_calibration(doc, tmp_path / "gpu.json"))
    assert cal.device == "cuda" and cal.gpu == "Fake GPU" and cal.gpus_per_node == 4
    for cls, (alpha, beta) in pairs.items():
        assert cal.link_class(cls) == pytest.approx((alpha, beta), rel=1e-6)
    assert cal.rates(2)[0] == pytest.approx(2 * fp32["spmm_flops"])
    assert "Fake GPU" in cal.label and cal.calibrated


def test_calibrate_cuda_without_a_gpu_is_one_line(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: benchmarks/gpu_model_checks.sh calibrates it")
    from plexus.perfmodel.benchcli import bench_main

    assert bench_main(["calibrate", "--device", "cuda", "--out", "/nonexistent/x.json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "plexus-bench: error: --device cuda: no CUDA device here; calibrate on " \
                      "a GPU node"


# ---- plexus-model on a GPU cluster -----------------------------------------------------------
def test_papers100m_on_gpus_without_data(capsys):
    assert model_main(["--dataset", "ogbn-papers100M", "--gpus", "64,256,1024",
                       "--gpus-per-node", "4", "--top", "3"]) == 0
    out = capsys.readouterr().out
    for world in (64, 256, 1024):
        assert f"world size {world}:" in out
    assert "calibration: profile perlmutter-a100" in out and "docs.nersc.gov" in out
    assert "published sizes" in out and "inter" in out and "intra" in out
    sizes = OGB_SIZES["ogbn-papers100M"]
    spec = ModelSpec(sizes.num_nodes, sizes.gcn_nnz, sizes.num_features, sizes.num_classes)
    assert f"takes {format_bytes(partition_memory(spec, True))} in one process (out of core)" \
        in out


def test_gpu_memory_flags_grids_that_do_not_fit(capsys):
    args = ["--dataset", "ogbn-papers100M", "--gpus", "8", "--profile", "dgx-h100",
            "--hidden", "128", "--layers", "3", "--json"]
    assert model_main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory_limit"] == load_profile("dgx-h100").device_memory
    configs = doc["worlds"][0]["configs"]
    assert all(c["fits"] == (c["memory_bytes"] <= doc["memory_limit"]) for c in configs)
    assert not configs[0]["fits"]  # papers100M on 8 GPUs: none fits
    assert model_main(args[:-1]) == 0
    out = capsys.readouterr().out
    assert "(over GPU's" in out and "none of the 10 grids fits" in out


def test_predictions_say_what_priced_them(tmp_path, capsys, monkeypatch):
    sizes = ["--nodes", "4096", "--nnz", "40000", "--features", "64", "--classes", "8"]
    monkeypatch.delenv("PLEXUS_CALIBRATION", raising=False)
    assert model_main(["-G", "4", *sizes]) == 0
    assert f"calibration: {UNCALIBRATED}" in capsys.readouterr().out
    cpu = write_calibration({"spmm_flops": 1e9, "gemm_flops": 1e10, "alpha": 1e-4,
                             "beta": 1e-9}, tmp_path / "cpu.json")
    monkeypatch.setenv("PLEXUS_CALIBRATION", str(cpu))  # found without a flag
    assert model_main(["-G", "4", *sizes]) == 0
    assert f"calibration: calibration {cpu} (cpu)" in capsys.readouterr().out
    assert resolve_calibration(environ={"PLEXUS_CALIBRATION": str(cpu)}).source == str(cpu)
    # the memory model is a GPU's only for GPU ranks (--gpus, or a GPU calibration/profile)
    monkeypatch.delenv("PLEXUS_CALIBRATION")
    for extra, device in (([], "cpu"), (["--profile", "dgx-h100"], "cuda")):
        assert model_main(["-G", "4", *sizes, "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["spec"]["device"] == device
    assert resolve_calibration(gpus_per_node=8).profile == "dgx-h100"
    assert resolve_calibration().label == UNCALIBRATED


def test_grid_auto_line_names_its_calibration(tmp_path):
    pytest.importorskip("torch")
    from plexus_partition.model.model import ModelConfig
    from plexus.train.plan import auto_grid_choice

    spec = ModelSpec(4096, 40_000, 64, 8, ModelConfig())
    _, line = auto_grid_choice(4, spec)
    assert UNCALIBRATED in line and "plexus-bench calibrate" in line
    cpu = load_calibration(write_calibration(
        {"spmm_flops": 1e9, "gemm_flops": 1e10, "alpha": 1e-4, "beta": 1e-9, "cores": 2},
        tmp_path / "cpu.json"))
    grid, line = auto_grid_choice(4, spec, calibration=cpu, ranks_per_host=4)
    assert f"priced with calibration {tmp_path / 'cpu.json'}" in line
    assert UNCALIBRATED not in line and grid.world_size == 4


def test_recipe_and_ogb_sizes_in_plexus_model(capsys):
    pytest.importorskip("torch")
    from plexus.api.recipes import get_recipe

    assert set(OGB_SIZES) == set(OGB_NAMES) and ogb_sizes("OGBN-ARXIV").num_nodes == 169_343
    assert model_main(["--recipe", "ogbn-papers100M-gcn", "-G", "8", "--hidden", "64",
                       "--json"], recipe_lookup=get_recipe) == 0
    doc = json.loads(capsys.readouterr().out)
    model = doc["spec"]["model"]
    assert doc["spec"]["name"] == "ogbn-papers100M" and model["num_layers"] == 3
    assert model["hidden"] == 64 and model["learnable_features"] and not model["bias"]
    # arxiv's recipe symmetrizes a directed graph: both directions of every edge
    assert model_main(["--recipe", "ogbn-arxiv-gcn", "-G", "2", "--json"],
                      recipe_lookup=get_recipe) == 0
    arxiv = OGB_SIZES["ogbn-arxiv"]
    assert json.loads(capsys.readouterr().out)["spec"]["nnz"] == 2 * arxiv.edges \
        + arxiv.num_nodes


def test_a_cluster_calibration_feeds_plexus_sweep(tmp_path, monkeypatch):
    """$PLEXUS_CALIBRATION reaches a sweep: its report prices with that file (copied into the
    folder, nothing measured) and its --grids auto plans with it, as plexus-train does."""
    pytest.importorskip("torch")
    import plexus.perfmodel.measure as measure
    from plexus.studies.folder import ResultsFolder
    from plexus.studies.plan import SweepRequest, model_auto_grid, plan_runs
    from plexus.studies.sweep import CALIBRATION, measure_calibration

    monkeypatch.setattr(measure, "calibrate", lambda *a, **k: pytest.fail("measured"))
    gpu = write_calibration(cluster().to_dict(), tmp_path / "cluster.json")
    monkeypatch.setenv("PLEXUS_CALIBRATION", str(gpu))
    req = SweepRequest(dataset="cora", world_sizes=(8,), grids="auto", repeats=1)
    plans = plan_runs(req, lambda ds, w: GridShape(1, 1, w))
    folder = ResultsFolder(tmp_path / "res", create=True)
    assert measure_calibration(folder, plans, lambda line: None) is not None
    copied = load_calibration(folder.root / CALIBRATION)
    assert copied.links == cluster().links and copied.device == "cuda"
    # the sweep's auto grid is the one the file's rates make fastest: a bandwidth-starved node
    # link (1 us per byte) picks another grid than the built-in rates (a local sweep's 8 ranks
    # sit on this one host: the intra class)
    monkeypatch.setenv("PLEXUS_CALIBRATION", str(write_calibration(cluster(
        gpus_per_node=8, nodes=1, links={"intra": {"alpha": 1e-6, "beta": 1e-6}}
    ).to_dict(), tmp_path / "slow.json")))
    pick = model_auto_grid(req)("cora", 8)
    from plexus_datasets import gcn_nnz, load_dataset
    from plexus.engine.config import ModelConfig
    from plexus.perfmodel import choose_grid

    g = load_dataset("cora")
    spec = ModelSpec(g.num_nodes, gcn_nnz(g), g.num_features, g.num_classes, ModelConfig())
    slow = load_calibration(tmp_path / "slow.json")
    assert pick == GridShape.of(choose_grid(8, spec, slow, placement=Placement(8)))
    assert pick != GridShape.of(choose_grid(8, spec))


def test_hand_typed_sizes_show_the_out_of_core_partitioner(capsys):
    """Sizes given by hand do not say which partitioner runs: both peaks are printed, the
    out-of-core one from its fit (`partition_memory(streamed=True)`)."""
    assert model_main(["-G", "4", "--nodes", "100000000", "--nnz", "2000000000",
                       "--features", "128", "--classes", "10", "--top", "1"]) == 0
    out = capsys.readouterr().out
    spec = ModelSpec(100_000_000, 2_000_000_000, 128, 10)
    assert f"takes {format_bytes(partition_memory(spec))} in one process" in out
    assert f"({format_bytes(partition_memory(spec, True))} out of core" in out
