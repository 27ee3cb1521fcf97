"""Whole-stream subscriptions: every partition of a stream merged into one iterator.

Merging blocking gRPC reads needs a thread per partition: each runs a
:class:`~liftbridge_sync.subscription.Subscription` and feeds a bounded mailbox that the
consumer reads (the threads and the mailbox are :mod:`.merging`'s). Order is kept within
each partition; each partition resubscribes on its own after failover.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading

from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync._runtime.scheduler import Scheduler, TimerHandle
from liftbridge_sync._transport import cursors
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.validate import (
    check_bool,
    check_id,
    check_int,
    check_name,
    check_timeout,
)
from liftbridge_sync.errors import ConfigurationError, InternalThreadError, LiftbridgeError
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt, StopAt
from liftbridge_sync.subscription.merging import (
    STREAM_BUFFER,
    STREAM_BUFFER_BYTES,
    Mailbox,
    Readers,
    pump,
    reap,
)
from liftbridge_sync.subscription.opening import check_positions, open_partition
from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.subscription.stats import SubscriptionStats

__all__ = ["STREAM_BUFFER", "STREAM_BUFFER_BYTES", "StreamSubscription", "open_stream_subscription"]

_log = logging.getLogger("liftbridge_sync.subscription")


class StreamSubscription:
    """Iterate messages of every partition of a stream, merged into one iterator.

    Order is kept within each partition; ``msg.partition`` and ``msg.offset`` say where
    each message came from. One daemon reader thread per partition
    (``liftbridge-subscribe-<stream>-<partition>``) feeds a bounded buffer; each
    partition resubscribes on its own after failover. The buffer holds at most
    :data:`STREAM_BUFFER` messages and :data:`STREAM_BUFFER_BYTES` bytes (a bigger message
    alone). The iterator finishes when every partition has ended (with a stop position,
    or read-only partitions); a terminal error in any partition is raised at iteration
    and ends the whole subscription. If a reader thread cannot be started, everything
    already started is closed and :class:`~liftbridge_sync.errors.InternalThreadError`
    is raised.

    The reader threads hold the subscription only weakly: one dropped without
    :meth:`close` is collected, and the client's ``liftbridge-timer`` thread, which
    looks every :data:`~liftbridge_sync._runtime.doorbell.WAIT_SLICE` seconds, then
    closes it with a WARNING; its readers are joined once they ended, or by
    ``Client.close()``.

    Not thread-safe for iteration; close() may be called from any thread.
    """

    close_accepts_timeout = True

    def __init__(self, core: ClientCore, stream: str, subs: list[Subscription]) -> None:
        self._core = core
        self._stream = stream
        self._subs = subs
        self._delivered: dict[int, int] = {}
        self._box = Mailbox(STREAM_BUFFER, len(subs))
        #: Taken from the mailbox and not handed out yet (a read interrupted on the way:
        #: the next one hands them out first).
        self._hand: list[Message | BaseException] = []
        self._closed = False
        #: Set when the iteration ended with every partition's read exhausted.
        self._exhausted = False
        #: This subscription, put back by __del__ when dropped without close(): the
        #: watch on the timer thread closes it (see _watch).
        self._dropped: collections.deque[StreamSubscription] = collections.deque()
        #: The watch's pending timer, replaced as it arms the next one.
        self._watch: list[TimerHandle] = []
        # Not bound methods: the readers must not hold the subscription (see _watch).
        threads = [
            threading.Thread(
                target=pump,
                args=(self._box, sub),
                name=f"liftbridge-subscribe-{stream}-{sub.partition}",
                daemon=True,
            )
            for sub in subs
        ]
        started: list[threading.Thread] = []
        self._readers = Readers(started)
        try:
            for thread in threads:
                thread.start()
                started.append(thread)
        except RuntimeError as exc:  # "can't start new thread": out of threads or memory
            # The readers already started, and every subscription, would run on unowned.
            self.close(core.options.rpc_timeout)
            raise InternalThreadError(
                f"could not start the reader of {stream!r} partition "
                f"{subs[len(started)].partition}: {exc}"
            ) from exc

    def watch_for_drop(self) -> None:
        """Have the timer thread close this subscription if it is dropped without
        :meth:`close` (see :func:`_watch`).

        Raises:
            InternalThreadError: if the timer thread could not be started (the process
                is out of threads); the subscription is closed.

        Called once, by :func:`open_stream_subscription`, before anyone else has it.
        """
        try:
            scheduler = self._core.scheduler()
            watch = functools.partial(_watch, self._dropped, self._box, scheduler, self._watch)
            self._watch.append(scheduler.call_later(WAIT_SLICE, watch))
        except RuntimeError as exc:  # "can't start new thread"
            self.close(self._core.options.rpc_timeout)
            raise InternalThreadError(
                f"could not start the liftbridge-timer thread: {exc}"
            ) from exc
        except LiftbridgeError:
            # The client was closed meanwhile (it closed this subscription), or its timer
            # thread died (subscriptions with a timeout fail then): no watch.
            pass

    @property
    def stream(self) -> str:
        """The stream name."""
        return self._stream

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partition ids being read."""
        return tuple(sub.partition for sub in self._subs)

    @property
    def last_offsets(self) -> dict[int, int]:
        """Offset of the last delivered message per partition (partitions with one)."""
        return dict(self._delivered)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (also by a terminal error, which closes it)."""
        return self._closed

    @property
    def exhausted(self) -> bool:
        """Whether the iteration ended because nothing more is there for it: every
        partition's read is exhausted (see :attr:`Subscription.exhausted`: its stop
        position reached, a read-only partition read to its end, an empty range) and
        everything read was delivered. ``False`` before that, and when it ended
        otherwise: by :meth:`close`, a terminal error, or a partition's stream the
        server ended."""
        return self._exhausted

    def read_positions(self) -> list[tuple[str, int, int | None, str]]:
        """Per partition ``(stream, partition, last delivered, kind)`` while open (stats).

        Raises:
            ForkedClientError: in a process forked after the subscription was opened
                (the positions are the parent's reads).
        """
        self._core.refuse_if_forked(f"the subscription to {self._stream!r}")
        if self._closed:
            return []
        delivered = dict(self._delivered)
        return [
            (self._stream, sub.partition, delivered.get(sub.partition), "stream_subscription")
            for sub in self._subs
        ]

    def stats(self) -> SubscriptionStats:
        """Resubscribes and out-of-order messages refused so far, summed over partitions."""
        parts = [sub.stats() for sub in self._subs]
        return SubscriptionStats(
            resubscribes=sum(p.resubscribes for p in parts),
            out_of_order=sum(p.out_of_order for p in parts),
            misaddressed=sum(p.misaddressed for p in parts),
        )

    def __iter__(self) -> StreamSubscription:
        return self

    def __next__(self) -> Message:
        return self.get(None)

    def get(self, timeout: float | None = None) -> Message:
        """The next message from any partition, waiting at most ``timeout`` seconds.

        ``None`` or ``inf`` waits as long as it takes.

        Raises:
            ConfigurationError: ``timeout`` is NaN, negative or above ~24 days.
            TimeoutError: if no message arrived in time (the subscription stays usable).
            StopIteration: if every partition has ended, or the subscription was closed.
            StreamDeletedError, PartitionPausedError, PermissionDeniedError: terminal
                conditions of any partition; the whole subscription is then closed.
            InternalThreadError: a reader thread died from an unexpected error (a bug;
                the error is the ``__cause__``, its traceback logged); closed likewise.
            ForkedClientError: in a process forked after the subscription was opened
                (its reading threads are the parent's).
        """
        seconds = check_timeout("timeout", timeout)
        self._core.refuse_if_forked(f"the subscription to {self._stream!r}")
        hand = self._at_hand(1, seconds)
        first = hand[0]
        if isinstance(first, BaseException):
            self.close()
            self._hand = []
            raise first
        self._delivered[first.partition] = first.offset
        # Handed out by stores alone from here: no call a Ctrl-C could interrupt.
        self._hand = hand[1:]
        return first

    def get_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """The next messages from any partitions, at least one and at most ``max_messages``.

        Waits at most ``timeout`` seconds (``None``: forever) for the first message, as
        :meth:`get` does, then adds those already received, without waiting for more.

        Raises:
            ArgumentTypeError, ConfigurationError: ``max_messages`` is not an int >= 1,
                or ``timeout`` is NaN, negative or above ~24 days.
            TimeoutError: if no message arrived in time (the subscription stays usable).
            StopIteration: if every partition has ended, or the subscription was closed.
            StreamDeletedError, PartitionPausedError, PermissionDeniedError: terminal
                conditions of any partition (after the messages received before them);
                the whole subscription is then closed.
            InternalThreadError: a reader thread died from an unexpected error (a bug;
                the error is the ``__cause__``, its traceback logged); closed likewise.
            ForkedClientError: in a process forked after the subscription was opened.
        """
        most = check_int("max_messages", max_messages, minimum=1)
        seconds = check_timeout("timeout", timeout)
        self._core.refuse_if_forked(f"the subscription to {self._stream!r}")
        hand = self._at_hand(most, seconds)
        first = hand[0]
        if isinstance(first, BaseException):
            self.close()
            self._hand = []
            raise first
        taken = hand[:most]
        delivered = self._delivered
        for message in taken:
            delivered[message.partition] = message.offset  # type: ignore[union-attr]
        # Handed out by stores alone from here: no call a Ctrl-C could interrupt.
        self._hand = hand[most:]
        return taken  # type: ignore[return-value]

    def _at_hand(self, most: int, seconds: float | None) -> list[Message | BaseException]:
        """What the next read hands out: what an interrupted read left at hand, or up
        to ``most`` items taken from the mailbox (see :meth:`Mailbox.peek`).

        Items are at hand before they leave the mailbox, and leave it before they are
        handed out: a Ctrl-C anywhere on the way leaves them for the next read, and the
        mailbox gives nothing twice (:meth:`Mailbox.drop` is done again).
        """
        hand = self._hand
        if not hand or self._box.closed:  # closed: the mailbox says the end
            try:
                self._hand = hand = self._box.peek(most, seconds)
            except StopIteration:
                self._ended()
                raise
        self._box.drop(hand)
        return hand

    def _ended(self) -> None:
        """Note whether the iteration, which just ended, ended by exhausting every
        partition (not by a close)."""
        if not self._closed and all(sub.exhausted for sub in self._subs):
            self._exhausted = True

    def checkpoint(self, cursor_id: str) -> dict[int, int]:
        """Store each partition's last delivered offset under ``cursor_id``.

        Returns:
            The stored offsets by partition (partitions with no delivered message are
            left untouched).

        Raises:
            ArgumentTypeError, ConfigurationError: a bad ``cursor_id`` (checked even
                when nothing is stored).
        """
        check_id("cursor_id", cursor_id)
        stored = dict(self._delivered)
        for partition, offset in stored.items():
            cursors.set_cursor(self._core, cursor_id, self._stream, partition, offset)
        return stored

    def close(self, timeout: float | None = None) -> None:
        """Stop every partition reader and join the threads. Idempotent.

        A ``timeout`` it cannot take is refused only once the subscription is closed:
        the wish to end it is clear, and a ``finally`` block calling it would otherwise
        leave every reader running. The readers are then waited for as with ``None``
        (they end at once: the close woke them).

        Args:
            timeout: Seconds to wait for the reader threads (``None`` or ``inf``: until
                they end). Readers still running then are joined once they end (the
                ``liftbridge-timer`` thread looks), or by ``Client.close()``.

        Raises:
            ArgumentTypeError: ``timeout`` is no number (the subscription is closed).
            ConfigurationError: ``timeout`` is NaN, negative or above ~24 days (the
                subscription is closed).
        """
        try:
            seconds = check_timeout("timeout", timeout)
        except ConfigurationError:
            self._close(None)
            raise
        self._close(seconds)

    def _close(self, timeout: float | None) -> None:
        """:meth:`close` with ``timeout`` checked."""
        self._closed = True
        if self._core.forked:
            return  # the readers, their locks and connections are the parent's
        for handle in self._watch:
            handle.cancel()
        for sub in self._subs:
            sub.close()
        self._box.close()
        self._readers.close(timeout)
        if self._readers.alive():
            # Returned before they ended: once this subscription is dropped, nothing
            # else holds them (the client's registry is weak), and Client.close() would
            # return with them running.
            _hand_over(self._readers, self._core)

    def __del__(self) -> None:
        # The collector may run this on any thread, one holding any lock (threading's
        # own among them): it takes none and starts no thread, it only puts this
        # subscription back where the watch on the timer thread finds it (an atomic
        # append). One closed, or never started, has nothing to end.
        attrs = self.__dict__
        if attrs.get("_watch") and not attrs.get("_closed", True) and not self._core.forked:
            self._dropped.append(self)

    def __enter__(self) -> StreamSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<StreamSubscription {self._stream} partitions={len(self._subs)} {state}>"


def _watch(
    dropped: collections.deque[StreamSubscription],
    box: Mailbox,
    scheduler: Scheduler,
    pending: list[TimerHandle],
) -> None:
    """Close the subscription its ``__del__`` put in ``dropped`` (timer thread), or look
    again in :data:`WAIT_SLICE` seconds while it is open.

    Otherwise its readers, blocked in a read, would keep their calls and threads until
    ``Client.close()``. It is closed without waiting for them (timer callbacks must be
    short): they end once their calls are cancelled, and are joined then (see
    :func:`~liftbridge_sync.subscription.merging.reap`), or by ``Client.close()``, which
    they are registered with meanwhile.
    """
    try:
        subscription = dropped.popleft()
    except IndexError:
        if box.closed:
            return
        watch = functools.partial(_watch, dropped, box, scheduler, pending)
        try:
            pending[:] = [scheduler.call_later(WAIT_SLICE, watch)]
        except LiftbridgeError:
            pass  # the client is closing: it closes the subscription
        return
    _log.warning("subscription to %r: dropped without close(): closing", subscription.stream)
    subscription.close(0)  # hands its readers over (see _hand_over)


def _hand_over(readers: Readers, core: ClientCore) -> None:
    """Have readers that a close did not wait out joined once they ended (the timer
    thread looks), or by ``Client.close()``, which they are registered with."""
    if core.closed:
        return  # the client is closing (it called this close): they end, cancelled
    try:
        # Held by the reap's timer until they ended, by the client's close() then.
        core.register(readers)
        scheduler = core.scheduler()
    except LiftbridgeError:
        return  # closed meanwhile: register() joined them (they end at once, cancelled)
    reap(readers, scheduler)


def open_stream_subscription(
    core: ClientCore,
    stream: str,
    *,
    start: StartAt | None,
    stop: StopAt | None,
    read_isr_replica: bool,
    resume: bool,
) -> StreamSubscription:
    """Open a subscription on every partition of a stream (see :meth:`Client.subscribe_stream`).

    Raises:
        ConfigurationError: on a bad argument.
        NoSuchStreamError: if the stream does not exist.
    """
    check_name("stream", stream, allow_reserved=True)
    start = check_positions(start, stop)
    start = start.pinned()  # one instant for every partition, not one each
    read_isr_replica = check_bool("read_isr_replica", read_isr_replica)
    resume = check_bool("resume", resume)
    # Asked of the server, not the cache: a stream deleted and created again under its
    # name may have more partitions than this client last saw, and they would go unread.
    count = core.stream_info_partitions(stream, refresh=True)
    subs: list[Subscription] = []
    try:
        for partition in range(count):
            subs.append(
                open_partition(
                    core,
                    stream,
                    partition,
                    start,
                    stop,
                    read_isr_replica=read_isr_replica,
                    resume=resume,
                    reverse=False,
                )
            )
    except BaseException:
        for sub in subs:
            sub.close()
        raise
    result = StreamSubscription(core, stream, subs)
    try:
        core.register(result)
        for sub in subs:  # closed by the stream subscription from now on
            core.unregister(sub)
        result.watch_for_drop()
    except BaseException:
        result.close()
        raise
    return result
