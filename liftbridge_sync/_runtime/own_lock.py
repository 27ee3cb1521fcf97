"""A lock of one's own with ``threading.Lock``'s methods, for the C types' Python twins.

The C types ``PendingCore`` and ``OutboundQueue`` each hold a lock and expose it as
``acquire(blocking=True)``, ``release()``, ``locked()`` and a context manager, all from
one implementation (``_speedups_lock.c``). Their pure-Python twins
(:class:`~liftbridge_sync._publishing.pending_core.PyPendingCore`,
:class:`~liftbridge_sync._transport.h2.outbound_queue.PyOutboundQueue`) get the same
methods here, so the two languages each write them once.
"""

from __future__ import annotations

import threading

__all__ = ["OwnLock"]


class OwnLock:
    """``threading.Lock``'s methods over a lock this object owns.

    Thread-safe: a ``threading.Lock``.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True) -> bool:
        return self._lock.acquire(blocking)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
