"""One front door (issue 57 item 5): `plexus.GraphModel`, from `plexus.distributed_model`, is
the public model type; the engine's own `DistributedModel` and `build_model` are no longer
among the package's names and warn where they are still reached through it (deprecated in
0.2.0, removed in 0.3.0), resolving to the engine's objects."""

from __future__ import annotations

import typing

import pytest

import plexus
from plexus.engine.build import build_model
from plexus.engine.model import DistributedModel


@pytest.mark.parametrize("name,engines", [("DistributedModel", DistributedModel),
                                          ("build_model", build_model)])
def test_the_engines_model_types_warn_and_still_resolve(name, engines):
    assert name not in plexus.__all__ and name not in dir(plexus)
    with pytest.warns(DeprecationWarning, match=rf"plexus\.{name} .*removed from plexus in "
                                                r"0\.3\.0.*plexus\.distributed_model"):
        assert getattr(plexus, name) is engines


def test_the_one_public_model_type_is_graphmodel():
    assert {"GraphModel", "distributed_model"} <= set(plexus.__all__)
    assert typing.get_type_hints(plexus.distributed_model)["return"] is plexus.GraphModel
