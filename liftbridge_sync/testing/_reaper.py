"""Kill harness-started processes that are still alive when the interpreter exits."""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Protocol

__all__ = ["Killable", "track", "untrack"]


class Killable(Protocol):
    """Something that can SIGKILL its own process."""

    def kill(self) -> object:
        """Kill the process and wait for it."""
        ...


_live: weakref.WeakSet[Killable] = weakref.WeakSet()
_lock = threading.Lock()


def track(obj: Killable) -> None:
    """Kill ``obj`` at interpreter exit unless :func:`untrack` is called first."""
    with _lock:
        _live.add(obj)


def untrack(obj: Killable) -> None:
    """Forget ``obj`` (its process has ended)."""
    with _lock:
        _live.discard(obj)


def _kill_leftovers() -> None:
    with _lock:
        leftovers = list(_live)
    for obj in leftovers:
        obj.kill()


atexit.register(_kill_leftovers)
