"""The activity stream as an iterator of typed events (see :meth:`Client.activity`).

An :class:`ActivityStream` is a :class:`~liftbridge_sync.subscription.Subscription` on
the reserved ``__activity`` stream whose messages are decoded with
:func:`liftbridge_sync.activity.decode_event`. It resubscribes after failover exactly
like any subscription, drops events whose id it has already delivered (the server
publishes at-least-once), and skips messages that are no events.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._runtime.throttled_log import ThrottledWarning
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import check_int
from liftbridge_sync.activity import ACTIVITY_STREAM, ActivityEvent, decode_event
from liftbridge_sync.errors import ActivityStreamDisabledError, NoSuchStreamError, ServerError
from liftbridge_sync.positions import StartAt
from liftbridge_sync.subscription.opening import open_subscription
from liftbridge_sync.subscription.partition import Subscription

__all__ = ["ActivityStream", "open_activity_stream"]

_log = logging.getLogger("liftbridge_sync.subscription")

#: Seconds between the first looks for a missing ``__activity``, and at most: a new
#: cluster creates it within a few seconds of electing its metadata leader.
_FIRST_LOOK = 0.1
_LAST_LOOK = 1.0

#: How many of the ids last delivered an :class:`ActivityStream` remembers to recognise
#: repeats. The server repeats only the events it had not recorded as published when its
#: metadata leadership moved (one, or a few), so this is ample.
REMEMBERED_IDS = 4096
#: Event ids are Raft indexes: uint64.
UINT64_MAX = 2**64 - 1


class ActivityStream:
    """Iterate typed activity events, in the order the cluster applied the changes.

    Use it as an iterator and a context manager, like a
    :class:`~liftbridge_sync.subscription.Subscription`::

        with client.activity(start=StartAt.earliest()) as events:
            for event in events:
                if isinstance(event, StreamCreated):
                    ...

    Repeats (the server publishes at-least-once) are recognised by id among the last
    4096 events delivered (``REMEMBERED_IDS``); a new stream remembers none. To resume
    where an earlier one left off, give :meth:`Client.activity` the last event's
    ``offset + 1`` as ``start`` and its ``id`` as ``after_id``: repeats of the events
    handled before are then dropped as well.

    Not thread-safe for iteration; close() may be called from any thread.
    """

    def __init__(self, subscription: Subscription, *, after_id: int | None = None) -> None:
        self._sub = subscription
        # Ids up to this one were handled by an earlier stream the application resumes:
        # a genuine event with such an id is a repeat (genuine ids strictly increase).
        self._after_id = after_id
        # Repeats are recognised by id, not by "id <= the last one": anyone may publish
        # to __activity, and one event forged with a huge id would make every later
        # genuine event look like a repeat.
        self._seen: set[int] = set()
        self._seen_order: deque[int] = deque()
        self._skipped = ThrottledWarning(_log)

    @property
    def subscription(self) -> Subscription:
        """The underlying subscription on ``__activity``."""
        return self._sub

    @property
    def last_offset(self) -> int | None:
        """Offset in ``__activity`` of the last message read, ``None`` before the first.

        That of the last event delivered, or of a repeat dropped or a message that is no
        event skipped after it: resume at the next offset.
        """
        return self._sub.last_offset

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._sub.closed

    def __iter__(self) -> ActivityStream:
        return self

    def __next__(self) -> ActivityEvent:
        return self.get(None)

    def get(self, timeout: float | None = None) -> ActivityEvent:
        """The next event, waiting at most ``timeout`` seconds (``None``: forever).

        A message on ``__activity`` that is not an activity event (the server lets any
        client publish there) is skipped with a WARNING on ``liftbridge_sync.subscription``
        (at most one a minute; the next says how many were skipped in between).

        Raises:
            TimeoutError: if no new event arrived in time; the stream stays usable.
            StopIteration: if closed.
        """
        seconds = check_seconds("timeout", timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            # One budget for the whole call: a repeat dropped does not start it again.
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = self._sub.get(left)
            try:
                event = decode_event(msg.value, offset=msg.offset, timestamp_ns=msg.timestamp_ns)
            except ServerError as exc:
                # Anyone may publish to __activity: raising would let one stray
                # message end every reader's for loop.
                self._skipped.warning(
                    "%s offset %d is not an activity event, skipped: %s",
                    ACTIVITY_STREAM,
                    msg.offset,
                    exc,
                )
                continue
            if event.id in self._seen or (
                self._after_id is not None and event.id <= self._after_id
            ):
                continue  # a repeat after a metadata-leader change, or before after_id
            self._remember(event.id)
            return event

    def _remember(self, event_id: int) -> None:
        self._seen.add(event_id)
        self._seen_order.append(event_id)
        if len(self._seen_order) > REMEMBERED_IDS:
            self._seen.discard(self._seen_order.popleft())

    def close(self) -> None:
        """End the iteration; a blocked read ends with ``StopIteration``. Idempotent."""
        self._sub.close()

    def __enter__(self) -> ActivityStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        last_id = self._seen_order[-1] if self._seen_order else None
        return f"<ActivityStream last_offset={self.last_offset} last_id={last_id}>"


def open_activity_stream(
    core: ClientCore, start: StartAt | None, timeout: float, after_id: int | None = None
) -> ActivityStream:
    """Subscribe to ``__activity`` (see :meth:`Client.activity`), waiting up to
    ``timeout`` seconds for the stream to exist; events with an id up to ``after_id``
    are dropped, and without ``start`` the reading begins at the earliest event.

    A new cluster creates ``__activity`` when it elects its first metadata leader, a
    while after its servers answer; a client started with its cluster would otherwise
    fail in between. Each look is one metadata refresh; the waits between looks end
    early when the client closes.

    Raises:
        ActivityStreamDisabledError: ``__activity`` still does not exist after
            ``timeout`` (the server runs without the activity stream).
        ClientClosedError: The client was closed meanwhile.
    """
    if after_id is not None:
        after_id = check_int("after_id", after_id, minimum=0, maximum=UINT64_MAX)
        if start is None:
            start = StartAt.earliest()
    deadline = time.monotonic() + timeout
    delay = _FIRST_LOOK
    while True:
        try:
            sub = open_subscription(
                core,
                ACTIVITY_STREAM,
                partition=0,
                start=start,
                stop=None,
                read_isr_replica=False,
                resume=False,
                reverse=False,
            )
        except NoSuchStreamError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ActivityStreamDisabledError(
                    f"the server has no activity stream ({ACTIVITY_STREAM!r}) after "
                    f"{timeout:g}s: it runs without one (set 'activity.stream.enabled: "
                    "true' in its configuration file; there is no command-line flag), or "
                    "its cluster has not elected a metadata leader yet (which creates it)",
                    code=exc.code,
                    details=exc.details,
                ) from exc
            core.back_off(min(delay, left))
            delay = min(delay * 2, _LAST_LOOK)
            continue
        return ActivityStream(sub, after_id=after_id)
