"""An HTTP/2 publish stream's outbound queue, flags and lock: a C type, or its
pure-Python twin.

:class:`PyOutboundQueue` and ``_speedups.OutboundQueue`` (``_speedups_outbound.c``) have
the same interface; :data:`OutboundQueue` is the C one when the speedups are active.
:class:`~.connection.H2PublishStream` composes one (its lock is the stream's lock), and
its :class:`~.writing.Writer` keeps the logic; the publish_async fast path in C
(``submit_plain``) queues on the C struct directly, under its lock.
"""

from __future__ import annotations

from typing import Any, Protocol

from liftbridge_sync._runtime.own_lock import OwnLock
from liftbridge_sync._wire import speedups

__all__ = ["OutboundQueue", "OutboundQueueType", "PyOutboundQueue"]


class OutboundQueueType(Protocol):
    """What both implementations offer (see ``_speedups_outbound.c``)."""

    @property
    def frames(self) -> list[bytes]: ...
    @property
    def write_here_at(self) -> int: ...

    queued_bytes: int
    taken_bytes: int
    asked: int
    signalled: bool
    done: bool
    close_requested: bool
    direct_mark: int
    combining: int
    deferred: bool

    def acquire(self, blocking: bool = True) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def take(self) -> list[bytes]: ...


class PyOutboundQueue(OwnLock):
    """A publish stream's outbound queue (the pure-Python twin of
    ``_speedups.OutboundQueue``).

    Attributes:
        frames: The framed requests queued (append under the lock).
        queued_bytes: Message bytes ever queued.
        taken_bytes: Of those, taken off the queue to be written.
        asked: Requests queued that the broker answers (ack policy LEADER or ALL).
        write_here_at: Queued bytes at which a caller writes the queue itself.
        signalled: A wake-up byte is on its way to the I/O thread.
        done: The I/O thread has finished; sends are dropped.
        close_requested: ``close()`` was asked for; sends are dropped.
        direct_mark: ``asked`` when a ``publish()`` caller last queued its own request
            (acks are not gathered until that many are read).
        combining: Callers woken by the last hand-over of acks still to queue without
            writing (see :mod:`.writing`).
        deferred: A caller queued without writing (combining): the I/O thread takes the
            queue soon.

    Thread-safe as the C type: every field is changed under the lock.
    """

    __slots__ = (
        "_frames",
        "_write_here_at",
        "queued_bytes",
        "taken_bytes",
        "asked",
        "signalled",
        "done",
        "close_requested",
        "direct_mark",
        "combining",
        "deferred",
    )

    def __init__(self, write_here_at: int) -> None:
        if type(write_here_at) is not int:
            raise TypeError("OutboundQueue: write_here_at must be int")
        if write_here_at < 0:
            raise ValueError("OutboundQueue: write_here_at >= 0")
        super().__init__()
        self._frames: list[bytes] = []
        self._write_here_at = write_here_at
        self.queued_bytes = 0
        self.taken_bytes = 0
        self.asked = 0
        self.signalled = False
        self.done = False
        self.close_requested = False
        self.direct_mark = 0
        self.combining = 0
        self.deferred = False

    @property
    def frames(self) -> list[bytes]:
        return self._frames

    @property
    def write_here_at(self) -> int:
        return self._write_here_at

    def take(self) -> list[bytes]:
        """Under the lock: the frames queued; the queue is emptied and all of it taken."""
        batch = self._frames
        if not batch:
            return []
        self._frames = []
        self.taken_bytes = self.queued_bytes
        return batch


#: The C type when the speedups are active, else the twin.
OutboundQueue: Any = speedups.OutboundQueue or PyOutboundQueue
