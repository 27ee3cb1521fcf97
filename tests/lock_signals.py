"""The contract of a blocking lock acquire towards signals, shared by the suites of the
types that own a lock (``PendingCore``, ``OutboundQueue``: C and twin alike).

As ``threading.Lock``'s acquire: while the main thread waits for a lock another thread
holds, a signal's Python handler runs, and an exception it raises (KeyboardInterrupt and
the like) ends the wait, the lock not taken.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

#: The ways a caller blocks on such a lock.
BLOCKING_TAKES: list[Any] = [
    pytest.param(lambda lock: lock.acquire(), id="acquire()"),
    pytest.param(lambda lock: lock.acquire(True), id="acquire(True)"),
    pytest.param(lambda lock: lock.acquire(blocking=True), id="acquire(blocking=True)"),
    pytest.param(lambda lock: lock.__enter__(), id="with"),
]

#: How long the holder keeps the lock (signalling) before it gives up on the waiter.
_GIVE_UP = 5.0


class Interrupted(Exception):
    """What the test's signal handler raises."""


def assert_a_signal_ends_a_blocked_take(lock: Any, take: Callable[[Any], object]) -> None:
    """``take(lock)``, in the main thread, blocks on ``lock`` held by another thread; that
    thread signals the main one (SIGUSR1) until the handler's exception has ended the
    wait, and keeps the lock throughout. Fails if the wait went on until the holder gave
    up and let the lock go."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("signal handlers run in the main thread only")
    main = threading.main_thread().ident
    assert main is not None
    armed = threading.Event()  # the main thread is about to block
    held = threading.Event()
    done = threading.Event()  # the main thread's take has ended
    gave_up: list[bool] = []

    def handler(signum: int, frame: object) -> None:
        if armed.is_set():
            raise Interrupted

    def hold() -> None:
        lock.acquire()
        held.set()
        try:
            armed.wait(30)
            deadline = time.monotonic() + _GIVE_UP
            # Again and again: a signal may land before the main thread blocks.
            while not done.wait(0.02):
                if time.monotonic() > deadline:
                    gave_up.append(True)
                    break
                signal.pthread_kill(main, signal.SIGUSR1)
        finally:
            lock.release()

    previous = signal.signal(signal.SIGUSR1, handler)
    holder = threading.Thread(target=hold, name="test-lock-holder")
    holder.start()
    try:
        assert held.wait(30)
        armed.set()
        with pytest.raises(Interrupted):
            take(lock)
    finally:
        armed.clear()
        done.set()
        holder.join(30)
        signal.signal(signal.SIGUSR1, previous)
    assert not holder.is_alive()
    assert gave_up == [], "the blocked take ignored the signal until the lock was let go"
    assert lock.acquire(False) is True  # not left held by the interrupted take
    lock.release()
