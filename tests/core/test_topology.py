"""`plexus_partition.model.topology`: ranks on nodes, each axis's span and link class, and the
bytes per link class of flat and hierarchical collectives, against values worked out by hand
(and the closed-form span against brute force over every small grid)."""

from __future__ import annotations

import itertools

import pytest

from plexus_partition.model.bounds import BoundError
from plexus_partition.model.grid import GridShape
from plexus_partition.model.topology import (AxisSpan, axis_groups, axis_links, axis_span,
                                             check_gpus_per_node, choose_form, group_link,
                                             group_ranks, link_volume, parts, subgroups)


def test_spans_by_hand():
    # 1x1x4 on nodes of 2: z's one group 0,1 | 2,3
    assert axis_span(GridShape(1, 1, 4), "z", 2) == AxisSpan(4, 2, 2, "inter")
    assert axis_span(GridShape(1, 1, 4), "y", 2) == AxisSpan(1, 1, 1, "intra")
    # 1x4x2 on nodes of 4: z (0,1) inside a node; y (0,2 | 4,6) and (1,3 | 5,7) split
    assert axis_span(GridShape(1, 4, 2), "z", 4) == AxisSpan(2, 2, 1, "intra")
    assert axis_span(GridShape(1, 4, 2), "y", 4) == AxisSpan(4, 2, 2, "inter")
    # 2x2x2 on nodes of 2: y (0 | 2) and x (0 | 4) have one rank per node
    assert axis_span(GridShape(2, 2, 2), "y", 2) == AxisSpan(2, 1, 2, "inter")
    assert axis_span(GridShape(2, 2, 2), "x", 2) == AxisSpan(2, 1, 2, "inter")
    assert axis_span(GridShape(1, 1, 8), "z", 2) == AxisSpan(8, 2, 4, "inter")
    # 1x1x6 on nodes of 4: 0-3 | 4,5, groups differ: no split, inter
    assert axis_span(GridShape(1, 1, 6), "z", 4) == AxisSpan(6, 0, 0, "inter")
    # 1x3x2 on nodes of 4: (0,2 | 4) and (1,3 | 5): 2 ranks on one node, 1 on the other
    assert axis_span(GridShape(1, 3, 2), "y", 4) == AxisSpan(3, 0, 0, "inter")
    # no placement: one node
    assert axis_span(GridShape(1, 1, 8), "z", None) == AxisSpan(8, 8, 1, "intra")
    assert axis_links(GridShape(2, 2, 2), 2) == {"x": "inter", "y": "inter", "z": "intra"}
    assert axis_links(GridShape(2, 2, 2), None) == dict.fromkeys("xyz", "intra")


