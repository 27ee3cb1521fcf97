"""Where another thread is: a test waits for a thread to block in a given call before it
acts (no sleeps as synchronisation)."""

from __future__ import annotations

import gc
import sys
import threading
from types import FrameType

__all__ = ["frame_of", "stack_of", "thread_in"]

_COLLECTOR_OFF = threading.Lock()


def frame_of(ident: int | None) -> FrameType | None:
    """The innermost frame of the thread ``ident`` now (``None``: not running).

    With the collector off: CPython 3.11 collects inside ``sys._current_frames()``,
    under the runtime's lock of thread states, and a finalizer that needs that lock then
    deadlocks the whole process with the GIL held (CPython gh-106883, fixed in 3.12;
    seen hanging a suite on 3.11.7, past pytest-timeout, which could not run either).
    """
    with _COLLECTOR_OFF:  # two callers at once must not leave it off for good
        enabled = gc.isenabled()
        gc.disable()
        try:
            frames = sys._current_frames()
        finally:
            if enabled:
                gc.enable()
    return frames.get(-1 if ident is None else ident)


def thread_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` runs inside ``function`` now (any frame of its stack)."""
    frame = frame_of(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def stack_of(thread: threading.Thread) -> str:
    """Where ``thread`` is now, outermost call first (``"not running"`` if it is not),
    for the message of a wait that timed out: it tells a thread stuck in a call from one
    that had not got there yet."""
    frame = frame_of(thread.ident)
    calls = []
    while frame is not None:
        calls.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " > ".join(reversed(calls)) or "not running"
