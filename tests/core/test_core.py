"""plexus.core: the grid value and the collective schedule's arithmetic."""

from __future__ import annotations

import os
import pickle

import pytest

from plexus_partition.model.grid import GridError, GridShape
from plexus_partition.model.layout import layer_plans, padding
from plexus_partition.model.schedule import (Collective, epoch_collectives, ring_steps, ring_volume,
                                  setup_collectives, volume_per_axis)
from plexus_datasets.base.writebehind import WriteBehind
from plexus.engine.dryrun import StageRecorder

RECORD = StageRecorder()  # every kind's collectives, from a dry run of its torch code


def test_grid_parse_format_and_forms():
    g = GridShape.parse(" 2X3x4 ")
    assert str(g) == "2x3x4" and g.dims == (2, 3, 4) and g.world_size == 24
    assert g == {"x": 2, "y": 3, "z": 4} and dict(g) == g.as_dict() == {"x": 2, "y": 3, "z": 4}
    assert g["y"] == 3 and list(g) == ["x", "y", "z"] and len(g) == 3
    for form in ("2x3x4", (2, 3, 4), [2, 3, 4], {"x": 2, "y": 3, "z": 4}, g):
        assert GridShape.of(form) == g
    assert hash(GridShape(2, 3, 4)) == hash(g) and pickle.loads(pickle.dumps(g)) == g


@pytest.mark.parametrize("text", ["2x2", "2x0x1", "axbxc", "2x2x2x2", "", "２x2x2", "1x1x-1"])
def test_grid_parse_refuses(text):
    with pytest.raises(GridError, match="expected XxYxZ"):
        GridShape.parse(text)


@pytest.mark.parametrize("args", [(0, 1, 1), (1.5, 1, 1), ("2", 1, 1), (True, 1, 1)])
def test_grid_sizes_are_positive_integers(args):
    with pytest.raises(GridError, match="must be a positive integer"):
        GridShape(*args)


def test_rank_coordinates_round_trip_in_rank_order():
    g = GridShape(2, 3, 4)
    coords = [g.coords(r) for r in range(g.world_size)]
    assert coords[:3] == [{"x": 0, "y": 0, "z": 0}, {"x": 0, "y": 0, "z": 1},
                          {"x": 0, "y": 0, "z": 2}]  # z is innermost
    assert coords[4] == {"x": 0, "y": 1, "z": 0} and coords[12] == {"x": 1, "y": 0, "z": 0}
    assert [g.rank(c) for c in coords] == list(range(24))
    with pytest.raises(GridError):
        g.coords(24)


def test_world_size_check_and_factorizations():
    GridShape(2, 2, 1).check_world(4)
    with pytest.raises(GridError, match="grid 2x2x1 has 4 ranks but the job has 8; make"):
        GridShape(2, 2, 1).check_world(8)
    facts = GridShape.factorizations(12)
    assert len(facts) == 18 and all(f.world_size == 12 for f in facts)
    assert len(set(facts)) == 18 and facts[0] == GridShape(1, 1, 12)


def test_ring_volume_and_steps():
    assert ring_volume("all_reduce", 100, 4) == pytest.approx(150)
    assert ring_volume("all_gather", 100, 4) == ring_volume("reduce_scatter", 100, 4) == 75
    assert ring_volume("all_reduce", 100, 1) == 0 and ring_steps("all_reduce", 4) == 6
    with pytest.raises(ValueError, match="unknown collective"):
        ring_volume("broadcast", 1, 2)


def test_schedule_leaves_out_size_one_axes_and_eval_is_extra():
    plans = layer_plans(2, "agg")
    shape = GridShape(2, 1, 1)
    pad = padding(shape, plans, 10, [4, 3, 2])
    train = epoch_collectives(plans, shape, pad, recorder=RECORD)
    assert {c.axis for c in train} == {"x"}
    full = epoch_collectives(plans, shape, pad, recorder=RECORD, evaluate=True)
    assert full[:len(train)] == train and {c.phase for c in full[len(train):]} == {"eval"}
    assert volume_per_axis(full, phases=("forward", "loss", "backward")) == \
        volume_per_axis(train)


