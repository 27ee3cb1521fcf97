"""Joining a consumer group for the client: the member joined, then owned by the core.

Thread-safe: a function of the core it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer.group import Consumer
from liftbridge_sync.positions import StartAt

__all__ = ["join"]


def join(
    core: ClientCore,
    group: str,
    streams: Sequence[str],
    consumer_id: str | None,
    start: StartAt | None,
    auto_commit: float | None,
    rejoin: bool,
) -> Consumer:
    """A joined :class:`Consumer`, registered so that closing the client closes it.

    Raises:
        ConfigurationError: on a bad argument.
        NoSuchStreamError: if a stream does not exist.
        ConsumerIdInUseError: if ``consumer_id`` is a member of the group already.
    """
    consumer = Consumer(
        core,
        group,
        streams,
        consumer_id=consumer_id,
        start=start,
        auto_commit=auto_commit,
        rejoin=rejoin,
    )
    consumer.join()
    try:
        core.register(consumer)
    except BaseException:
        consumer.close()
        raise
    return consumer
