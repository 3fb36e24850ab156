"""Hostile calls of the public API (issue 56, item 5): each is refused before anything is built
or started, in one line of a typed error naming the argument — never a bare AttributeError
from deep inside, a page of c10d's stack, or a silent acceptance (``TrainConfig(epochs=-1)``).
The expected texts are written here by hand from the bounds table
(`plexus_partition.model.bounds`: a timeout in (0, 31536000] s, epochs in [0, 1e9])."""

from __future__ import annotations

import pytest
import torch

import plexus
from helpers import assert_one_line
from plexus import nn
from plexus.engine.arguments import ArgumentError
from plexus.engine.config import TrainConfig, TrainConfigError
from plexus_datasets import load_dataset
from plexus_datasets.errors import DatasetError


def _fn(grid):  # never called: every launch below is refused first
    raise AssertionError("the launch started")


@pytest.mark.parametrize("timeout, needle", [
    (float("nan"), "timeout_s must be a number of seconds > 0 and at most 31536000, got float nan"),
    (-1, "got int -1"), (0, "got int 0"), (float("inf"), "got float inf"), ("5", "got str '5'"),
    (31536000.5, "at most 31536000"), (True, "got bool True"),
])
def test_a_launch_with_a_hostile_timeout_is_one_line_before_anything_starts(timeout, needle):
    with pytest.raises(ArgumentError) as e:
        plexus.launch(_fn, grid="1x1x1", timeout_s=timeout)
    assert_one_line(e, "plexus.launch: ", needle)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)


@pytest.mark.slow  # refused before it starts, but the suite's rule sees a grid not written out
@pytest.mark.parametrize("grid, needle", [
    (7, "grid (\"XxYxZ\" or a GridShape) must be a str or GridShape, got int 7"),
    (None, "got NoneType None"), ((1, 1, 1), "got tuple (1, 1, 1)"),
])
def test_a_launch_of_a_grid_that_is_no_grid_is_one_line(grid, needle):
    with pytest.raises(ArgumentError) as e:
        plexus.launch(_fn, grid=grid)
    assert_one_line(e, "plexus.launch: ", needle)


@pytest.mark.parametrize("fn", [None, 3, "main"])
def test_a_launch_of_something_not_callable_is_refused(fn):
    with pytest.raises(ArgumentError) as e:
        plexus.launch(fn, grid="1x1x1")
    assert_one_line(e, "fn must be a function")


def test_a_launch_timeout_at_its_bound_passes_the_check():
    from plexus.engine.arguments import check_timeout

    assert check_timeout(31536000, "x") == 31536000.0 and check_timeout(1e-3, "x") == 1e-3


@pytest.mark.parametrize("kwargs, needle", [
    ({"lr": "0.1"}, "lr must be a number > 0 and at most 1000, got 0.1"),
    ({"epochs": -1}, "epochs must be >= 0, got -1"),
    ({"epochs": 10**9 + 1}, "epochs must be at most 1000000000"),
    ({"epochs": True}, "epochs must be an integer in [0, 1000000000], got True"),
    ({"epochs": 2.5}, "epochs must be"), ({"lr": float("nan")}, "lr must be"),
    ({"lr": 0}, "lr must be > 0"), ({"seed": -1}, "seed must be in [0, 2**63 - 1]"),
    ({"weight_decay": -1e-9}, "weight_decay must be >= 0"), ({"patience": 0}, "patience"),
    ({"eval_every": None}, "eval_every"), ({"lr_schedule": None}, "lr_schedule must be one of"),
    ({"weight_decay_scope": "0.1"}, "weight_decay_scope must be one of all, first, got '0.1'"),
    ({"weight_decay_scope": 5}, "weight_decay_scope must be one of all, first, got 5"),
])
def test_a_train_config_out_of_the_table_is_one_line(kwargs, needle):
    with pytest.raises(TrainConfigError) as e:
        TrainConfig(**kwargs)
    assert_one_line(e, needle)


def test_a_train_config_at_its_bounds_is_accepted():
    assert TrainConfig(epochs=0).epochs == 0 and TrainConfig(epochs=10**9).epochs == 10**9
    assert TrainConfig(lr=1000.0).lr == 1000.0 and TrainConfig(seed=2**63 - 1).seed == 2**63 - 1


@pytest.mark.parametrize("spec", [None, 7, b"cora", ["cora"]])
def test_a_dataset_spec_that_is_no_string_is_one_line(spec):
    with pytest.raises(DatasetError) as e:
        load_dataset(spec)
    assert_one_line(e, "a dataset spec is a string", f"got {type(spec).__name__}")


