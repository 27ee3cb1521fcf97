"""Driver-side check of a write target before any Spark task starts.

Without it, a wrong ``brokers`` option fails only on an executor, after the first
publish's ack timeout, with an :class:`~liftbridge_sync.AckTimeoutError` that does not
say the broker is unreachable. :func:`check_target` asks the cluster once, on the
driver, with retries bounded by the client's ``rpc_timeout``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from liftbridge_sync import (
    BrokerUnavailableError,
    Client,
    ClientOptions,
    DeadlineExceededError,
    NoSuchStreamError,
)

__all__ = ["brokers_named", "check_target"]


def _bounded(options: ClientOptions) -> ClientOptions:
    """``options`` whose retries give up within about one ``rpc_timeout``."""
    budget = min(options.retry.max_delay, options.rpc_timeout / 2)
    retry = dataclasses.replace(options.retry, max_delay=budget)
    return dataclasses.replace(options, retry=retry)


@contextlib.contextmanager
def brokers_named(options: ClientOptions) -> Iterator[None]:
    """Turn a broker that did not answer inside the block into an error naming option
    ``brokers`` and its addresses (a timed-out request included: before anything is
    read or written, it means the same).

    Raises:
        BrokerUnavailableError: what the block raised as ``BrokerUnavailableError`` or
            ``DeadlineExceededError``, reworded.
    """
    try:
        yield
    except (BrokerUnavailableError, DeadlineExceededError) as exc:
        raise BrokerUnavailableError(
            f"option 'brokers': no Liftbridge broker answered at "
            f"{','.join(options.addresses)} within {options.rpc_timeout:g}s ({exc})"
        ) from None


def check_target(options: ClientOptions, stream: str | None, option: str = "stream") -> None:
    """Check that a broker answers and that ``stream`` exists (``None``: brokers only).

    Args:
        options: The client options the executors will use.
        stream: The target stream, or ``None`` when each row names its own.
        option: The user's name for the stream setting, quoted in the error.

    Raises:
        BrokerUnavailableError: no seed broker answered within about ``rpc_timeout``
            (the message names option ``brokers``).
        NoSuchStreamError: ``stream`` does not exist (the message names ``option``).

    Thread-safe: it uses a private client, closed before returning.
    """
    addresses = ",".join(options.addresses)
    with Client.from_options(_bounded(options)) as client, brokers_named(options):
        metadata = client.fetch_metadata(*([stream] if stream else []))
    if stream and stream not in metadata.streams:
        raise NoSuchStreamError(
            f"option {option!r}: stream {stream!r} does not exist on {addresses}"
        )
