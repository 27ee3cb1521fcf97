"""Opening subscriptions: validating arguments and building the first SubscribeRequest.

Start positions that depend on the moment of subscribing (new-only, latest, a time delta,
a cursor) and the stop positions of forward reads (latest, a time) are pinned here to
fixed offsets or times, with RPCs to the partition leader, so that every later
resubscribe asks for exactly what the first request meant. A range known to be empty is
not subscribed at all. Functions only: thread-safe.
"""

from __future__ import annotations

import logging
import time

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import cursors, leader
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import check_bool, check_name, check_partition, offset_after
from liftbridge_sync.errors import (
    ArgumentTypeError,
    ClientClosedError,
    ConfigurationError,
    DeadlineExceededError,
)
from liftbridge_sync.models import Message
from liftbridge_sync.models._metadata import is_paused
from liftbridge_sync.positions import StartAt, StartKind, StopAt, StopKind
from liftbridge_sync.subscription.partition import Subscription, SubscriptionTarget

__all__ = [
    "build_subscribe_request",
    "check_positions",
    "cursor_in_range",
    "open_partition",
    "open_subscription",
]

_log = logging.getLogger("liftbridge_sync.subscription")


_TIME_STARTS = (StartKind.TIMESTAMP, StartKind.TIME_DELTA)

#: The reads whose bound (:func:`_read_bound`) a timestamp start's look-up gets in all.
#: Two: the server's answer and the newest message may each wait out a silence (their
#: messages deleted by retention); the bisect's reads are of committed messages, served
#: at once.
_LOOK_UP_READS = 2


def check_positions(start: StartAt | None, stop: StopAt | None) -> StartAt:
    """``start`` (``StartAt.new_only()`` for ``None``), once both are checked.

    Raises:
        ArgumentTypeError: ``start`` is not a StartAt, or ``stop`` not a StopAt (or None).
    """
    if start is not None and not isinstance(start, StartAt):
        raise ArgumentTypeError(f"'start' must be a StartAt or None, got {type(start).__name__}")
    if stop is not None and not isinstance(stop, StopAt):
        raise ArgumentTypeError(f"'stop' must be a StopAt or None, got {type(stop).__name__}")
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
    pin_time = not reverse and kind in _TIME_STARTS
    pin_stop = (
        not reverse and stop is not None and stop.kind in (StopKind.LATEST, StopKind.TIMESTAMP)
    )
    # The start time in Unix ns, for TIMESTAMP and TIME_DELTA starts.
    since = start.resolve_timestamp_ns() if kind in _TIME_STARTS else None
    if (
        since is not None
        and stop is not None
        and stop.kind is StopKind.TIMESTAMP
        and stop.at_timestamp_ns < since
    ):
        return None  # the stop time is before the start time: nothing to look up
    newest = committed = -1
    if pin_start or pin_time or pin_stop:
        info = leader.fetch_partition_metadata(core, stream, partition)
        newest, committed = info.newest_offset, info.high_watermark
    # The first offset to read, when known without asking the server.
    first: int | None = None
    if pin_start:
        # The server computes the same offsets at subscribe time; fixing them here makes
        # a resubscribe before the first message resume exactly where this one began.
        first = (
            offset_after(newest, "the newest message")
            if kind is StartKind.NEW_ONLY
            else max(newest, 0)
        )
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
    elif pin_time:
        assert since is not None
        first = first_offset_since(core, stream, partition, since, committed, resume=resume)
        request.startPosition = api_pb2.OFFSET
        request.startOffset = first
    elif since is not None:
        request.startPosition = api_pb2.TIMESTAMP
        request.startTimestamp = since
    elif kind is StartKind.CURSOR:
        cursor = cursors.fetch_cursor(core, start.cursor_id, stream, partition)
        if cursor >= 0 and cursor_in_range(
            core,
            stream,
            partition,
            cursor,
            named=f"{start.cursor_id!r} at ",
            instead="the earliest offset",
            log=_log,
        ):
            first = offset_after(cursor, f"cursor {start.cursor_id!r}")
            request.startPosition = api_pb2.OFFSET
            request.startOffset = first
        else:
            request.startPosition = api_pb2.EARLIEST
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
    request.stopPosition = api_pb2.STOP_OFFSET
    request.stopOffset = last
    return request


