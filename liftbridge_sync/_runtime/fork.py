"""Process-level hooks: fork, per-process singletons, and closing live clients at exit.

gRPC channels and our threads cannot cross ``fork()``. The at-fork hook below gives each
live client fresh locks and a fresh core in the child (a parent thread may have held the
old locks at fork time), and the per-process registry a fresh lock; it never touches the
parent's gRPC objects. So no lock of the library is held in a child. Registered once, at import,
because at-fork hooks cannot be removed.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

__all__ = ["ForkAware", "per_process", "release", "track"]

T = TypeVar("T")


class ForkAware(Protocol):
    """What the hooks need from a client."""

    def _after_fork_in_child(self) -> None: ...

    def _close_at_exit(self) -> None: ...


_LIVE: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(obj: ForkAware) -> None:
    """Register ``obj`` for the fork and exit hooks (held weakly)."""
    _LIVE.add(obj)


_REGISTRY_LOCK = threading.Lock()
_REGISTRY: dict[tuple[int, Hashable], Any] = {}


def per_process(key: Hashable, create: Callable[[], T], *, usable: Callable[[T], bool]) -> T:
    """The one object of this process for ``key``, created by ``create`` on first use.

    A forked child never gets its parent's object: entries are keyed by pid, and those of
    other pids are dropped. An object that is no longer ``usable`` is replaced; one
    closed should be given to :func:`release`, so that the registry does not keep it
    (for a key never asked for again: options replaced after a settings change).
    Thread-safe and fork-safe.
    """
    pid = os.getpid()
    with _REGISTRY_LOCK:
        found: T | None = _REGISTRY.get((pid, key))
        if found is not None and usable(found):
            return found
        for stale in [k for k in _REGISTRY if k[0] != pid]:
            del _REGISTRY[stale]
        created = create()
        _REGISTRY[(pid, key)] = created
        return created


def release(obj: object) -> None:
    """Forget ``obj`` (closed) wherever the registry holds it, so that it can be
    collected; another object since made for its key stays. Thread-safe."""
    with _REGISTRY_LOCK:
        for key in [k for k, found in _REGISTRY.items() if found is obj]:
            del _REGISTRY[key]


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    # Another parent thread may have held the lock at fork time; it does not exist here.
    # A fresh lock is free. The registry itself is consistent: the forking thread held
    # the GIL, so no dict operation was half done, and entries of the parent's pid are
    # dropped on first use. (Taking the lock in a before-fork hook instead would let a
    # thread that calls for_process in a loop starve the forking thread.)
    _REGISTRY_LOCK = threading.Lock()
    for obj in list(_LIVE):
        obj._after_fork_in_child()


def _close_all_at_exit() -> None:
    for obj in list(_LIVE):
        obj._close_at_exit()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
