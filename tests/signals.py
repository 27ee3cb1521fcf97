"""Signals against blocking waits: the harness the tests of "a Ctrl-C ends the wait" share.

The kernel hands a process's SIGINT to any of its threads, and Python runs the handler
in the main thread only once that thread runs bytecode again: a main thread asleep on a
lock without a bound handles a Ctrl-C given to another thread only when it is woken. The
tests here block the main thread in a call, send SIGUSR1 (whose handler raises
:class:`Interrupted`, as Ctrl-C's raises ``KeyboardInterrupt``) to another thread, and
measure how long the call took to end.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from tests.waiting import wait_until

__all__ = [
    "GIVE_UP",
    "Interrupted",
    "raising_sigusr1",
    "second_signal_while_locked",
    "signal_another_thread",
    "thread_state",
]

#: How long a test lets a wait ignore its signal before it ends the wait another way.
GIVE_UP = WAIT_SLICE + 5.0


class Interrupted(Exception):
    """What the tests' SIGUSR1 handler raises (as Ctrl-C's raises KeyboardInterrupt)."""


def thread_state(native_id: int | None) -> str:
    """A thread's scheduler state from /proc (``S``: asleep in the kernel)."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _main_asleep() -> bool:
    return thread_state(threading.main_thread().native_id) == "S"


@contextlib.contextmanager
def raising_sigusr1() -> Iterator[threading.Event]:
    """SIGUSR1 raises :class:`Interrupted` in the main thread until the event yielded is
    set (and until the block ends). Skips the test off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    quiet = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        if not quiet.is_set():
            raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield quiet
    finally:
        quiet.set()
        signal.signal(signal.SIGUSR1, previous)


def _interrupted(
    call: Callable[[], object], started: threading.Event, ended: threading.Event
) -> None:
    """Run ``call`` on the main thread, with ``started`` set before and ``ended`` after
    it (the other thread acts between them); it must end with :class:`Interrupted`."""
    with pytest.raises(Interrupted):
        started.set()
        try:
            call()
        finally:
            ended.set()


def signal_another_thread(
    call: Callable[[], object],
    *,
    unblock: Callable[[], None],
    what: str,
    ready: Callable[[], bool] = lambda: True,
) -> float:
    """Run ``call`` on the main thread; once ``ready()`` and the main thread is asleep,
    another thread sends SIGUSR1 to itself. Asserts ``call`` ended with the handler's
    :class:`Interrupted`, not by ``unblock()`` (called, and the test failed, if it did
    not end within :data:`GIVE_UP` of the signal).

    Returns:
        Seconds from the start of ``call`` to its end.
    """
    started_call = threading.Event()
    ended = threading.Event()
    gave_up: list[bool] = []

    def other() -> None:
        started_call.wait(30)
        wait_until(lambda: ready() and _main_asleep(), what=f"the main thread to block in {what}")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this thread
        if not ended.wait(GIVE_UP):
            gave_up.append(True)
            unblock()  # ends the wait the signal did not

    thread = threading.Thread(target=other, name="test-signal-target")
    thread.start()
    started = time.monotonic()
    try:
        _interrupted(call, started_call, ended)
        took = time.monotonic() - started
    finally:
        ended.set()
        thread.join(30)
    assert gave_up == [], f"{what} went on although a signal's handler was pending"
    return took


def second_signal_while_locked(
    call: Callable[[], object],
    lock: contextlib.AbstractContextManager[Any],
    quiet: threading.Event,
    *,
    what: str,
) -> None:
    """Two Ctrl-Cs: run ``call`` on the main thread; once it sleeps, another thread takes
    ``lock`` (as a thread changing what the call waits for holds it) and sends SIGUSR1 to
    the main thread, and, if the main thread then waits for ``lock`` back, a second one.

    ``Condition.wait()`` ended by the second without the lock released a hold that was
    another thread's ("RuntimeError: release unlocked lock"). Asserts ``call`` raised
    :class:`Interrupted` and the lock-holding thread failed nowhere; whether what it
    guards is still sound is the caller's to check. ``quiet`` (:func:`raising_sigusr1`'s
    event) is set once ``call`` ended: a second signal sent as it did is then ignored."""
    main = threading.main_thread()
    native, ident = main.native_id, main.ident
    assert ident is not None
    started_call = threading.Event()
    ended = threading.Event()
    failures: list[BaseException] = []

    def holder() -> None:
        try:
            started_call.wait(30)
            wait_until(_main_asleep, what=f"the main thread to block in {what}")
            with lock:
                signal.pthread_kill(ident, signal.SIGUSR1)
                # The main thread now either waits for the lock back, or is done.
                wait_until(
                    lambda: ended.is_set() or thread_state(native) == "S",
                    what="the main thread to wait for the lock back",
                )
                if not ended.is_set():
                    signal.pthread_kill(ident, signal.SIGUSR1)
                    ended.wait(GIVE_UP)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=holder, name="test-lock-holder")
    thread.start()
    try:
        _interrupted(call, started_call, ended)
    finally:
        ended.set()
        quiet.set()
        thread.join(30)
    assert not thread.is_alive()
    assert failures == []