def cursor_in_range(
    core: ClientCore,
    stream: str,
    partition: int,
    cursor: int,
    *,
    named: str,
    instead: str,
    log: logging.Logger,
    abort: DialAbort | None = None,
) -> bool:
    """Whether ``cursor`` lies in the partition's log (at or before its newest offset).

    One past it is what a stream deleted and created again under its name leaves
    (v1.9.0 keeps the cursors of a deleted stream): reading after it would skip every
    message up to it, unsaid. Out of range, the caller reads from elsewhere, as Kafka's
    ``auto.offset.reset``; this logs a WARNING to ``log`` naming the cursor (``named``:
    a prefix for it, such as its id) and where reading goes ``instead``. ``abort``
    ends the look-up's back-offs at once (``ClientClosedError``).
    """
    meta = leader.fetch_partition_metadata(core, stream, partition, abort=abort)
    if is_paused(meta) or cursor <= meta.newest_offset:
        return True
    log.warning(
        "%s/%d: cursor %s%d is past the partition's newest offset %d (the stream was "
        "created again?): reading from %s instead",
        stream,
        partition,
        named,
        cursor,
        meta.newest_offset,
        instead,
    )
    return False


def first_offset_since(
    core: ClientCore,
    stream: str,
    partition: int,
    since_ns: int,
    committed: int,
    *,
    resume: bool,
) -> int:
    """The offset of the first committed message at or after ``since_ns`` (Unix ns);
    ``committed + 1`` when every committed message is older.

    A message written but not committed yet when this is asked may be older, too: a
    subscription from the offset returned skips those
    (:attr:`SubscriptionTarget.start_timestamp_ns`).

    The server's answer is taken when it lies among the committed messages. v1.9.0
    answers the log's next offset, skipping every message of its last segment, when the
    time falls between the last message of the segment before and the first of the
    last segment (its search looks at that segment only if another follows it), or when
    the last segment is still empty (a read error stops the search). Every wrong answer
    of its is that one, so only then is the newest committed message looked at, and if
    it is not older than ``since_ns``, the first that is not is found by bisecting the
    offsets (a read at an offset returns the first message at or after it, whatever
    compaction removed). Committed messages are served at once: no read waits. With
    ``resume`` the reads resume a paused partition, as the subscription would.

    The look-up as a whole keeps to :data:`_LOOK_UP_READS` reads' bound (three
    times ``rpc_timeout`` each, see :func:`_one_message`): each read gets what is left of it,
    at most its own bound. One per step, a broker slow to serve every read held
    ``subscribe()`` for about 40 of them on a big log.

    Raises:
        DeadlineExceededError: a read, or the look-up as a whole, ran out of time.
        LiftbridgeError: if a read failed.
    """
    if committed < 0:
        return 0
    began = time.monotonic()
    within = _LOOK_UP_READS * _read_bound(core)
    deadline = began + within

    def first_from(position: api_pb2.StartPosition, at: int, stop: int) -> Message | None:
        if time.monotonic() >= deadline:
            raise DeadlineExceededError(
                f"{stream}/{partition}: looking up a timestamp start took longer than "
                f"{within}s (the partition's leader served its reads slowly)"
            )
        return _one_message(core, stream, partition, position, at, stop, resume, deadline)

    probe = first_from(api_pb2.TIMESTAMP, since_ns, committed)
    if probe is not None:
        return probe.offset
    last = first_from(api_pb2.OFFSET, committed, committed)
    if last is None or last.timestamp_ns < since_ns:
        return offset_after(committed, "the newest committed message")
    # Bisect the offsets o for the first at which "the first message at or after o is
    # not older": ``answer`` is that message's offset for the lowest o found so far.
    low, high, answer = 0, last.offset, last.offset
    while low < high:
        middle = (low + high) // 2
        found = first_from(api_pb2.OFFSET, middle, answer)
        if found is not None and found.timestamp_ns >= since_ns:
            high, answer = middle, found.offset
        else:
            # Older (or gone since): so is everything up to it.
            low = offset_after(
                middle if found is None else max(middle, found.offset), "a message read"
            )
    return answer


