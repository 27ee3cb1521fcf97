"""What a thread blocked in the publisher sleeps on: a gate, closed until opened once.

:class:`PyGate` is the pure-Python twin of the C ``Gate`` (``_speedups_gate.c``, which
says why the C one opens with the GIL released); :data:`Gate` is whichever is active.
Each gate is waited on by one thread at a time and opened once per wait.
"""

from __future__ import annotations

import threading
from typing import Protocol

from liftbridge_sync._wire import speedups

__all__ = ["Gate", "GateLike", "PyGate"]


class GateLike(Protocol):
    """The interface of both gates."""

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until opened (True) or ``timeout`` seconds pass (False)."""

    def open(self) -> None:
        """Let the waiter (or the next thread to wait) through once."""


class PyGate:
    """A gate as a ``threading.Lock`` held while closed. Thread-safe: one waiter at a
    time, one ``open()`` per wait (a second raises ``RuntimeError``)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until opened (True) or ``timeout`` seconds pass (False)."""
        if timeout is not None and (timeout != timeout or timeout < 0):
            raise ValueError("wait: timeout must be None or >= 0")
        return self._lock.acquire(timeout=-1 if timeout is None else timeout)

    def open(self) -> None:
        """Let the waiter through; ``RuntimeError`` if already open."""
        try:
            self._lock.release()
        except RuntimeError:
            raise RuntimeError("Gate.open: already open") from None


#: The gate type in use: the C one with the speedups, else :class:`PyGate`.
Gate: type[GateLike] = speedups.Gate if speedups.Gate is not None else PyGate
