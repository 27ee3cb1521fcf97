"""Subscriptions: blocking iterators over stream partitions (being implemented)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from liftbridge_sync.positions import StartAt, StopAt

if TYPE_CHECKING:
    from liftbridge_sync.client import Client

__all__ = ["StreamSubscription", "Subscription", "open_stream_subscription", "open_subscription"]


class Subscription:
    """Placeholder until the subscription module lands."""


class StreamSubscription:
    """Placeholder until the subscription module lands."""


def open_subscription(
    client: Client,
    stream: str,
    *,
    partition: int,
    start: StartAt | None,
    stop: StopAt | None,
    read_isr_replica: bool,
    resume: bool,
    reverse: bool,
) -> Subscription:
    """Open a subscription on one partition."""
    raise NotImplementedError


def open_stream_subscription(
    client: Client,
    stream: str,
    *,
    start: StartAt | None,
    stop: StopAt | None,
    read_isr_replica: bool,
    resume: bool,
) -> StreamSubscription:
    """Open a subscription on every partition of a stream."""
    raise NotImplementedError
