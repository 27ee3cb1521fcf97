"""Process-level hooks: fork detection and closing live clients at exit.

gRPC channels and our threads cannot cross ``fork()``. Each client records the pid that
created it; the at-fork hook below only marks live clients as forked and gives them
fresh locks (a parent thread may have held the old ones at fork time). It never touches
gRPC objects. Registered once, at import, because at-fork hooks cannot be removed.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Protocol

__all__ = ["ForkAware", "track"]


class ForkAware(Protocol):
    """What the hooks need from a client."""

    def _after_fork_in_child(self) -> None: ...

    def _close_at_exit(self) -> None: ...


_LIVE: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(obj: ForkAware) -> None:
    """Register ``obj`` for the fork and exit hooks (held weakly)."""
    _LIVE.add(obj)


def _after_fork_in_child() -> None:
    for obj in list(_LIVE):
        obj._after_fork_in_child()


def _close_all_at_exit() -> None:
    for obj in list(_LIVE):
        obj._close_at_exit()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)
