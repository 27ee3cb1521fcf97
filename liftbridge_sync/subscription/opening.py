"""Opening subscriptions: validating arguments and building the first SubscribeRequest.

Start positions that depend on the moment of subscribing (new-only, latest, a time delta,
a cursor) and the stop positions of forward reads (latest, a time) are pinned here to
fixed offsets or times, with RPCs to the partition leader, so that every later
resubscribe asks for exactly what the first request meant. A range known to be empty is
not subscribed at all. Functions only: thread-safe.
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
    """The SubscribeRequest with moment-dependent positions pinned; ``None`` if empty.

    A forward read with a stop position reads the range "first offset at or after the
    start, up to the last offset at or before the stop". A stop at the newest message
    (``StopAt.latest()``) or at a time (``StopAt.timestamp()``, checked per message by
    the subscription) is pinned to the newest offset at subscribe time. When both ends
    are known offsets (or both are times) and the stop lies before the start, or the
    partition is empty, the range is empty: ``None``, and nothing is subscribed.
    """
    request = api_pb2.SubscribeRequest(
        stream=stream,
        partition=partition,
        readISRReplica=read_isr_replica,
        resume=resume,
        reverse=reverse,
    )
    kind = start.kind
    pin_start = not reverse and kind in (StartKind.NEW_ONLY, StartKind.LATEST)
    pin_stop = (
        not reverse and stop is not None and stop.kind in (StopKind.LATEST, StopKind.TIMESTAMP)
    )
    newest = -1
    if pin_start or pin_stop:
        newest = core.fetch_partition_metadata(stream, partition).newest_offset
    # The first offset to read, when known without asking the server.
    first: int | None = None
    # The start time in Unix ns, for TIMESTAMP and TIME_DELTA starts.
    since: int | None = None
    if pin_start:
        # The server computes the same offsets at subscribe time; fixing them here makes
        # a resubscribe before the first message resume exactly where this one began.
        first = newest + 1 if kind is StartKind.NEW_ONLY else max(newest, 0)
        request.startPosition = api_pb2.OFFSET
        request.startOffset = first
    elif kind is StartKind.NEW_ONLY:
        request.startPosition = api_pb2.NEW_ONLY
    elif kind is StartKind.LATEST:
        request.startPosition = api_pb2.LATEST
    elif kind is StartKind.EARLIEST:
        request.startPosition = api_pb2.EARLIEST
    elif kind is StartKind.OFFSET:
        first = start.at_offset
        request.startPosition = api_pb2.OFFSET
        request.startOffset = first
    elif kind in (StartKind.TIMESTAMP, StartKind.TIME_DELTA):
        since = start.resolve_timestamp_ns()
        request.startPosition = api_pb2.TIMESTAMP
        request.startTimestamp = since
    elif kind is StartKind.CURSOR:
        cursor = core.fetch_cursor(start.cursor_id, stream, partition)
        if cursor < 0:
            request.startPosition = api_pb2.EARLIEST
        else:
            first = cursor + 1
            request.startPosition = api_pb2.OFFSET
            request.startOffset = first
    else:  # pragma: no cover - exhaustive over StartKind
        raise ConfigurationError(f"unsupported start position {kind}")
    if stop is None:
        return request
    if reverse:
        _set_stop_for_the_server(request, stop)
        return request
    if pin_stop:
        if newest < 0:
            return None  # an empty partition: nothing at or before any stop
        last = newest
    else:
        last = stop.at_offset
    if first is not None and last < first:
        return None  # the stop is before the start
    if stop.kind is StopKind.TIMESTAMP and since is not None and stop.at_timestamp_ns < since:
        return None  # the stop time is before the start time
    request.stopPosition = api_pb2.STOP_OFFSET
    request.stopOffset = last
    return request


def _set_stop_for_the_server(request: api_pb2.SubscribeRequest, stop: StopAt) -> None:
    """A reverse read's stop position, left to the server to resolve."""
    if stop.kind is StopKind.LATEST:
        request.stopPosition = api_pb2.STOP_LATEST
    elif stop.kind is StopKind.OFFSET:
        request.stopPosition = api_pb2.STOP_OFFSET
        request.stopOffset = stop.at_offset
    else:
        request.stopPosition = api_pb2.STOP_TIMESTAMP
        request.stopTimestamp = stop.at_timestamp_ns


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
        stop_timestamp_ns=(
            stop.at_timestamp_ns
            if stop is not None and stop.kind is StopKind.TIMESTAMP and not reverse
            else None
        ),
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
