"""Between a consumer's partition readers and its iterating thread.

A :class:`PartitionReader` is one assigned partition being read; the :class:`Mailbox`
is the bounded queue its messages wait in until the consumer's iterator takes them, and
drops those of a partition taken away in the meantime.

The mailbox is thread-safe; a reader's fields are guarded by the consumer's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time
import types

from liftbridge_sync._runtime.doorbell import Doorbell
from liftbridge_sync.errors import WaitTimeoutError
from liftbridge_sync.models import Message
from liftbridge_sync.subscription.partition import Subscription

__all__ = ["Mailbox", "PartitionReader"]


@dataclasses.dataclass(eq=False)
class PartitionReader:
    """One assigned partition being read. Mutable; guarded by the consumer's lock."""

    stream: str
    partition: int
    epoch: int
    thread: threading.Thread | None = None
    sub: Subscription | None = None
    stopped: bool = False
    failed: bool = False
    #: Its partition stopped being this member's (taken away, or this member dropped by
    #: the server): what it delivered never counts as processed any more, even if the
    #: partition comes back before the next read (its new owner may have moved the
    #: cursor on meanwhile).
    released: bool = False
    #: The last offset the failed reader of the partition before this one queued (its
    #: queued messages are this one's now): this one reads on after it (``None``: from
    #: the cursor, or the start position).
    resume_after: int | None = None
    #: Where the start position at the partition's end (new-only, latest) put this
    #: assignment's first offset, looked up once, before the first reader of the
    #: assignment did anything else: the readers restarted after a failure start there
    #: too when the partition has no cursor (``None``: not looked up yet, or another
    #: start position).
    pinned: int | None = None


class Mailbox:
    """Bounded FIFO of (reader, message) between reader threads and the iterator.

    The iterator (often the main thread) waits on a :class:`Doorbell`, in slices and
    without the lock, not on a ``Condition``: a Ctrl-C the kernel gives a reader thread
    interrupts it within :data:`WAIT_SLICE`, and a second one cannot leave the lock
    released under a reader (see :mod:`liftbridge_sync._runtime.doorbell`).

    Thread-safe.
    """

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        #: Waited on by the readers (never the main thread) for room.
        self._cond = threading.Condition(self._lock)
        #: Rung when a message, a failure, a stopped reader or the close comes.
        self._arrived = Doorbell()
        self._items: collections.deque[tuple[PartitionReader, Message]] = collections.deque()
        self._capacity = capacity
        self._closed = False
        self._error: BaseException | None = None
        #: ``_error``'s traceback as it failed: each ``get`` raises it from there, so that
        #: the traceback does not gain a ``get``'s frames at every call.
        self._error_traceback: types.TracebackType | None = None

    def put(self, reader: PartitionReader, msg: Message) -> bool:
        """Queue ``msg``; ``False`` once the reader was stopped or the mailbox closed."""
        with self._cond:
            while len(self._items) >= self._capacity and not (self._closed or reader.stopped):
                self._cond.wait(0.5)
            if self._closed or reader.stopped:
                return False
            self._items.append((reader, msg))
            self._arrived.ring()
            return True

    def fail(self, error: BaseException) -> None:
        """Make every later :meth:`get` raise ``error`` (once the queue is empty)."""
        with self._cond:
            if self._error is None:
                self._error = error
                self._error_traceback = error.__traceback__
            self._arrived.ring()

    def hand_over(self, old: PartitionReader, new: PartitionReader) -> None:
        """``old``'s queued messages are ``new``'s from now (a failed reader restarted
        where it stopped: they go out, and count, as the new reader's)."""
        with self._cond:
            self._items = collections.deque(
                (new if reader is old else reader, msg) for reader, msg in self._items
            )

    def wake(self) -> None:
        """Wake blocked calls to re-check their reader (one was stopped)."""
        with self._cond:
            self._cond.notify_all()
            self._arrived.ring()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (read without the lock)."""
        return self._closed

    def peek(self, most: int, timeout: float | None) -> list[tuple[PartitionReader, Message]]:
        """The next messages of partitions still assigned, with the readers they came
        from, left queued until :meth:`drop`: after waiting for the first, up to
        ``most`` of those already queued.

        Nothing is taken off the queue before the iterator holds it: a Ctrl-C (raised
        at whatever call the iterator makes) between taking a message and handing it
        out lost it, and the commits then went past it. The iterator keeps what it was
        given, then drops it.

        Raises:
            WaitTimeoutError: nothing arrived within ``timeout``.
            StopIteration: once closed.
            LiftbridgeError: the failure given to :meth:`fail`, once nothing is queued.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = self._arrived.wait(self._cond, functools.partial(self._front, most), deadline)
        if taken is None:
            raise WaitTimeoutError("no message arrived within the timeout")
        return taken

    def _front(self, most: int) -> list[tuple[PartitionReader, Message]] | None:
        """Up to ``most`` queued messages of partitions still assigned (lock held;
        those of stopped readers at the front are dropped); the failure, or
        ``StopIteration`` once closed, when none is queued."""
        items = self._items
        while items and items[0][0].stopped:
            items.popleft()
            self._cond.notify_all()
        if items:
            if most == 1:
                return [items[0]]
            taken: list[tuple[PartitionReader, Message]] = []
            for item in items:
                if len(taken) == most:
                    break
                if not item[0].stopped:
                    taken.append(item)
            return taken
        if self._error is not None:
            raise self._error.with_traceback(self._error_traceback)
        if self._closed:
            raise StopIteration
        return None

    def drop(self, taken: list[tuple[PartitionReader, Message]]) -> None:
        """Take ``taken`` (what :meth:`peek` gave) off the queue, as much of it as is
        still there (a drop interrupted half-way is done again), with the messages of
        stopped readers queued among them."""
        with self._cond:
            items = self._items
            dropped = False
            for _, msg in taken:  # in queue order
                while items and items[0][1] is not msg and items[0][0].stopped:
                    items.popleft()
                    dropped = True
                if items and items[0][1] is msg:
                    items.popleft()
                    dropped = True
            if dropped:
                self._cond.notify_all()  # room for the readers blocked in put()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()
            self._arrived.ring()
