"""Opening subscriptions: validating arguments and building the first SubscribeRequest.

Start positions that depend on the moment of subscribing (new-only, latest, a time delta,
a cursor, stop-at-latest) are pinned here to fixed offsets or times, with RPCs to the
partition leader, so that every later resubscribe asks for exactly what the first
request meant. Functions only: thread-safe.
"""

from __future__ import annotations

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import check_bool, check_name, check_partition
from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.positions import StartAt, StartKind, StopAt, StopKind
from liftbridge_sync.subscription.partition import Subscription, SubscriptionTarget

__all__ = [
    "build_subscribe_request",
    "check_positions",
    "open_partition",
    "open_subscription",
]


def check_positions(start: StartAt | None, stop: StopAt | None) -> StartAt:
    if start is not None and not isinstance(start, StartAt):
        raise ConfigurationError("'start' must be a StartAt or None")
    if stop is not None and not isinstance(stop, StopAt):
        raise ConfigurationError("'stop' must be a StopAt or None")
    return StartAt.new_only() if start is None else start


def build_subscribe_request(
    core: ClientCore,
    stream: str,
    partition: int,
    start: StartAt,
    stop: StopAt | None,
    *,
    read_isr_replica: bool,
    resume: bool,
    reverse: bool,
) -> api_pb2.SubscribeRequest | None:
    """The SubscribeRequest with moment-dependent positions pinned; ``None`` if empty."""
    request = api_pb2.SubscribeRequest(
        stream=stream,
        partition=partition,
        readISRReplica=read_isr_replica,
        resume=resume,
        reverse=reverse,
    )
    kind = start.kind
    pin_start = not reverse and kind in (StartKind.NEW_ONLY, StartKind.LATEST)
    pin_stop = not reverse and stop is not None and stop.kind is StopKind.LATEST
    newest = -1
    if pin_start or pin_stop:
        newest = core.fetch_partition_metadata(stream, partition).newest_offset
    if pin_start:
        # The server computes the same offsets at subscribe time; fixing them here makes
        # a resubscribe before the first message resume exactly where this one began.
        request.startPosition = api_pb2.OFFSET
        request.startOffset = newest + 1 if kind is StartKind.NEW_ONLY else max(newest, 0)
    elif kind is StartKind.NEW_ONLY:
        request.startPosition = api_pb2.NEW_ONLY
    elif kind is StartKind.LATEST:
        request.startPosition = api_pb2.LATEST
    elif kind is StartKind.EARLIEST:
        request.startPosition = api_pb2.EARLIEST
    elif kind is StartKind.OFFSET:
        request.startPosition = api_pb2.OFFSET
        request.startOffset = start.at_offset
    elif kind in (StartKind.TIMESTAMP, StartKind.TIME_DELTA):
        request.startPosition = api_pb2.TIMESTAMP
        request.startTimestamp = start.resolve_timestamp_ns()
    elif kind is StartKind.CURSOR:
        cursor = core.fetch_cursor(start.cursor_id, stream, partition)
        if cursor < 0:
            request.startPosition = api_pb2.EARLIEST
        else:
            request.startPosition = api_pb2.OFFSET
            request.startOffset = cursor + 1
    else:  # pragma: no cover - exhaustive over StartKind
        raise ConfigurationError(f"unsupported start position {kind}")
    if stop is None:
        return request
    if pin_stop:
        if newest < 0:
            return None  # the server would answer "Stream is empty"
        request.stopPosition = api_pb2.STOP_OFFSET
        request.stopOffset = newest
    elif stop.kind is StopKind.LATEST:
        request.stopPosition = api_pb2.STOP_LATEST
    elif stop.kind is StopKind.OFFSET:
        request.stopPosition = api_pb2.STOP_OFFSET
        request.stopOffset = stop.at_offset
    else:
        request.stopPosition = api_pb2.STOP_TIMESTAMP
        request.stopTimestamp = stop.at_timestamp_ns
    return request


def open_partition(
    core: ClientCore,
    stream: str,
    partition: int,
    start: StartAt,
    stop: StopAt | None,
    *,
    read_isr_replica: bool,
    resume: bool,
    reverse: bool,
) -> Subscription:
    request = build_subscribe_request(
        core,
        stream,
        partition,
        start,
        stop,
        read_isr_replica=read_isr_replica,
        resume=resume,
        reverse=reverse,
    )
    target = SubscriptionTarget(
        stream=stream,
        partition=partition,
        request=request if request is not None else api_pb2.SubscribeRequest(),
        read_isr_replica=read_isr_replica,
        reverse=reverse,
    )
    sub = Subscription(core, target)
    sub.open(empty=request is None)
    return sub


def open_subscription(
    core: ClientCore,
    stream: str,
    *,
    partition: int,
    start: StartAt | None,
    stop: StopAt | None,
    read_isr_replica: bool,
    resume: bool,
    reverse: bool,
) -> Subscription:
    """Open a subscription on one partition (see :meth:`Client.subscribe`).

    Raises:
        ConfigurationError: on a bad argument.
        NoSuchPartitionError: if the stream or partition does not exist.
        BrokerUnavailableError: if no broker answered within the retry policy.
    """
    check_name("stream", stream, allow_reserved=True)
    check_partition("partition", partition)
    start = check_positions(start, stop)
    sub = open_partition(
        core,
        stream,
        partition,
        start,
        stop,
        read_isr_replica=check_bool("read_isr_replica", read_isr_replica),
        resume=check_bool("resume", resume),
        reverse=check_bool("reverse", reverse),
    )
    try:
        core.register(sub)
    except BaseException:
        sub.close()
        raise
    return sub
