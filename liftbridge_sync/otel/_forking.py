"""Forking while a thread records one of the client's measurements.

The OpenTelemetry SDK's metric locks (each instrument's aggregations) are not made
anew in a forked child: one that a parent's thread held at the fork stays held there
for good, and the child's first measurement of that instrument waits for ever. A
``gunicorn --preload`` master that published once forks its workers while its
publisher thread may still be recording that publish's outcome: a worker hung on its
first publish (one test run in four on a loaded machine).

Every measurement the client records holds :func:`measuring`'s lock, and a fork takes it
first (``os.register_at_fork``), so none is half-way at the fork. A measurement takes
microseconds; a fork waits :data:`FORK_WAIT` at most, then goes on (the child gets a
lock of its own). Spans are left to the SDK's span processors (``BatchSpanProcessor``
makes its own anew in a child; a ``SimpleSpanProcessor`` exports on the ending thread,
under its exporter's locks, which a lock of the client's must not hold up), and
measurements an application records itself are its own to keep from a fork.
"""

from __future__ import annotations

import os
import threading

__all__ = ["FORK_WAIT", "measuring"]

#: The longest a fork waits for a measurement under way.
FORK_WAIT = 1.0

_lock = threading.Lock()
#: Whether the forking thread took the lock (a fork under way).
_taken_for_fork = False


def measuring() -> threading.Lock:
    """The lock to hold while recording a measurement (a new one in a forked child whose
    fork did not get it). Thread-safe."""
    return _lock


def _before_fork() -> None:
    global _taken_for_fork
    _taken_for_fork = _lock.acquire(timeout=FORK_WAIT)


def _after_fork_in_parent() -> None:
    global _taken_for_fork
    if _taken_for_fork:
        _taken_for_fork = False
        _lock.release()


def _after_fork_in_child() -> None:
    global _lock, _taken_for_fork
    if _taken_for_fork:  # the forking thread, the child's only one, holds it
        _taken_for_fork = False
        _lock.release()
    else:  # held by a parent's thread, which the child does not have
        _lock = threading.Lock()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