def _read_bound(core: ClientCore) -> float:
    """The seconds one read of the look-up waits for its message (see
    :func:`_one_message`): three times ``rpc_timeout`` (two silences confirm a
    deletion, see ``ReadFailures``, and the leader is asked after each)."""
    return 3 * core.options.rpc_timeout


def _one_message(
    core: ClientCore,
    stream: str,
    partition: int,
    position: api_pb2.StartPosition,
    at: int,
    stop: int,
    resume: bool,
    deadline: float,
) -> Message | None:
    """The first message from ``position`` (``api_pb2.OFFSET`` at offset ``at``, or
    ``api_pb2.TIMESTAMP`` at Unix ns ``at``) up to offset ``stop``; ``None`` if none.

    The subscription opens by ``deadline`` (the whole look-up's, a
    ``time.monotonic()``), and then the message is waited for three times
    ``rpc_timeout`` at most, or until ``deadline`` if sooner: what is asked for is
    committed, and served at once, unless retention deleted it, which two silences of
    ``rpc_timeout`` in a row and the leader's answers tell (see ``ReadFailures``):
    ``None`` then. A leader that
    cannot answer, or whose high watermark fell behind the stop, left the read waiting
    for ever. The subscription is the client's while it reads: ``Client.close()`` from
    another thread ends it.

    Raises:
        DeadlineExceededError: no message (nor the end of the read) within three
            times ``rpc_timeout``, or by ``deadline``.
        ClientClosedError: the client was closed meanwhile.
    """
    request = api_pb2.SubscribeRequest(
        stream=stream,
        partition=partition,
        startPosition=position,
        stopPosition=api_pb2.STOP_OFFSET,
        stopOffset=stop,
        resume=resume,
    )
    if position == api_pb2.OFFSET:
        request.startOffset = at
    else:
        request.startTimestamp = at
    target = SubscriptionTarget(
        stream=stream, partition=partition, request=request, read_isr_replica=False, reverse=False
    )
    sub = Subscription(core, target)
    try:
        core.register(sub)  # closed, if the client is: ClientClosedError
        sub.open(empty=False, deadline=deadline)
        seconds = max(0.0, min(_read_bound(core), deadline - time.monotonic()))
        try:
            return sub.get(seconds)
        except StopIteration:
            if core.closed:
                raise ClientClosedError("client is closed") from None
            return None
        except TimeoutError:
            where = "offset" if position == api_pb2.OFFSET else "timestamp"
            raise DeadlineExceededError(
                f"{stream}/{partition}: looking up a timestamp start, no message at or "
                f"after {where} {at} (up to offset {stop}) arrived within {seconds:.3g}s"
            ) from None
    finally:
        sub.close()


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
    # One instant for the request and the screening of its first messages.
    start = start.pinned()
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
        start_timestamp_ns=(
            start.at_timestamp_ns if start.kind is StartKind.TIMESTAMP and not reverse else None
        ),
    )
    sub = Subscription(core, target)
    # Before it opens: close() then ends the opening too, which waits for the broker's
    # handshake on the caller's thread (with h2 bounded by a timer on the scheduler
    # that close() stops, so a silent broker held it for the keepalive, 30 s).
    core.register(sub)  # closed, if the client is: ClientClosedError
    try:
        sub.open(empty=request is None)
    except BaseException:
        sub.close()
        raise
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
        DeadlineExceededError: a time start's offset, read from the partition, did
            not arrive within twice ``rpc_timeout`` (one read), or four times it (the
            whole look-up).
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
