"""Waiting for other threads to change a shared state, in slices and without its lock.

An iterating thread (often the main one) waits for what its reader threads queue.
``Condition.wait()`` without a timeout has two flaws there:

* It sleeps on a lock until notified. The kernel delivers a process's SIGINT (Ctrl-C) to
  any of its threads, and one delivered to a reader or timer thread does not wake the
  main thread's sleep: Python runs the handler, and ``KeyboardInterrupt`` comes, only
  once a message does, maybe never.
* A handler that raises while the wait takes the condition's lock back (a second Ctrl-C,
  the lock held by a reader that moment) ends the wait without the lock, and the ``with``
  block around it then releases a lock it does not hold: ``RuntimeError: release
  unlocked lock``, or the reader's hold released for it and the reader's own release
  failing.

A :class:`Doorbell` waiter sleeps on a lock of its own, not holding the owner's lock, for
at most :data:`WAIT_SLICE` seconds at a time before it looks again; whoever changes the
state under the owner's lock rings it. Nothing an exception from a signal handler
interrupts is left half done but that lock of the waiter's, dropped at the next ring.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

__all__ = ["WAIT_SLICE", "Doorbell", "join_sliced", "wait_event", "wait_sliced"]

_T = TypeVar("_T")

#: Longest single sleep of a waiter, seconds: Python runs a signal handler the kernel
#: gave another thread at the end of it at the latest.
WAIT_SLICE = 0.5


class Doorbell:
    """Wakes the threads waiting for a shared state to change.

    A waiting thread calls :meth:`wait` (which looks under the owner's lock, and
    sleeps without it: :meth:`listen`, :meth:`sleep`, :meth:`forget`); a thread that
    changed the state calls :meth:`ring` under that lock. A ring between a look and the
    sleep is not lost: the bell it released stays open.

    Thread-safe under the owner's lock (:meth:`wait` and :meth:`sleep` without it).
    """

    __slots__ = ("_bells",)

    def __init__(self) -> None:
        #: One held lock per waiter, released by a ring (guarded by the owner's lock).
        self._bells: list[threading.Lock] = []

    def listen(self) -> threading.Lock:
        """A bell the next :meth:`ring` opens, for :meth:`sleep` (owner's lock held)."""
        bell = threading.Lock()
        bell.acquire()
        self._bells.append(bell)
        return bell

    def ring(self) -> None:
        """Wake every waiter (owner's lock held). Cheap when nobody waits."""
        bells = self._bells
        if bells:
            # Taken out first: a bell is released once, even if a signal handler's
            # exception cuts this loop short (a waiter left out wakes at its slice's end).
            self._bells = []
            for bell in bells:
                bell.release()

    def sleep(self, bell: threading.Lock, seconds: float) -> None:
        """Sleep until ``bell`` rings or ``min(seconds, WAIT_SLICE)`` passed (owner's
        lock not held); then :meth:`forget` it under the lock."""
        bell.acquire(True, max(0.0, min(seconds, WAIT_SLICE)))

    def forget(self, bell: threading.Lock) -> None:
        """Drop ``bell`` of an ended sleep, in case it did not ring (owner's lock held)."""
        try:
            self._bells.remove(bell)
        except ValueError:
            pass  # rung meanwhile

    def wait(
        self,
        lock: AbstractContextManager[Any],
        take: Callable[[], _T],
        deadline: float | None = None,
        between: Callable[[], None] | None = None,
    ) -> _T | None:
        """Call ``take`` with ``lock`` (the owner's) held until it returns something
        other than ``None``, and return that; between two tries, sleep without the lock
        until a :meth:`ring` or for :data:`WAIT_SLICE` at most, then call ``between``
        (e.g. to raise for a signal), if given.

        Returns:
            What ``take`` returned, or ``None`` once ``deadline`` (a
            ``time.monotonic()``) has passed with ``take`` still returning ``None``.
            What ``take`` raises ends the wait.
        """
        bell: threading.Lock | None = None
        while True:
            with lock:
                if bell is not None:
                    self.forget(bell)
                got = take()
                if got is not None:
                    return got
                left = WAIT_SLICE
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                bell = self.listen()
            self.sleep(bell, left)
            if between is not None:
                between()


def wait_sliced(wait: Callable[[float], bool], seconds: float | None) -> bool:
    """Wait up to ``seconds`` (``None``: no limit) for what ``wait`` waits for, in calls
    ``wait(step)`` of at most :data:`WAIT_SLICE` seconds each.

    A signal the kernel gave another thread, or the main thread just before it went to
    sleep, does not cut a sleep short: Python runs its handler (``KeyboardInterrupt``)
    in the main thread only once the sleep ends. In slices it comes within one, not at
    the timeout. The package's sliced waits share this one loop.

    Args:
        wait: Waits at most the seconds it is given and returns whether what it waits
            for happened (e.g. ``event.wait``). Called at least once, with ``0.0`` if
            ``seconds`` is not positive.
        seconds: Seconds to wait in all; ``None``: until ``wait`` returns true.

    Returns:
        Whether ``wait`` returned true within ``seconds``.

    Thread-safe if ``wait`` is.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        left = WAIT_SLICE if deadline is None else deadline - time.monotonic()
        if wait(max(0.0, min(left, WAIT_SLICE))):
            return True
        if deadline is not None and left <= WAIT_SLICE:
            return False  # that was the last slice: the rest of the time


def wait_event(event: threading.Event, seconds: float | None) -> bool:
    """``event.wait(seconds)`` (``None``: no limit) in sleeps of at most
    :data:`WAIT_SLICE` (:func:`wait_sliced`), so that a signal the kernel gave another
    thread is handled in the waiting main thread within one. Thread-safe."""
    return wait_sliced(event.wait, seconds)


def join_sliced(thread: threading.Thread, seconds: float | None) -> bool:
    """``thread.join(seconds)`` (``None``: no limit) in sleeps of at most
    :data:`WAIT_SLICE` (:func:`wait_sliced`); whether ``thread`` is no longer alive (a
    thread never started counts as ended, as :meth:`~threading.Thread.is_alive` says).
    Thread-safe."""

    def ended(step: float) -> bool:
        if thread.is_alive():
            thread.join(step)
        return not thread.is_alive()

    return wait_sliced(ended, seconds)
