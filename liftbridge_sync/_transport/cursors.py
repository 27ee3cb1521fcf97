"""Cursors: offsets stored under a name in the server's ``__cursors`` stream, each routed
to the leader of the ``__cursors`` partition the name hashes to.
"""

from __future__ import annotations

import dataclasses
import logging

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.leader import (
    call_leader,
    fetch_partition_metadata,
    leader_address_of,
    partition_info,
    time_left,
)
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.cursors import cursor_partition, visibility_cursor
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync._wire.validate import check_id, check_int, check_name, check_partition
from liftbridge_sync.errors import PermissionDeniedError, ServerError

__all__ = ["CURSORS_STREAM", "fetch_cursor", "set_cursor", "set_cursor_once"]

_log = logging.getLogger("liftbridge_sync.client")

CURSORS_STREAM = "__cursors"


def cursor_target(
    core: ClientCore,
    cursor_id: str,
    stream: str,
    partition: int,
    must_exist: bool,
    budget: Budget | None = None,
    abort: DialAbort | None = None,
) -> tuple[int, int]:
    """The ``__cursors`` partition that stores ``cursor_id`` for ``stream``/``partition``,
    and how many partitions ``__cursors`` has (looked up within ``budget`` if given).
    ``abort``, if given, ends the look-ups' RPCs and back-offs at once when it aborts
    (its owner closed), as :func:`~liftbridge_sync._transport.leader.call_leader`'s;
    without a ``budget`` they then share one, the retry policy's from now.
    Thread-safe.

    Raises:
        ServerError: the server has no ``__cursors`` stream (cursors are disabled).
        ClientClosedError: ``abort`` aborted.
    """
    check_id("cursor_id", cursor_id)
    check_name("stream", stream, allow_reserved=True)
    check_partition("partition", partition)
    if abort is not None:
        # Each look-up under a policy of its own slept its back-offs past a consumer's
        # close(), which waited for its reader that long (2 x rpc_timeout + 1 s).
        options = core.options
        within = Budget.of(options.retry, options.rpc_timeout) if budget is None else budget
        budget = dataclasses.replace(within, abort=abort)
    if must_exist:
        # v1.9.0 stores a cursor for any name: a typo would go unnoticed. A stream
        # created a moment ago is found by the one refresh partition_info makes.
        partition_info(core, stream, partition, refresh=False, budget=budget)
    info = core.metadata.get(budget).streams.get(CURSORS_STREAM)
    if info is None:
        info = core.fetch_metadata([CURSORS_STREAM], budget).streams.get(CURSORS_STREAM)
    if info is None or not info.partitions:
        raise ServerError(
            "the server has no __cursors stream: cursors are disabled "
            "(set cursors.stream.partitions > 0 in the server configuration)"
        )
    count = len(info.partitions)
    return cursor_partition(cursor_id, stream, partition, count), count


def set_cursor(
    core: ClientCore,
    cursor_id: str,
    stream: str,
    partition: int,
    offset: int,
    *,
    must_exist: bool = False,
) -> None:
    """Store ``offset`` under ``cursor_id`` (routed to the cursor partition's leader).

    With ``must_exist``, a stream or partition the cluster's metadata lacks (after one
    refresh) raises ``NoSuchStreamError``/``NoSuchPartitionError`` instead.
    Thread-safe.
    """
    check_int("offset", offset, minimum=-1)
    target, _ = cursor_target(core, cursor_id, stream, partition, must_exist)
    request = api_pb2.SetCursorRequest(
        stream=stream, partition=partition, cursorId=cursor_id, offset=offset
    )
    call_leader(core, CURSORS_STREAM, target, rpcs.SET_CURSOR, request)


def set_cursor_once(
    core: ClientCore, cursor_id: str, stream: str, partition: int, offset: int, timeout: float
) -> None:
    """One attempt of :func:`set_cursor`, at the cached leader of the cursor's
    ``__cursors`` partition, within ``timeout`` seconds: for callers that keep a
    deadline of their own (no retries, no metadata refresh). What the cache lacks
    is looked up within ``timeout`` too (one FetchMetadata attempt each).

    Raises:
        NotLeaderError: the cached leader is not (or no longer) the leader.
        LiftbridgeError: any other failure of the one attempt.

    Thread-safe.
    """
    check_int("offset", offset, minimum=-1)
    budget = Budget.once(timeout)
    target, _ = cursor_target(core, cursor_id, stream, partition, False, budget)
    info = partition_info(core, CURSORS_STREAM, target, refresh=False, budget=budget)
    request = api_pb2.SetCursorRequest(
        stream=stream, partition=partition, cursorId=cursor_id, offset=offset
    )
    core.invoke(
        leader_address_of(core, info),
        rpcs.SET_CURSOR,
        request,
        context=CallContext.LEADER,
        timeout=time_left(core, budget, rpcs.SET_CURSOR.name),
    )


def fetch_cursor(
    core: ClientCore,
    cursor_id: str,
    stream: str,
    partition: int,
    *,
    must_exist: bool = False,
    abort: DialAbort | None = None,
) -> int:
    """The offset stored under ``cursor_id``, or ``-1`` (``must_exist`` as for
    :func:`set_cursor`; ``abort`` ends the leader call's back-offs, as
    :func:`~liftbridge_sync._transport.leader.call_leader`'s, and those of the look-up
    of the cursor's ``__cursors`` partition). Thread-safe."""
    target, count = cursor_target(core, cursor_id, stream, partition, must_exist, abort=abort)
    reveal_cursors(core, target, count, abort)
    request = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
    response = call_leader(core, CURSORS_STREAM, target, rpcs.FETCH_CURSOR, request, abort=abort)
    return int(response.offset)


def reveal_cursors(
    core: ClientCore, target: int, count: int, abort: DialAbort | None = None
) -> None:
    """Make every cursor stored in ``__cursors`` partition ``target`` readable (``abort``
    ends its leader calls' back-offs).

    v1.9.0 answers FetchCursor from the log up to the high watermark, which a
    restarted leader recovers from a checkpoint written every 5 s and not at
    shutdown: cursors set in the seconds before a restart read back older, or as
    ``-1``, until the partition commits something new (and the stale answer is then
    cached). A partition whose newest offset is past its watermark is given that
    new commit first: a cursor of our own, stored with ack ALL. So is a paused one,
    whose watermark no leader reports (the commit resumes it, as FetchCursor would).

    An ACL that lets this identity fetch cursors need not let it ask about or write
    to ``__cursors`` itself: then the cursor is read as the server has it, and the
    first time a WARNING says why it may be older. Thread-safe.
    """
    try:
        info = fetch_partition_metadata(core, CURSORS_STREAM, target, abort=abort)
        if not info.paused and info.newest_offset <= info.high_watermark:
            return
        request = api_pb2.SetCursorRequest(
            stream=CURSORS_STREAM,
            partition=target,
            cursorId=visibility_cursor(target, count),
            offset=info.newest_offset,
        )
        call_leader(core, CURSORS_STREAM, target, rpcs.SET_CURSOR, request, abort=abort)
    except PermissionDeniedError as error:
        if not core.cursors_unrevealed_told:
            core.cursors_unrevealed_told = True
            _log.warning(
                "cursors are read without first committing the rest of their "
                "__cursors partition (%s): a cursor stored in the seconds before a "
                "server restart may read back older, or as -1, until that partition "
                "commits something new",
                error,
            )