def test_kept_input_gathers_the_features_once_at_set_up():
    """Fixed input features kept: the AG(H) of every forward (training and evaluation) leaves
    the epoch and appears once in the set-up, 10 nodes × 4 features gathered over the first
    stage's depth axis of 2 (each rank sends its 20); everything else is unchanged."""
    plans = layer_plans(2, "agg")
    depth = plans[0].depth
    shape = GridShape(**{a: (2 if a == depth else 1) for a in "xyz"})
    pad = padding(shape, plans, 10, [4, 3, 2])
    every = epoch_collectives(plans, shape, pad, recorder=RECORD, evaluate=True)
    kept = epoch_collectives(plans, shape, pad, recorder=RECORD, evaluate=True, kept_input=True)
    gathers = [c for c in every if c.name == "AG(H)"]
    assert [(c.layer, c.phase, c.axis, c.size) for c in gathers] == \
        [(0, "forward", depth, 40), (0, "eval", depth, 40)]
    assert kept == [c for c in every if c.name != "AG(H)"]
    assert setup_collectives(plans, shape, pad, kept_input=True, itemsize=4) == \
        [Collective("AG(H)", 0, "setup", "all_gather", depth, 2, 40, 4)]
    assert setup_collectives(plans, shape, pad) == []
    assert setup_collectives(plans, shape, pad, kept_input=True)[0].elements == 20
    with pytest.raises(ValueError, match="learnable"):
        epoch_collectives(plans, shape, pad, recorder=RECORD, learnable_features=True,
                          kept_input=True)


def test_payload_itemsize_fills_the_undeclared_sizes_only():
    """A 2-byte wire: every collective declared without an item size (activations, gradients)
    takes 2 bytes per element, the loss's statistics keep their declared 4."""
    plans = layer_plans(2, "agg")
    shape = GridShape(2, 2, 2)
    pad = padding(shape, plans, 10, [4, 3, 2])
    plain = epoch_collectives(plans, shape, pad, recorder=RECORD)
    wire = epoch_collectives(plans, shape, pad, recorder=RECORD, payload_itemsize=2)
    assert [c.itemsize for c in wire] == [4 if c.phase == "loss" else 2 for c in plain]
    assert [c.itemsize for c in plain if c.phase == "loss"] == [4, 4, 4]
    assert all(c.itemsize is None for c in plain if c.phase != "loss")
    assert [c.key(2) for c in plain] == [c.key(7) for c in wire]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is Linux's")
def test_write_behind_syncs_and_drops_what_it_wrote_step_by_step(tmp_path, monkeypatch):
    """Every byte reaches the file; the ranges dropped from the page cache follow one another
    from 0 to the end, one per step (and one for the rest at the end), never an empty one."""
    drops, syncs = [], []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: drops.append((off, n)))
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append("fsync"), real_fsync(fd)))
    data = os.urandom(11_000)
    with open(tmp_path / "f", "wb") as raw:
        out = WriteBehind(raw, step=3000)
        for lo in range(0, len(data), 700):
            out.write(memoryview(data)[lo:lo + 700])
        assert drops == [(0, 3500), (3500, 3500), (7000, 3500)]
        out.finish()
    assert (tmp_path / "f").read_bytes() == data
    assert drops == [(0, 3500), (3500, 3500), (7000, 3500), (10_500, 500)]
    assert syncs == ["fsync"]  # the steps use fdatasync, the end fsync (data and size)


# ---- a kind's options: declared in its file, made into ModelConfig fields, plans and flags ----
def test_kind_options_become_fields_plan_options_and_flags():
    """Each kind's ``Options`` (its file in plexus_partition.model.ops) is where its options live:
    they are `ModelConfig` fields with the declared defaults, flags with the declared help, metavar
    and checks, and what a stage needs of them rides on its plan's ``options`` (LayerPlan has no
    field of any kind's)."""
    import argparse
    import dataclasses

    from plexus_partition.model import modelopts
    from plexus_partition.model.cli import UsageError
    from plexus_partition.model.layout import LayerPlan
    from plexus_partition.model.model import ModelConfig
    from plexus_partition.model.ops import KINDS

    declared = {f.name: f for k in KINDS.values() if k.options
                for f in dataclasses.fields(k.options)}
    assert {"residual", "train_eps", "heads", "out_heads", "attn_dropout",
            "negative_slope"} <= set(declared)
    # typed and nested: a config holds its own kind's Options, nothing of another kind's
    assert not set(declared) & {f.name for f in dataclasses.fields(ModelConfig)}
    for kind in KINDS.values():
        options = ModelConfig(kind=kind.name).options
        assert (options is None) == (kind.options is None)
        if options is not None:
            assert type(options) is kind.options and all(
                getattr(options, f.name) == f.default for f in dataclasses.fields(kind.options))
    assert ModelConfig(kind="gat", heads=3).options == KINDS["gat"].options(heads=3)
    assert ModelConfig().options == KINDS["gcn"].options() and not hasattr(
        ModelConfig().options, "heads")
    assert not set(declared) & {f.name for f in dataclasses.fields(LayerPlan)}
    parser = argparse.ArgumentParser()
    group = modelopts.add_model_options(parser)
    flags = {a.dest: a for a in group._group_actions}
    for name, f in declared.items():
        assert flags[name].default == f.default
        assert flags[name].help == f.metadata["help"].format(default=f.default)
    args = parser.parse_args(["--model", "gat", "--heads", "3", "--out-heads", "2",
                              "--negative-slope", "0.1"])
    cfg = modelopts.model_config(args)
    assert (cfg.heads, cfg.out_heads, cfg.negative_slope) == (3, 2, 0.1)
    plans = cfg.plans(10, 4)
    assert [(p.options.heads, p.options.concat) for p in plans] == [(3, True), (2, False)]
    gin = ModelConfig(kind="gin", train_eps=False).plans(10, 4)
    assert [p.options for p in gin][1] is None and not gin[0].options.learnable_eps
    assert ModelConfig(residual=True, hidden=10).plans(10, 10)[0].options.residual
    for argv, message in ((["--model", "gat", "--heads", "0"], "--heads must be >= 1"),
                          (["--model", "gat", "--attn-dropout", "1"], "--attn-dropout must be in"),
                          (["--heads", "2"], "--heads is an option of the gat model")):
        args = parser.parse_args(argv)
        with pytest.raises(UsageError, match=message):
            modelopts.check_model_options(args)
            modelopts.model_config(args)


