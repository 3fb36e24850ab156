"""A MASTER_ADDR that cannot resolve fails at once in one line naming it (issue 56, item 5),
instead of the rendezvous waiting its whole timeout and then blaming the ranks' options; so does
a MASTER_PORT another user's process holds (N4). The oracle: the refusal says "does not
resolve" or "another process holds it", never the timeout's "could not join ... within"; a name
under ``.invalid`` (RFC 2606) resolves nowhere; the port is held by a child of uid 65534."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from helpers import NOBODY, assert_one_line
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


def _hold_port_as_nobody() -> tuple[int, int]:
    """A child of uid 65534 listening on a port of 127.0.0.1 until killed: (its pid, the
    port)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the co-user's process: never returns into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            os.write(write, str(s.getsockname()[1]).encode())
            os.close(write)
            while True:
                signal.pause()  # (os has no pause: the holder exited at once, freeing the port)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        return pid, int(f.read())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a co-user")
def test_a_master_port_a_co_user_holds_is_its_own_one_line_cause():
    """Issue 56, N4: rank 0 finding its MASTER_PORT taken is told so at once, not the
    timeout's advice about the ranks' MASTER_ADDR."""
    pid, port = _hold_port_as_nobody()
    try:
        env = JobEnv("slurm", 0, 2, 0, 1, "127.0.0.1", port)
        start = time.perf_counter()
        with pytest.raises(LaunchError) as e:
            init_process_group(env, timeout_s=600, cpu=True)
        text = assert_one_line(e, f"MASTER_PORT {port}", "another process holds it",
                               "a free MASTER_PORT")
        assert "within" not in text and "same MASTER_ADDR" not in text
        assert time.perf_counter() - start < 60  # never the rendezvous' 600 s
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
