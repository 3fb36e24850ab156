"""plexus-partition's rate line (issue 59 item 6): a small graph's rate in a unit that shows it,
not "0.00M non-zeros/s"."""

from __future__ import annotations

import re


def test_a_small_graphs_partition_rate_is_not_zero_millions(tmp_path, capsys):
    """plexus-partition's last line gives a small graph's rate in a unit that shows it."""
    from plexus_partition.cli import main as partition

    assert partition(["--dataset", "rmat:scale=6,edge_factor=4,features=8,classes=4", "--grid",
                      "1x2x1", "--out", str(tmp_path / "store")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    rate = re.search(r", ([0-9.]+)(k|M|) non-zeros/s per process", last)
    assert rate and float(rate.group(1)) > 0 and "0.00M" not in last, last
