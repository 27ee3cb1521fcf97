"""Ride out the compaction cleaner: "segment has been closed" is transient.

With compaction on, the cleaner replaces the segments that a reader holds, and a v1.9.0
server fails the subscribe (or the running subscription) with "segment has been
closed" (reference/liftbridge-server.md). Trying again a bounded number of times,
after a short pause, gets past it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from liftbridge_sync import ServerError

__all__ = ["SEGMENT_PAUSE", "SEGMENT_RETRIES", "is_segment_closed", "retry_segment_closed"]

T = TypeVar("T")

#: Attempts after "segment has been closed" before the error is raised.
SEGMENT_RETRIES = 20

#: Pause between attempts, seconds: the cleaner swaps segments within milliseconds.
SEGMENT_PAUSE = 0.05


def is_segment_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's transient "segment has been closed" error."""
    return isinstance(exc, ServerError) and "segment has been closed" in str(exc)


def retry_segment_closed(call: Callable[[], T]) -> T:
    """``call()``, tried again up to :data:`SEGMENT_RETRIES` times on that error.

    Raises:
        ServerError: the error persisted, or any other error of ``call``.

    Thread-safe if ``call`` is.
    """
    for _ in range(SEGMENT_RETRIES):
        try:
            return call()
        except ServerError as exc:
            if not is_segment_closed(exc):
                raise
            time.sleep(SEGMENT_PAUSE)  # back-off between attempts, not synchronisation
    return call()
