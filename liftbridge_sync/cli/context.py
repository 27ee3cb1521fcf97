"""Options shared by every command: brokers, timeouts, debug; and the client they build."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from liftbridge_sync import Client, ClientOptions, RetryPolicy

__all__ = ["CliSettings", "open_client"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CliSettings:
    """Global options of the command line.

    Immutable; safe to share between threads.
    """

    #: Seed brokers, ``host:port``.
    addresses: tuple[str, ...] = ("localhost:9292",)
    #: Seconds for each request, and for retries of an unreachable broker in all.
    timeout: float = 5.0
    #: Show tracebacks and debug logs.
    debug: bool = False

    def client_options(self) -> ClientOptions:
        """The client options for these settings (fail fast: few retries)."""
        retry = RetryPolicy(max_attempts=3, max_delay=self.timeout, initial=0.1, maximum=0.5)
        return ClientOptions(
            addresses=self.addresses,
            rpc_timeout=self.timeout,
            ack_timeout=self.timeout,
            retry=retry,
        )


@contextmanager
def open_client(settings: CliSettings) -> Iterator[Client]:
    """A client for one command, closed (pending publishes awaited) when it ends.

    Thread-safe: each call builds its own client.
    """
    client = Client.from_options(settings.client_options())
    try:
        yield client
    finally:
        client.close(timeout=settings.timeout)
