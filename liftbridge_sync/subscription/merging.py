"""The merge under a whole-stream subscription: per-partition reader threads feeding
one bounded mailbox.

* :class:`Mailbox`: the FIFO between the ``liftbridge-subscribe-<stream>-<p>`` readers and
  the consumer, bounded in messages and bytes.
* :func:`pump`: what each reader thread runs (a partition's subscription into the box).
* :class:`Readers`: the reader threads, joined on close (and, for a subscription dropped
  without ``close()``, by :func:`reap` on the timer thread, or by ``Client.close()``).

:class:`~liftbridge_sync.subscription.stream.StreamSubscription` composes them.
Thread-safe as each class says.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time

from liftbridge_sync._runtime.doorbell import WAIT_SLICE, Doorbell, join_sliced
from liftbridge_sync._runtime.scheduler import Scheduler
from liftbridge_sync.errors import InternalThreadError, LiftbridgeError, WaitTimeoutError
from liftbridge_sync.models import Message
from liftbridge_sync.subscription.partition import Subscription

__all__ = ["STREAM_BUFFER", "STREAM_BUFFER_BYTES", "Mailbox", "Readers", "pump", "reap"]

_log = logging.getLogger("liftbridge_sync.subscription")

#: Messages buffered between the partition readers and the consumer; a full buffer
#: blocks the readers, which lets gRPC flow control slow the server down.
STREAM_BUFFER = 1024
#: Bytes (wire size) of the messages buffered likewise: messages of up to 4 MiB would
#: let 1024 of them hold 4 GiB. One message bigger than this is still taken alone.
STREAM_BUFFER_BYTES = 64 << 20


class Mailbox:
    """A FIFO between partition reader threads and the consumer, bounded in messages
    and in bytes (a message is admitted into an empty buffer whatever its size).

    The consumer (often the main thread) waits on a :class:`Doorbell`, in slices and
    without the lock, not on a ``Condition``: a Ctrl-C the kernel gives a reader thread
    interrupts it within :data:`WAIT_SLICE`, and a second one cannot leave the lock
    released under a reader (see :mod:`liftbridge_sync._runtime.doorbell`).

    Thread-safe.
    """

    def __init__(self, capacity: int, producers: int, max_bytes: int = STREAM_BUFFER_BYTES) -> None:
        self._lock = threading.Lock()
        #: Rung when an item, the end of a producer, or the close comes.
        self._not_empty = Doorbell()
        #: Waited on by the producers (reader threads, never the main one).
        self._not_full = threading.Condition(self._lock)
        #: Items with their wire size (0 for an error).
        self._items: collections.deque[tuple[Message | BaseException, int]] = collections.deque()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._producers = producers
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (read without the lock)."""
        return self._closed

    def put(self, item: Message | BaseException) -> bool:
        """Queue ``item`` (errors skip the bounds); ``False`` once closed."""
        message = isinstance(item, Message)
        size = item._pb.ByteSize() if isinstance(item, Message) else 0
        with self._not_full:
            if message:
                while not self._closed and (
                    len(self._items) >= self._capacity
                    or (self._bytes and self._bytes + size > self._max_bytes)
                ):
                    self._not_full.wait()
            if self._closed:
                return False
            self._items.append((item, size))
            self._bytes += size
            self._not_empty.ring()
            return True

    def producer_done(self) -> None:
        with self._lock:
            self._producers -= 1
            self._not_empty.ring()

    def peek(self, most: int, timeout: float | None) -> list[Message | BaseException]:
        """The items at the front, left queued until :meth:`drop`: after waiting for
        the first, up to ``most`` messages, or the error queued first alone (an error
        behind messages stays for the next call); ``StopIteration`` when closed or
        every producer ended.

        Nothing is taken off the queue before the consumer holds it: a Ctrl-C (raised
        at whatever call the consumer makes) between taking an item and handing it out
        lost it. The consumer keeps what it was given, then drops it.

        Raises:
            WaitTimeoutError: nothing arrived within ``timeout``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = self._not_empty.wait(self._lock, functools.partial(self._front, most), deadline)
        if taken is None:
            raise WaitTimeoutError("no message arrived within the timeout")
        return taken

    def _front(self, most: int) -> list[Message | BaseException] | None:
        """The front items (see :meth:`peek`; lock held), ``None`` if none is queued."""
        items = self._items
        if items:
            first = items[0][0]
            if most == 1 or not isinstance(first, Message):
                return [first]
            taken: list[Message | BaseException] = []
            for item, _ in items:
                if len(taken) == most or not isinstance(item, Message):
                    break
                taken.append(item)
            return taken
        if self._closed or self._producers <= 0:
            raise StopIteration
        return None

    def drop(self, taken: list[Message | BaseException]) -> None:
        """Take ``taken`` (what :meth:`peek` gave) off the front of the queue, as much
        of it as is still there: a drop interrupted half-way is done again."""
        with self._lock:
            items = self._items
            dropped = 0
            for item in taken:  # a prefix of the queue, in order
                if items and items[0][0] is item:
                    self._bytes -= items.popleft()[1]
                    dropped += 1
            if dropped:
                self._not_full.notify(dropped)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._items.clear()
            self._bytes = 0
            self._not_empty.ring()
            self._not_full.notify_all()


class Readers:
    """The reader threads of one whole-stream subscription, joined by :meth:`close`.

    Registered with the client by the watch that closes a dropped subscription (which
    cannot wait for them on the timer thread): ``Client.close()`` then joins them.

    Thread-safe.
    """

    close_accepts_timeout = True

    def __init__(self, threads: list[threading.Thread]) -> None:
        self._threads = threads

    def alive(self) -> bool:
        """Whether any reader is still running."""
        return any(thread.is_alive() for thread in self._threads)

    def close(self, timeout: float | None = None) -> None:
        """Join the readers, for at most ``timeout`` seconds (``None``: until they end).

        Never the calling thread itself (a reader closing its own subscription).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        for thread in self._threads:
            # In slices: a Ctrl-C the kernel gave another thread meanwhile is handled
            # within a slice, not once the reader has ended (the close woke it, its
            # metadata look-ups too; what it cannot wake, a callback's, may last).
            if thread is not current:
                join_sliced(thread, None if deadline is None else deadline - time.monotonic())


def pump(box: Mailbox, sub: Subscription) -> None:
    """A ``liftbridge-subscribe-<stream>-<partition>`` thread: ``sub`` into ``box``.

    What ends the read is handed to the consumer and raised at iteration: a
    :class:`~liftbridge_sync.errors.LiftbridgeError` as it is, anything else (a bug of
    ours) logged with its traceback and wrapped in
    :class:`~liftbridge_sync.errors.InternalThreadError`.
    """
    try:
        for msg in sub:
            if not box.put(msg):
                return
    except LiftbridgeError as exc:
        box.put(exc)
    except BaseException as exc:
        name = threading.current_thread().name
        _log.error("%s died from an unexpected error", name, exc_info=exc)
        error = InternalThreadError(f"the reader thread {name} died: {exc!r}")
        error.__cause__ = exc
        box.put(error)
    finally:
        box.producer_done()


def reap(readers: Readers, scheduler: Scheduler) -> None:
    """Join the readers of a dropped subscription once they ended (timer thread, every
    :data:`WAIT_SLICE` seconds: a timer callback must not wait for them)."""
    if not readers.alive():
        readers.close(0)
        return
    try:
        scheduler.call_later(WAIT_SLICE, functools.partial(reap, readers, scheduler))
    except LiftbridgeError:
        pass  # the client is closing: its close() joins them (registered)