def test_a_trainer_of_no_model_or_no_config_is_one_line():
    with pytest.raises(ArgumentError) as e:
        plexus.Trainer(None, TrainConfig())
    assert_one_line(e, "Trainer: model must be a plexus model", "got NoneType None")
    from plexus.engine.serial import SerialModel
    from plexus.engine.config import ModelConfig
    from plexus_datasets.toy import toy_graph

    model = SerialModel(toy_graph(), ModelConfig(2, 4, 0.0), seed=0)
    with pytest.raises(ArgumentError) as e:
        plexus.Trainer(model, {"lr": 0.1})
    assert_one_line(e, "Trainer: cfg must be a TrainConfig, got dict")


class _Layer(nn.Layer):
    def __init__(self, i, o, names=("w",)):
        super().__init__(i, o)
        for name in names:
            self.weight(name)

    def forward(self, g, x, step):
        return g.linear(x, self.w)


@pytest.mark.parametrize("name, needle", [
    ("../x", "must be a Python identifier"), ("", "must be a Python identifier"),
    ("a b", "must be a Python identifier"), ("class", "must be a Python identifier"),
    (7, "got int 7"), (None, "got NoneType None"),
    ("forward", "already an attribute"), ("weight", "already an attribute"),
])
def test_a_parameter_name_that_cannot_be_an_attribute_is_one_line(name, needle):
    with pytest.raises(ArgumentError) as e:
        _Layer(3, 4, (name,))
    assert_one_line(e, "_Layer.weight: ", needle)


def test_a_parameter_declared_twice_is_one_line_and_distinct_names_pass():
    with pytest.raises(ArgumentError) as e:
        _Layer(3, 4, ("w", "w"))
    assert_one_line(e, "parameter 'w' is declared twice")
    assert [n for n, _, _ in _Layer(3, 4, ("w", "w_2", "bias")).declared] == ["w", "w_2", "bias"]


@pytest.mark.parametrize("width, shown", [
    (None, "NoneType None"), (2.5, "float 2.5"), ("7", "str '7'"), (True, "bool True"),
    (0, "int 0"), (-1, "int -1"), (2**24 + 1, "int 16777217"), (10**12, "int 1000000000000"),
])
@pytest.mark.parametrize("which", ["in_features", "out_features", "num_features"])
def test_a_layer_width_out_of_the_table_is_one_line_before_anything_is_drawn(width, shown,
                                                                           which):
    """The bound is --hidden's, written here by hand: an integer in [1, 2**24]. Found: None and
    2.5 raised torch.rand's TypeError inside Network, 10**12 asked the allocator for 44 TB."""
    with pytest.raises(ArgumentError) as e:
        if which == "num_features":
            nn.BatchNorm(width)
        else:
            _Layer(*((width, 4) if which == "in_features" else (3, width)))
    where = "BatchNorm" if which == "num_features" else "_Layer"
    assert_one_line(e, f"{where}: {which} must be an integer in [1, 16777216], got {shown}")


def test_a_layer_width_at_the_table_s_bounds_or_a_numpy_integer_is_accepted():
    import numpy as np

    assert (_Layer(1, 2**24).in_features, _Layer(1, 2**24).out_features) == (1, 2**24)
    layer = _Layer(np.int64(3), np.int32(4))
    assert (layer.in_features, layer.out_features) == (3, 4) and type(layer.in_features) is int
    assert nn.BatchNorm(2**24).num_features == 2**24


def _network_calls(grid) -> list[str]:
    from plexus_datasets.toy import toy_graph

    graph = toy_graph()
    good = [_Layer(graph.num_features, graph.num_classes)]
    out = []
    for args in [(None, grid, good), (graph, None, good), (graph, grid, []), (graph, grid, None),
                 (graph, grid, [torch.nn.Linear(graph.num_features, graph.num_classes)]),
                 (graph, grid, [*good, "relu"])]:
        try:
            nn.Network(*args)
            out.append("built")
        except ArgumentError as e:
            out.append(str(e))
    out.append("built" if nn.Network(graph, grid, good).layers[0] is good[0] else "not built")
    return out


def test_a_network_of_hostile_arguments_is_one_line():
    got = plexus.launch(_network_calls, grid="1x1x1")  # in this process
    needles = ["graph must be a Graph, got NoneType None", "grid must be a Grid, got NoneType None",
               "layers must be a non-empty list", "layers must be a non-empty list",
               "layer 0 is a torch.nn.modules.linear.Linear, not a plexus.nn.Layer",
               "layer 1 is a builtins.str"]
    for text, needle in zip(got, needles):
        assert text.startswith("Network: ") and needle in text and "\n" not in text, text
    assert got[-1] == "built"  # the oracle: the same call with good arguments builds
