"""Options shared by every command: brokers, timeouts, debug; and the client they build."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from liftbridge_sync import Client, ClientOptions, RetryPolicy
from liftbridge_sync.cli.errors import Terminated

__all__ = ["INTERRUPT_GRACE", "CliSettings", "open_client"]


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


#: Seconds a command stopped by Ctrl-C or SIGTERM still waits for pending acks: those
#: of a healthy broker come within it, and a hung one does not hold the exit for the
#: whole --timeout.
INTERRUPT_GRACE = 1.0


@contextmanager
def open_client(settings: CliSettings) -> Iterator[Client]:
    """A client for one command, closed (pending publishes awaited) when it ends.

    Pending publishes are awaited for ``--timeout`` seconds, or only
    :data:`INTERRUPT_GRACE` when the command was stopped by Ctrl-C or SIGTERM; those
    still pending then fail with ``ClientClosedError``.

    Thread-safe: each call builds its own client.
    """
    client = Client.from_options(settings.client_options())
    try:
        yield client
    except (KeyboardInterrupt, Terminated):
        client.close(timeout=min(settings.timeout, INTERRUPT_GRACE))
        raise
    except BaseException:
        client.close(timeout=settings.timeout)
        raise
    client.close(timeout=settings.timeout)
