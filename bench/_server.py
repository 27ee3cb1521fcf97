"""The server under test: a harness-run loopback server, or an existing one."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["BenchServer", "bench_server"]


@dataclass
class BenchServer:
    """Where the clients connect, plus an admin client for stream housekeeping."""

    address: str
    pid: int | None
    version: str
    admin: Any  # liftbridge_sync.Client

    def fresh_stream(self, prefix: str) -> str:
        """Create a new one-partition stream (subject = name) and return its name."""
        name = f"bench-{prefix}-{secrets.token_hex(4)}"
        self.admin.create_stream(name, name, partitions=1)
        return name

    def drop_stream(self, name: str) -> None:
        """Delete a stream, ignoring failures (housekeeping only)."""
        with contextlib.suppress(Exception):
            self.admin.delete_stream(name)


@contextlib.contextmanager
def bench_server(servers: str | None, target: str = "auto") -> Iterator[BenchServer]:
    """Yield a :class:`BenchServer`.

    Args:
        servers: ``host:port`` of an existing server, or None to start a single-node
            loopback server with embedded NATS through ``liftbridge_sync.testing``
            (telemetry off, logging info, no activity stream, no cursors stream).
        target: Server build for the harness (``auto``, ``pinned``, ``v1.9.0``).
    """
    from liftbridge_sync import Client
    from liftbridge_sync.testing import LiftbridgeServer, install_server

    if servers is not None:
        with Client([servers]) as admin:
            yield BenchServer(servers, None, "external (unknown)", admin)
        return
    installed = install_server(target)
    with (
        LiftbridgeServer(installed=installed, cursors_partitions=0, activity=False) as server,
        Client([server.address]) as admin,
    ):
        yield BenchServer(server.address, server.pid, installed.version, admin)
