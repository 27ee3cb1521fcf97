"""Options shared by every command: brokers, timeouts, debug; and the client they build."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import liftbridge_sync
from liftbridge_sync import BrokerUnavailableError, ClientOptions, RetryPolicy
from liftbridge_sync.cli.errors import CommandFailed, ExitCode, Terminated

if TYPE_CHECKING:  # loaded by open_client: parsing and --help need no grpc
    from liftbridge_sync import Client

__all__ = ["ACK_MARGIN", "INTERRUPT_GRACE", "CliSettings", "open_client"]


#: Seconds a publish waits for its ack beyond ``--timeout``: see ``client_options``.
ACK_MARGIN = 1.0

#: Attempts of one call: so many that only ``--timeout`` (``max_delay``) ends the retries.
_UNLIMITED_ATTEMPTS = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CliSettings:
    """Global options of the command line.

    Immutable; safe to share between threads.
    """

    #: Seed brokers, ``host:port``.
    addresses: tuple[str, ...] = ("localhost:9292",)
    #: Seconds for each request, and for retrying an unreachable broker in all.
    timeout: float = 5.0
    #: Show tracebacks and debug logs.
    debug: bool = False

    def client_options(self) -> ClientOptions:
        """The client options for these settings.

        An unavailable broker (refused, restarting, not yet leader) is retried until
        ``timeout`` seconds have passed, however many attempts that takes: a count of
        attempts made a refused port fail in under a second whatever ``--timeout`` said.
        """
        retry = RetryPolicy(
            max_attempts=_UNLIMITED_ATTEMPTS, max_delay=self.timeout, initial=0.1, maximum=0.5
        )
        return ClientOptions(
            addresses=self.addresses,
            rpc_timeout=self.timeout,
            # The publisher gives up on an unreachable broker max_delay after its first
            # failed dial, seen at its next dial (a back-off of at most 0.5 s later); an
            # ack timer of the same length, started at the publish, fired first and an
            # unreachable broker's publishes failed as "no ack" (exit 6), not exit 5.
            ack_timeout=self.timeout + ACK_MARGIN,
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
    # liftbridge_sync.Client loads the client (grpc, protobuf) here, not when the command
    # line is parsed: --help and usage errors do without it.
    client = liftbridge_sync.Client.from_options(settings.client_options())
    try:
        yield client
    except BrokerUnavailableError as exc:
        client.close(timeout=settings.timeout)
        # Names the brokers and the knob that bounds a request's retries, which the
        # client's message does not (a subscription that lost its broker part-way
        # resubscribes for resubscribe_wait instead, so "retried for --timeout" could lie).
        raise CommandFailed(
            f"{exc} (brokers: {', '.join(settings.addresses)}; --timeout {settings.timeout:g}s)",
            ExitCode.UNAVAILABLE,
        ) from exc
    except (KeyboardInterrupt, Terminated):
        client.close(timeout=min(settings.timeout, INTERRUPT_GRACE))
        raise
    except BaseException:
        client.close(timeout=settings.timeout)
        raise
    client.close(timeout=settings.timeout)