def _brute(shape: GridShape, axis: str, k: int) -> AxisSpan:
    counts, links = set(), set()
    for ranks in axis_groups(shape, axis):
        nodes = [r // k for r in ranks]
        links.add(group_link(ranks, k))
        counts.add(tuple(sorted({n: nodes.count(n) for n in nodes}.values())))
    link = "inter" if "inter" in links else "intra"
    if len(counts) == 1:
        per = next(iter(counts))
        if len(set(per)) == 1:
            return AxisSpan(shape[axis], per[0], len(per), link)
    return AxisSpan(shape[axis], 0, 0, link)


def test_closed_form_span_equals_brute_force_on_small_grids():
    for world in range(1, 17):
        for shape in GridShape.factorizations(world):
            for k, axis in itertools.product(range(1, 18), "xyz"):
                assert axis_span(shape, axis, k) == _brute(shape, axis, k), (shape, axis, k)


def test_groups_and_subgroups_by_hand():
    shape = GridShape(1, 4, 2)
    assert group_ranks(shape, "y", 5) == [1, 3, 5, 7]
    assert group_ranks(shape, "z", 5) == [4, 5]
    assert list(axis_groups(shape, "y")) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert subgroups(shape, "y", 2) == ([[0, 2], [4, 6], [1, 3], [5, 7]],
                                        [[0, 4], [2, 6], [1, 5], [3, 7]])
    assert subgroups(GridShape(1, 1, 4), "z", 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    assert group_link([0, 1], 2) == "intra" and group_link([1, 2], 2) == "inter"
    assert group_link([0, 5], None) == "intra"


def test_choose_form():
    split, one_node = AxisSpan(4, 2, 2, "inter"), AxisSpan(4, 4, 1, "intra")
    assert choose_form("auto", split, "all_reduce") == "hierarchical"
    assert choose_form("hierarchical", split, "reduce_scatter") == "hierarchical"
    assert choose_form("flat", split, "all_gather") == "flat"
    assert choose_form("hierarchical", one_node, "all_reduce") == "flat"
    assert choose_form("hierarchical", AxisSpan(2, 1, 2, "inter"), "all_reduce") == "flat"
    assert choose_form("hierarchical", AxisSpan(6, 0, 0, "inter"), "all_reduce") == "flat"
    assert choose_form("hierarchical", split, "all_to_all") == "flat"
    with pytest.raises(ValueError, match="unknown collectives"):
        choose_form("ring", split, "all_reduce")


def test_bytes_per_link_by_hand():
    z4 = AxisSpan(4, 2, 2, "inter")  # 1x1x4 on nodes of 2
    # flat all-reduce of 10 fp32 elements over 4: 2·3/4·10 = 15 elements, 60 bytes, all inter
    assert link_volume(parts("all_reduce", "flat", 10, z4), 4) == {"intra": 0.0, "inter": 60.0}
    # hierarchical: RS of 10 over 2 (5) + AG of 10 over 2 (5) in the node = 40 bytes;
    # AR of 5 over the 2 nodes: 2·1/2·5 = 5 elements = 20 bytes
    assert link_volume(parts("all_reduce", "hierarchical", 10, z4), 4) == {
        "intra": 40.0, "inter": 20.0}
    # 7 elements: padded to 8; RS 4 + AG 4 in the node, AR of 4 over 2 nodes: 4
    assert link_volume(parts("all_reduce", "hierarchical", 7, z4), 2) == {
        "intra": 16.0, "inter": 8.0}
    # all-gather of full size 8: across the nodes 4 over 2 (2), in the node 8 over 2 (4)
    assert link_volume(parts("all_gather", "hierarchical", 8, z4)) == {"intra": 4.0, "inter": 2.0}
    assert link_volume(parts("reduce_scatter", "hierarchical", 8, z4)) == {
        "intra": 4.0, "inter": 2.0}
    assert link_volume(parts("all_gather", "flat", 8, z4)) == {"intra": 0.0, "inter": 6.0}
    z8 = AxisSpan(8, 2, 4, "inter")  # 1x1x8 on nodes of 2
    # AR of 8: in the node RS 4 + AG 4; across 4 nodes AR of 4: 2·3/4·4 = 6 (flat: 14)
    assert link_volume(parts("all_reduce", "hierarchical", 8, z8)) == {"intra": 8.0, "inter": 6.0}
    # inside one node: a flat collective's bytes are intra
    assert link_volume(parts("all_reduce", "flat", 8, AxisSpan(2, 2, 1, "intra"))) == {
        "intra": 8.0, "inter": 0.0}
    # a group's own class wins over the axis's
    assert link_volume(parts("all_to_all", "flat", 3, z4, "intra")) == {"intra": 3.0,
                                                                        "inter": 0.0}
    with pytest.raises(ValueError, match="no hierarchical"):
        parts("all_to_all", "hierarchical", 8, z4)


def test_gpus_per_node_is_checked():
    assert check_gpus_per_node(None) is None and check_gpus_per_node(4) == 4
    for bad in (0, -1, 2.5, True, "4", 10**6):
        with pytest.raises(BoundError):
            check_gpus_per_node(bad)


def test_placed_ranks_by_hand():
    """Process r on node r // K, local l = r % K; node n takes the n-th block of the grid (z
    fastest), l the l-th position inside it (z fastest). Written out for 2x2x2."""
    from plexus_partition.model.topology import placed_ranks

    shape = {"x": 2, "y": 2, "z": 2}
    # nodes of 2 holding an x pair: node 0 = grid (0,0,0), (1,0,0) = grid ranks 0, 4; node 1
    # = (0,0,1), (1,0,1) = 1, 5; node 2 = 2, 6; node 3 = 3, 7
    assert placed_ranks(shape, 2, (2, 1, 1)) == (0, 2, 4, 6, 1, 3, 5, 7)
    # nodes of 4 holding x and y of one z: node 0 = grid ranks 0, 2, 4, 6; node 1 = 1, 3, 5, 7
    assert placed_ranks(shape, 4, (2, 2, 1)) == (0, 4, 1, 5, 2, 6, 3, 7)
    # the launcher's own block, one node, or none: the identity
    for k, node in ((4, (1, 2, 2)), (2, (1, 1, 2)), (8, (2, 2, 2)), (None, (2, 1, 1)),
                    (2, None)):
        assert placed_ranks(shape, k, node) == tuple(range(8))
    with pytest.raises(ValueError, match="does not tile the grid 2x2x2 on nodes of 4"):
        placed_ranks(shape, 4, (4, 1, 1))
