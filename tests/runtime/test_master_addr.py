"""A MASTER_ADDR that cannot resolve fails at once in one line naming it (issue 56, item 5),
instead of the rendezvous waiting its whole timeout and then blaming the ranks' options. The
oracle: the refusal says "does not resolve", never the timeout's "could not join ... within";
a name under ``.invalid`` (RFC 2606) resolves nowhere."""

from __future__ import annotations

import pytest

from helpers import assert_one_line
from plexus_partition.launch.env import JobEnv, LaunchError
from plexus_partition.launch.group import check_master_addr, init_process_group


@pytest.mark.parametrize("addr", ["no-such-host.invalid", "", "a" * 300, "bad name.invalid"])
def test_an_address_that_does_not_resolve_is_one_line(addr):
    with pytest.raises(LaunchError) as e:
        check_master_addr(addr)
    assert_one_line(e, "MASTER_ADDR=", "does not resolve", "rank 0's node")


@pytest.mark.parametrize("addr", ["127.0.0.1", "localhost", "::1"])
def test_an_address_that_resolves_passes(addr):
    check_master_addr(addr)


def test_the_group_is_not_joined_through_an_unresolvable_address():
    env = JobEnv("slurm", 1, 2, 0, 1, "no-such-host.invalid", 29500)
    with pytest.raises(LaunchError) as e:
        init_process_group(env, timeout_s=600, cpu=True)
    text = assert_one_line(e, "does not resolve")
    assert "within" not in text  # not the timeout's message: it never waited for the peers
