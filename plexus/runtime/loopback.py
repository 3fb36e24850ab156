"""The local launcher's rendezvous: torch's static one (one TCP store, no more), its store
listening on 127.0.0.1 only. Torch's own binds every interface (``*:PORT``), so any host that
reaches this one could write into a running job's store; here the launcher binds the listening
socket itself, on the loopback address, and hands it to the store (``master_listen_fd``), so
the port is never free between choosing and binding it either."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from typing import Iterator

BACKEND = "plexus-loopback"
HOST = "127.0.0.1"


def _create_handler(params):  # a RendezvousParameters
    from torch.distributed import TCPStore  # noqa: PLC0415
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous  # noqa: PLC0415

    class LoopbackRendezvous(static_tcp_rendezvous.StaticTCPRendezvous):
        """`StaticTCPRendezvous` whose store listens on the socket the launcher bound."""

        def __init__(self, base, listen_fd: int) -> None:
            super().__init__(base.master_addr, base.master_port, base.rank, base.world_size,
                             base.run_id, int(base.timeout.total_seconds()))
            self._listen_fd = listen_fd

        def get_backend(self) -> str:
            return BACKEND

        def next_rendezvous(self):
            if not self._store:
                self._store = TCPStore(self.master_addr, self.master_port, self.world_size,
                                       True, self.timeout, multi_tenant=True,
                                       master_listen_fd=os.dup(self._listen_fd))
            return super().next_rendezvous()

    base = static_tcp_rendezvous.create_rdzv_handler(params)
    return LoopbackRendezvous(base, int(params.config["listen_fd"]))


def register() -> None:
    """Make `BACKEND` known to torch's elastic launcher (idempotent)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry  # noqa: PLC0415

    rendezvous_handler_registry.register(BACKEND, _create_handler)


@contextmanager
def loopback_listener() -> Iterator[tuple[int, int]]:
    """A TCP socket listening on 127.0.0.1 at a free port: (its port, its descriptor) for the
    rendezvous' ``rdzv_configs["listen_fd"]``; closed when the block ends (the store keeps a
    duplicate of its own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        s.listen(1024)
        yield s.getsockname()[1], s.fileno()
