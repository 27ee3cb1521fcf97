"""Process-level hooks: fork, per-process singletons, and closing live clients at exit
(those with OpenTelemetry flushed first, before the SDK's own exit hook).

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
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

__all__ = [
    "EXIT_GRACE",
    "ForkAware",
    "exit_time_left",
    "flush_first_at_exit",
    "per_process",
    "release",
    "track",
]

T = TypeVar("T")


class ForkAware(Protocol):
    """What the hooks need from a client."""

    def _after_fork_in_child(self) -> None: ...

    def _flush_at_exit(self, timeout: float) -> None: ...

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


#: Seconds the exit hooks give the live clients' pending publishes, all hooks together.
EXIT_GRACE = 5.0
#: When the first exit hook of the library ran out of :data:`EXIT_GRACE`.
_exit_deadline: float | None = None


def exit_time_left() -> float:
    """Seconds left of :data:`EXIT_GRACE`, which the first exit hook to ask starts.

    Not thread-safe, nor need it be: the exit hooks run one after another on one thread.
    """
    global _exit_deadline
    if _exit_deadline is None:
        _exit_deadline = time.monotonic() + EXIT_GRACE
    return max(0.0, _exit_deadline - time.monotonic())


def flush_first_at_exit() -> None:
    """Flush the live clients at exit before the exit hooks registered so far run.

    For a client that reports to an OpenTelemetry SDK (called when its telemetry is
    made): the SDK's providers shut down in an exit hook registered when they were made,
    usually after this module was imported, and atexit runs the last registered hook
    first. Flushed only by :func:`_close_all_at_exit`, the publishes still pending at
    exit would end their spans and metric points into a shut-down SDK, which drops
    them. Flushing closes nothing: an application's exit hook between the two still
    finds its client open. Thread-safe (atexit's own).
    """
    atexit.unregister(_flush_all_at_exit)  # once: it moves to the end of the hooks
    atexit.register(_flush_all_at_exit)


def _flush_all_at_exit() -> None:
    for obj in list(_LIVE):
        obj._flush_at_exit(exit_time_left())


def _close_all_at_exit() -> None:
    for obj in list(_LIVE):
        obj._close_at_exit()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
