"""Peers that prove who they are (issue 56, N4): the local launcher's store listens on 127.0.0.1
only and hands its workers a secret of the job's own; before any tensor moves every rank proves
the secret and its run to rank 0 (`plexus_partition.launch.peers`), which refuses a mismatch in
one line naming the rank and the cause."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from helpers import assert_one_line
from plexus_partition.launch.peers import (SECRET_ENV, SECRET_FILE_ENV, PeerRefused, job_secret,
                                           prove_peers)
from plexus.runtime.local import launch_local


class FakeStore:
    """A store of one job: ``get`` blocks until the key is set (as c10d's does)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: str | bytes) -> None:
        with self._cond:
            self._data[key] = value.encode() if isinstance(value, str) else value
            self._cond.notify_all()

    def get(self, key: str) -> bytes:
        with self._cond:
            assert self._cond.wait_for(lambda: key in self._data, timeout=10), key
            return self._data[key]


def _job(secrets: list[bytes], options: list[dict]) -> list[str]:
    """Each rank's outcome ("ok" or its one-line refusal) of one job over one store."""
    store, out = FakeStore(), [""] * len(secrets)

    def rank(r: int) -> None:
        try:
            prove_peers(store, r, len(secrets), options[r], secrets[r], "the job")
            out[r] = "ok"
        except PeerRefused as e:
            assert_one_line(e)
            out[r] = str(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(secrets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return out


RUN = {"train.lr": "0.01", "train.seed": "0", "grid": "GridShape(2, 1, 1)", "dataset": "'cora'"}


def test_ranks_of_one_job_with_one_secret_and_one_run_pass():
    assert _job([b"s"] * 3, [RUN] * 3) == ["ok"] * 3
    assert _job([b""] * 2, [RUN] * 2) == ["ok"] * 2  # no secret set: the runs still compared


def test_a_rank_with_another_secret_is_refused_on_every_rank_naming_it():
    out = _job([b"s", b"s", b"other"], [RUN] * 3)
    assert "rank 2 does not hold this job's secret" in out[0], out
    assert all("rank 2 does not hold" in o for o in out), out


def test_a_rank_with_other_options_is_refused_naming_the_first_option_that_differs():
    theirs = {**RUN, "train.lr": "0.5", "train.seed": "7"}
    out = _job([b"s", b"s"], [RUN, theirs])
    assert "rank 1 was started with other options: train.lr 0.01 at rank 0, 0.5 at rank 1" \
        in out[0], out
    assert "rank 0 refused the job" in out[1] and "train.lr" in out[1], out


def test_a_rank_that_joined_another_users_rank_0_refuses_it():
    """The victim's rank 1 (its own secret) reaches a co-user's rank 0, which says "ok"."""
    store = FakeStore()
    victim, t = _proving(store, 1, b"victim's")
    store.set("plexus/peers/nonce", "n")
    store.set("plexus/peers/verdict", '{"verdict": "ok", "proof": "forged"}')
    t.join(20)
    assert victim and "rank 0 does not prove this job's secret" in victim[0], victim


def _proving(store: FakeStore, rank: int, secret: bytes) -> tuple[list[str], threading.Thread]:
    """Rank ``rank`` proving RUN with ``secret`` in a started thread; its list gets "ok" or the
    one-line refusal."""
    out: list[str] = []

    def run() -> None:
        try:
            prove_peers(store, rank, 2, RUN, secret, "the job")
            out.append("ok")
        except PeerRefused as e:
            out.append(assert_one_line(e))

    t = threading.Thread(target=run)
    t.start()
    return out, t


#: what a co-user may write into a job's store (it has no authentication: anyone on the host
#: reaches 127.0.0.1): bytes that are no text, JSON nested past the parser, digits past its
#: limit, answers of the wrong shape, a well-formed answer without the secret
JUNK = [b"\xff\xfe\x00", b"[" * 100_000, b"1" * 10_000, b"null", b"{}",
        b'{"options": [], "proof": "x"}', b'{"options": {"a": 1}, "proof": 5}',
        b'{"options": {"train.lr": "0.01"}, "proof": "' + b"0" * 64 + b'"}']


@pytest.mark.parametrize("junk", JUNK, ids=range(len(JUNK)))
def test_junk_a_co_user_wrote_into_the_store_is_refused_in_one_line(junk):
    """Issue 56, N4 (51 junk keys in a running job's store): rank 0 finds junk where rank 1's
    answer goes and refuses it naming rank 1; a victim's rank 1 finds junk as the nonce and the
    verdict and refuses rank 0. Junk under other names is never read."""
    store = FakeStore()
    for i in range(51):
        store.set(f"junk/{i}", junk)
    store.set("plexus/peers/hello/1", junk)
    out, t = _proving(store, 0, b"s")
    t.join(20)
    assert len(out) == 1 and "rank 1 " in out[0] and "ok" != out[0], out
    assert "did not answer as a Plexus rank" in out[0] or "does not hold this job's secret" \
        in out[0], out
    victim = FakeStore()
    victim.set("plexus/peers/nonce", junk)
    victim.set("plexus/peers/verdict", junk)
    with pytest.raises(PeerRefused) as e:
        prove_peers(victim, 1, 2, RUN, b"s", "the job")
    assert_one_line(e, "rank 0 does not prove this job's secret")


def test_the_secret_comes_from_the_variable_or_a_private_file(tmp_path):
    assert job_secret({SECRET_ENV: "abc"}) == b"abc" and job_secret({}) == b""
    path = tmp_path / "secret"
    path.write_text("from-a-file\n")
    path.chmod(0o600)
    assert job_secret({SECRET_FILE_ENV: str(path)}) == b"from-a-file"
    path.chmod(0o644)
    with pytest.raises(PeerRefused.__mro__[1], match="0600") as e:
        job_secret({SECRET_FILE_ENV: str(path)})
    assert_one_line(e)


# ---- the local launcher ---------------------------------------------------------------------
def _listening_addresses() -> list[str]:
    """Where the job's store (MASTER_PORT, in the launcher's process) listens."""
    port = int(os.environ["MASTER_PORT"])
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # LISTEN
                raw = bytes.fromhex(addr)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append(socket.inet_ntop(family, raw))
    return found


def _secret() -> str:
    return os.environ.get(SECRET_ENV, "")


def test_the_local_launchers_store_listens_on_127_0_0_1_only():
    assert launch_local(1, _listening_addresses, fork=True) == [["127.0.0.1"]]


def test_the_local_launcher_hands_each_job_a_secret_of_its_own():
    first, second = launch_local(2, _secret, fork=True), launch_local(1, _secret, fork=True)
    assert first[0] == first[1] and len(first[0]) >= 32 and second[0] != first[0]
    assert os.environ.get(SECRET_ENV) is None  # never in the launcher's own environment


# ---- two plexus-train ranks started apart (as torchrun/srun would) ---------------------------
def _rank(rank: int, port: int, *args: str, secret: str = "s") -> subprocess.Popen:
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           SECRET_ENV: secret}
    return subprocess.Popen([sys.executable, "-m", "plexus.train", "--grid", "2x1x1",
                             "--epochs", "1", "--quiet", "--no-cache", "--timeout", "60", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["options", "secret"])
def test_a_rank_started_with_other_options_or_another_secret_is_refused_before_training(case):
    """N4 as found, with the co-user's rank 0 as a process of this user holding another secret
    (a child of uid 65534 cannot run this checkout's interpreter here: it lives under /root)."""
    from plexus.runtime.local import free_port

    port = free_port()
    ranks = [_rank(0, port, "--lr", "0.01"),
             _rank(1, port, "--lr", "0.5" if case == "options" else "0.01",
                   secret="s" if case == "options" else "another")]
    outs = [p.communicate(timeout=240) for p in ranks]
    assert [p.returncode for p in ranks] == [2, 2], outs
    err = outs[0][1]
    needle = "train.lr 0.01 at rank 0, 0.5 at rank 1" if case == "options" \
        else "rank 1 does not hold this job's secret"
    assert_one_line(err, needle, prog="plexus-train")
    assert "epoch" not in outs[0][0] + outs[1][0]  # nothing trained


# ---- the Python API's ranks under a launcher (plexus.launch joining torchrun/srun's job) ------
_API_SCRIPT = """
import sys
import plexus
from plexus_partition.launch.env import LaunchError

def main(grid):
    return grid.rank

if __name__ == "__main__":
    try:
        print("rank", plexus.launch(main, grid=sys.argv[1]), flush=True)
    except LaunchError as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["same", "secret", "grid"])
def test_api_ranks_prove_the_jobs_secret_and_grid_when_they_join(case, tmp_path):
    """plexus.launch under torchrun/srun proves the job's secret, the version and the grid to
    rank 0 before fn runs: a rank with another secret or another grid of the same size is
    refused on every rank, naming the cause (it joined and ran before)."""
    from plexus.runtime.local import free_port

    script = tmp_path / "job.py"
    script.write_text(_API_SCRIPT)
    port = free_port()
    procs = []
    for rank in (0, 1):
        grid = "1x2x1" if case == "grid" and rank == 1 else "2x1x1"
        secret = "another" if case == "secret" and rank == 1 else "s"
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               SECRET_ENV: secret}
        procs.append(subprocess.Popen([sys.executable, str(script), grid], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    if case == "same":
        assert [p.returncode for p in procs] == [0, 0], outs
        assert [o[0].strip() for o in outs] == ["rank 0", "rank 1"]
        return
    assert [p.returncode for p in procs] == [3, 3], outs
    needle = ("rank 1 does not hold this job's secret" if case == "secret"
              else "grid 2x1x1 at rank 0, 1x2x1 at rank 1")
    assert_one_line(outs[0][1], needle)
    assert "rank" not in outs[0][0] + outs[1][0]  # fn never ran
