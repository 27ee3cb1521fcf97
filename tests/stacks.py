"""Where another thread is: a test waits for a thread to block in a given call before it
acts (no sleeps as synchronisation)."""

from __future__ import annotations

import sys
import threading

__all__ = ["thread_in"]


def thread_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` runs inside ``function`` now (any frame of its stack)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False