def test_every_kind_is_a_spec_without_torch_and_a_layer_in_the_engine():
    """Each operator's torch-free spec is its module in plexus_partition.model.ops and its torch
    code (``stage``, on the stage toolkit, and the serial reference) its layer module in
    plexus.engine.kinds, one layer per spec; importing every spec loads no torch (the
    performance model reads them)."""
    import subprocess
    import sys

    from plexus.engine.kinds import LAYERS, KindLayer
    from plexus_partition.model.ops import NORM_OP, OPERATORS

    assert NORM_OP in OPERATORS and set(LAYERS) == set(OPERATORS)  # BatchNorm's too
    for name, layer in LAYERS.items():
        assert type(layer).stage is not KindLayer.stage, name
        assert type(layer).serial is not KindLayer.serial, name
        assert layer.spec is OPERATORS[name]
        assert not hasattr(OPERATORS[name], "stage") and not hasattr(OPERATORS[name], "serial")
    code = "import sys, plexus_partition.model.model, plexus_partition.model.modelopts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_a_spec_without_a_layer_is_a_typed_error():
    from plexus.engine.kinds import MissingLayerError, layer_of

    with pytest.raises(MissingLayerError, match="'nolayer' has a spec .* plexus.engine.kinds"):
        layer_of("nolayer")


def test_the_flat_form_of_logs_and_checkpoints_still_reads():
    """Logs, checkpoints and stores written before the options were typed hold the flat form:
    every kind's option, the other kinds' at their defaults (written out here as 16bafc1's
    `plexus-train --log-json` wrote a GAT model's ``config``, the values changed)."""
    import pickle

    from plexus_partition.model.model import ModelConfig, ModelError
    from plexus_partition.model.ops import KINDS

    old = {"num_layers": 3, "hidden": 8, "dropout": 0.5, "bias": True, "order": "auto",
           "learnable_features": False, "kind": "gat", "norm": "none", "input_dropout": True,
           "residual": False, "train_eps": True, "heads": 4, "out_heads": 2,
           "attn_dropout": 0.1, "negative_slope": 0.2}
    cfg = ModelConfig(**old)
    assert cfg.options == KINDS["gat"].options(heads=4, out_heads=2, attn_dropout=0.1)
    # the flat form written today adds the kinds since 16bafc1 at their defaults (by hand)
    new_kinds = {"hops": 10, "teleport": 0.1, "alpha": 0.1, "theta": 0.5, "shared_weights": True}
    assert cfg.as_dict() == {**old, **new_kinds} and ModelConfig.from_options(**old) == cfg
    nested = {k: old[k] for k in ("num_layers", "hidden", "dropout", "bias", "order",
                                  "learnable_features", "kind", "norm", "input_dropout")}
    assert ModelConfig(**nested, options={"heads": 4, "out_heads": 2, "attn_dropout": 0.1}) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg and hash(pickle.loads(pickle.dumps(cfg)))
    gcn = ModelConfig(**{**old, "kind": "gcn", "heads": 1, "out_heads": 1, "attn_dropout": 0.0})
    assert "heads" not in repr(gcn) and gcn.as_dict()["heads"] == 1  # the flat form's default
    # a config answers only its kind's options (issue 57): another kind's is no attribute
    with pytest.raises(AttributeError, match="a gcn model has no 'heads' .an option of gat, gatv2"):
        gcn.heads  # noqa: B018
    with pytest.raises(ModelError, match="heads is an option of the gat model"):
        ModelConfig(**{**old, "kind": "gcn"})
    with pytest.raises(ModelError, match="options of the sage model"):
        ModelConfig(kind="sage", options=KINDS["gat"].options())
