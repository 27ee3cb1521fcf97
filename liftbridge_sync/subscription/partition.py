"""Subscriptions: a blocking iterator over one stream partition.

A :class:`Subscription` reads its subscribe call (opened by
:func:`liftbridge_sync._transport.opening.open_subscribe`, either transport) on the caller's
thread and starts no thread of its own. With the default ``"h2"`` transport a
``get(timeout)`` waits on the call's socket until its deadline and leaves the call open:
the next read goes on where it stopped, and ``get(0)`` hands out what has arrived.
grpcio's reads take no deadline, so with ``"grpc"`` the client's shared
``liftbridge-timer`` thread cancels the call when ``get(timeout)`` expires, and the next
read resubscribes from ``last_offset + 1``. Either way a timeout loses and repeats
nothing.

The first request is built (and its moment-dependent positions pinned) by
:mod:`liftbridge_sync.subscription.opening`; opening and reopening the call (broker
choice, retries, the handshake, deletion or restart) is
:mod:`liftbridge_sync.subscription.connection`'s; which messages of a batch may be
delivered, :mod:`liftbridge_sync.subscription.batch_screen`'s (by the rules of
:mod:`liftbridge_sync.subscription.screening`); what a failed or silent read means,
:mod:`liftbridge_sync.subscription.read_failures`'. This module delivers them.
Thread-safe as :class:`Subscription` says.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.scheduler import TimerHandle
from liftbridge_sync._transport import cursors
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.opening import SubscribeCall
from liftbridge_sync._wire.validate import check_id, check_int, check_timeout
from liftbridge_sync.errors import (
    ClientClosedError,
    DeadlineExceededError,
    LiftbridgeError,
    UnsupportedError,
    WaitTimeoutError,
    WrongThreadError,
)
from liftbridge_sync.models import Message, _set_message_pb
from liftbridge_sync.models import _new_object as _new_message
from liftbridge_sync.subscription.batch_screen import BatchScreen
from liftbridge_sync.subscription.connection import (
    Closed,
    PartitionConnection,
    SubscriptionTarget,
)
from liftbridge_sync.subscription.read_failures import ReadFailures
from liftbridge_sync.subscription.refusals import ReadTimeout
from liftbridge_sync.subscription.stats import SubscriptionStats

__all__ = ["Subscription", "SubscriptionTarget"]

_log = logging.getLogger("liftbridge_sync.subscription")
_from_proto = Message.from_proto
_V = TypeVar("_V")


def _wire(pb: api_pb2.Message) -> api_pb2.Message:
    """The wire message itself (the view of :meth:`Subscription._get_many_wire`)."""
    return pb


class Subscription:
    """Iterate messages of one partition; resubscribes after failover from last_offset + 1.

    Use it as an iterator (``for msg in sub``) and a context manager. :meth:`get` waits at
    most ``timeout`` seconds. After a lost connection, a broker restart or a leader
    change, the subscription transparently reconnects (to the current leader, or a random
    in-sync replica) for up to ``ClientOptions.resubscribe_wait`` seconds and continues
    after the last delivered offset, with no gap and no duplicate. Terminal conditions
    raise at the point of iteration: :class:`~liftbridge_sync.errors.StreamDeletedError`,
    :class:`~liftbridge_sync.errors.PartitionPausedError`,
    :class:`~liftbridge_sync.errors.PermissionDeniedError`. A stop position, the end of a
    read-only partition or :meth:`close` end the iteration with ``StopIteration``.

    Offsets are strictly increasing: a message at or below one already delivered (a
    diverged replica, a server bug) is never handed out; it is logged, counted in
    :meth:`stats`, and the subscription resubscribes after the last delivered offset.
    A refusal the server gives while its cleaner swaps log segments ("segment has been
    closed") is retried like a lost connection.

    The first message delivered is the one asked for: v1.9.0 serves a start offset above
    the high watermark from the old watermark + 1 once it moves, and those offsets before
    the start are skipped.

    With a stop position, no offset past it is delivered, even when compaction or
    retention removed the stop offset itself; and a read whose range is all committed
    but stays silent for ``rpc_timeout``, then on a fresh read after the last offset
    for ``rpc_timeout`` again, ends (v1.9.0 serves nothing, not even old offsets, once
    retention deleted every message).

    Not thread-safe for iteration: one thread reads at a time (a read that finds
    another one waiting raises :class:`~liftbridge_sync.errors.WrongThreadError`);
    close() may be called from any thread.
    """

    close_accepts_timeout = False

    def __init__(self, core: ClientCore, target: SubscriptionTarget) -> None:
        self._core = core
        self._target = target
        #: The call, opened and reopened, and the state of the read shared with...
        self._conn = PartitionConnection(core, target)
        #: ...what a failed or silent read means...
        self._failures = ReadFailures(self._conn)
        #: ...and what of each batch a forward read may deliver (weakly bound to the
        #: last delivered message, for its log lines: no cycle back to this object).
        self._screen = BatchScreen(self._conn, weakref.WeakMethod(self._delivered_pb)).screen
        #: The last offset a forward read may deliver (``None``: no stop offset).
        self._stop_offset = target.stop_offset
        #: Wire messages read in bulk (h2 transport) and the index of the next one; the
        #: iterating thread's only, except close(), which empties it.
        self._buf: list[api_pb2.Message] = []
        self._pos = 0
        #: The last message delivered from the buffer a read replaced (for the
        #: out-of-order log line).
        self._last_pb: api_pb2.Message | None = None
        #: Held by the thread whose read waits on the call (see :meth:`_read`).
        self._reading = threading.Lock()

    def open(self, *, empty: bool, deadline: float | None = None) -> None:
        """Connect for the first time (``empty``: there is nothing to read at all), by
        ``deadline`` (a ``time.monotonic()``; ``None``: under the retry policy only).

        Raises:
            ClientClosedError: if closed while opening.
            DeadlineExceededError: not open by ``deadline``.
        """
        if empty:
            self._conn.done = self._conn.nothing_left = True
            return
        try:
            self._conn.connect_first(deadline)
        except StopIteration:
            pass  # nothing to read: an empty, finished subscription
        except Closed:
            raise ClientClosedError("subscription closed while opening") from None
        except ReadTimeout:
            target = self._target
            raise DeadlineExceededError(
                f"subscribe {target.stream}/{target.partition}: not open by its deadline"
            ) from None

    # ------------------------------------------------------------------ public API

    @property
    def stream(self) -> str:
        """The stream name."""
        return self._target.stream

    @property
    def partition(self) -> int:
        """The partition id."""
        return self._target.partition

    @property
    def last_offset(self) -> int | None:
        """Offset of the last delivered message, ``None`` before the first one."""
        return self._conn.last_offset

    def read_positions(self) -> list[tuple[str, int, int | None, str]]:
        """``[(stream, partition, last_offset, "subscription")]`` while open (for stats).

        Raises:
            ForkedClientError: in a process forked after the subscription was opened
                (the positions are the parent's reads).
        """
        self._core.refuse_if_forked(f"the subscription to {self._target.stream!r}")
        if self.closed:
            return []
        return [(self.stream, self.partition, self._conn.last_offset, "subscription")]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn.closed.is_set()

    @property
    def exhausted(self) -> bool:
        """Whether the iteration ended because nothing more is there for it: the stop
        position reached (by the server, or by the client before the first message past
        it, also when compaction or retention removed the stop offset), a read-only
        partition read to its end, a range with nothing in it. ``False`` when it ended
        otherwise, e.g. by :meth:`close`, or because the server closed the stream (a
        consumer-group member with a newer epoch took the partition)."""
        return self._conn.nothing_left

    def stats(self) -> SubscriptionStats:
        """Resubscribes and out-of-order messages refused so far (see SubscriptionStats)."""
        return SubscriptionStats(
            resubscribes=self._conn.resubscribes,
            out_of_order=self._conn.out_of_order,
            misaddressed=self._conn.misaddressed,
        )

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Message:
        buf = self._buf
        i = self._pos
        if i >= len(buf) or self._core.forked:
            # Nothing read in bulk at hand (or a forked child, which must not hand out
            # what the parent delivers too: _fill refuses it).
            self._fill(None)
            buf = self._buf
            i = self._pos
            if i >= len(buf):
                raise StopIteration  # close() from another thread emptied it meanwhile
        pb = buf[i]
        msg = _new_message(Message)  # Message.from_proto without its call frame
        _set_message_pb(msg, pb)
        # Delivered only now, by stores alone: a Ctrl-C is raised at a call, so one that
        # comes before this leaves the message at hand for the next read.
        self._pos = i + 1
        self._conn.last_offset = pb.offset
        return msg

    def get(self, timeout: float | None = None) -> Message:
        """The next message, waiting at most ``timeout`` seconds (``None``: forever).

        Raises:
            TimeoutError: if no message arrived in time; the subscription stays usable
                and the next read continues after the last delivered offset.
            StopIteration: if the subscription has ended or was closed.
            StreamDeletedError, PartitionPausedError, PermissionDeniedError: terminal
                conditions reported by the server.
            ServerError: any other terminal failure, e.g. a message larger than the
                ``max_receive_message_size`` option.
        """
        return self._take(1, timeout, _from_proto)[0]

    def get_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """The next messages, at least one and at most ``max_messages``.

        Waits at most ``timeout`` seconds (``None``: forever) for the first message, as
        :meth:`get` does, then adds those already received, without waiting for more: a
        consumer that handles messages in batches pays one call per batch. (Over the
        ``"grpc"`` subscribe transport, which reads one message at a time, that is the
        first message alone.)

        Raises:
            ArgumentTypeError, ConfigurationError: ``max_messages`` is not an int >= 1.
            TimeoutError: if no message arrived in time; the subscription stays usable
                and the next read continues after the last delivered offset.
            StopIteration: if the subscription has ended or was closed.
            StreamDeletedError, PartitionPausedError, PermissionDeniedError: terminal
                conditions reported by the server.
        """
        return self._take(max_messages, timeout, _from_proto)

    def _get_many_wire(
        self, max_messages: int, timeout: float | None = None
    ) -> list[api_pb2.Message]:
        """:meth:`get_many` as the wire's protobuf messages, without a :class:`Message`
        view each: for the library's own bulk readers (the Spark source builds Arrow
        columns from them, where a view per row cost about a third of a microsecond).

        Raises:
            As :meth:`get_many`.
        """
        return self._take(max_messages, timeout, _wire)

    def _take(
        self, max_messages: int, timeout: float | None, view: Callable[[api_pb2.Message], _V]
    ) -> list[_V]:
        """The next message (waiting as :meth:`get`) and up to ``max_messages - 1`` of
        those already received after it, each as ``view`` makes it: all delivered once
        made (none if a Ctrl-C comes while they are)."""
        most = check_int("max_messages", max_messages, minimum=1)
        seconds = check_timeout("timeout", timeout)
        if self._pos >= len(self._buf) or self._core.forked:
            self._fill(seconds)
        buf = self._buf
        i = self._pos
        taken = buf[i : i + most]
        if not taken:
            raise StopIteration  # close() from another thread emptied it meanwhile
        views = list(map(view, taken))
        self._pos = i + len(taken)  # delivered by stores alone, as in __next__
        self._conn.last_offset = taken[-1].offset
        return views

    def checkpoint(self, cursor_id: str) -> int | None:
        """Store the last delivered offset under ``cursor_id`` (the Go client's semantics).

        Resume later with ``start=StartAt.cursor(cursor_id)``.

        Returns:
            The stored offset, or ``None`` when nothing was delivered yet (nothing stored).

        Raises:
            ArgumentTypeError, ConfigurationError: a bad ``cursor_id`` (checked even
                when nothing is stored).
        """
        check_id("cursor_id", cursor_id)
        offset = self._conn.last_offset
        if offset is None:
            return None
        cursors.set_cursor(
            self._core, cursor_id, self._target.stream, self._target.partition, offset
        )
        return offset

    def close(self) -> None:
        """End the subscription; a blocked read ends with ``StopIteration``, also one
        asking for metadata on its way to resubscribe (the look-up is cancelled).
        Idempotent.

        In a forked child the call is only dropped: cancelling it would shut down the
        socket the parent still reads from.
        """
        self._conn.close()
        self._buf = []  # messages read but not delivered are dropped

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "ended" if self._conn.done else "open"
        return (
            f"<Subscription {self._target.stream}/{self._target.partition} "
            f"last_offset={self._conn.last_offset} {state}>"
        )

    # ------------------------------------------------------------------ reading

    def _fill(self, timeout: float | None) -> None:
        """Read until a message is at hand to deliver (``self._buf[self._pos]``).

        Raises:
            As :meth:`get`; ForkedClientError in a forked child.
        """
        # First: in a forked child, a parent's thread may have held the lock at fork.
        self._core.refuse_if_forked(f"the subscription to {self._target.stream!r}")
        # Two threads reading at once swapped each other's buffers and calls: messages
        # were lost without a word. A read that finds another under way says so.
        if not self._reading.acquire(blocking=False):
            raise WrongThreadError(
                f"the subscription to {self._target.stream!r} partition "
                f"{self._target.partition} is being read by another thread: a "
                "Subscription is read by one thread at a time (subscribe_stream or a "
                "consumer spreads partitions over threads)"
            )
        try:
            self._fill_alone(timeout)
        finally:
            self._reading.release()

    def _fill_alone(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        was_done = self._conn.done
        while True:
            call = self._conn.call
            if call is None:
                call = self._conn.reconnect(deadline)
            timer: TimerHandle | None = None
            idle: TimerHandle | None = None
            batched = self._conn.batched
            # A batched read's silence is a deadline of its own: past it the read has
            # taken what the socket held, where a timer cancelling the call would have
            # closed the socket on it (see ReadFailures.idle_deadline).
            idle_at = None
            if batched and self._stop_offset is not None:
                idle_at = self._failures.idle_deadline()
            try:
                if deadline is not None and not batched:
                    # grpcio's reads take no deadline: the timer cancels the call, and
                    # the next read resubscribes.
                    timer = self._conn.arm(deadline - time.monotonic(), call)
                if self._stop_offset is not None and not batched:
                    idle = self._failures.arm_idle(call)
            except Closed:
                if timer is not None:
                    timer.cancel()
                raise StopIteration from None
            try:
                if batched:
                    # The call stays open past the deadline: the next read goes on.
                    idle_first = idle_at is not None and (deadline is None or idle_at < deadline)
                    try:
                        batch = call.read_batch(idle_at if idle_first else deadline)
                    except TimeoutError:
                        if not idle_first:
                            raise
                        self._failures.on_silence(call, deadline)
                        continue  # resubscribe: a fresh server reader
                    if self._conn.closed.is_set():
                        raise StopIteration
                    batch = self._screen(call, batch)
                else:
                    batch = [next(call)]
                    if not self._target.reverse:
                        batch = self._screen(call, batch)
                if not batch:
                    continue
                pb = batch[0]
                if 0 < self._pos <= len(self._buf):
                    self._last_pb = self._buf[self._pos - 1]
                # At hand from here: a Ctrl-C before delivery leaves the batch for the
                # next read (see __next__).
                self._buf = batch
                self._pos = 0
            except StopIteration:
                # The server closed the stream with OK: it will send nothing more.
                self._conn.finish(call)
                raise
            except TimeoutError:
                if self._conn.closed.is_set():
                    raise StopIteration from None
                raise WaitTimeoutError("no message arrived within the timeout") from None
            except LiftbridgeError as exc:
                self._failures.on_broken(call, exc, timer, idle, deadline)
                continue
            except BaseException:
                # A Ctrl-C (or another exception raised at any call): what the call had
                # read may be lost half-way, taken off the socket and not yet at hand.
                self._abandon(call, was_done)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
                if idle is not None:
                    idle.cancel()
                if self._stop_offset is not None:
                    self._failures.end_read()
            self._failures.heard()
            self._conn.lost = 0
            offset = pb.offset
            last = self._conn.last_offset
            if self._target.reverse and last is not None and offset > last:
                self._buf = []
                self._conn.finish(call)
                raise UnsupportedError(
                    "the server does not support reverse subscriptions: it delivered offset "
                    f"{offset} after {last} (servers up to v1.9.0 ignore 'reverse')"
                )
            return

    def _abandon(self, call: SubscribeCall, was_done: bool) -> None:
        """Drop ``call``, interrupted by an exception raised at any call (a Ctrl-C):
        the next read resubscribes after the last delivered offset, which nothing
        delivered since. A read that this one had found at its end (the stop reached)
        is read again up to it: what was past the last delivered offset may be what
        the interruption lost."""
        self._conn.forget(call)
        try:
            call.cancel()
        except Exception as exc:  # noqa: BLE001 - the interrupted call is dropped either way
            # grpcio's own state can be left broken by an exception raised inside it.
            _log.debug("cancelling an interrupted subscribe call failed: %r", exc)
        self._conn.stale = True
        if not was_done and not self._conn.closed.is_set():
            self._conn.done = self._conn.nothing_left = False

    def _delivered_pb(self) -> api_pb2.Message | None:
        """The last delivered wire message, if still at hand."""
        buf, i = self._buf, self._pos
        if 0 < i <= len(buf) and buf[i - 1].offset == self._conn.last_offset:
            return buf[i - 1]
        pb = self._last_pb
        return pb if pb is not None and pb.offset == self._conn.last_offset else None
