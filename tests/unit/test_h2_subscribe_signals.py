"""A main thread blocked in a quiet subscription's read still sees Ctrl-C when the kernel
delivers the SIGINT to another thread (the client's timer thread, grpc's): it reads in
slices, and Python runs the pending handler between them."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from liftbridge_sync._transport.h2_subscribe import _SIGNAL_SLICE, _recv_within
from tests.waiting import wait_until


def _state(thread_id: int | None) -> str:
    """A thread's scheduler state from /proc (``S``: sleeping in the kernel)."""
    stat = Path(f"/proc/self/task/{thread_id}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


class _Interrupted(Exception):
    pass


def _raise(signum: int, frame: FrameType | None) -> None:
    raise _Interrupted


def test_a_sigint_delivered_to_another_thread_interrupts_the_main_threads_read() -> None:
    assert threading.current_thread() is threading.main_thread()
    ours, theirs = socket.socketpair()
    previous = signal.signal(signal.SIGINT, _raise)
    reading = threading.Event()
    main = threading.main_thread().native_id

    def other() -> None:
        reading.wait()
        # Until the main thread sleeps in the kernel (its recv()): a signal before that
        # would prove nothing. Without the slices it would then block for good.
        wait_until(lambda: _state(main) == "S", what="the main thread to block in recv()")
        # The signal goes to this thread, not to the main one blocked in recv().
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    try:
        thread = threading.Thread(target=other, name="test-signal-target")
        started = time.monotonic()
        thread.start()
        with pytest.raises(_Interrupted):
            reading.set()
            _recv_within(ours, None)  # nothing ever arrives
        thread.join()
        assert time.monotonic() - started < _SIGNAL_SLICE + 2.0
    finally:
        signal.signal(signal.SIGINT, previous)
        ours.close()
        theirs.close()


def test_the_wait_still_times_out_and_data_still_arrives() -> None:
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(TimeoutError):
            _recv_within(ours, 0.05)
        theirs.sendall(b"x")
        assert _recv_within(ours, 5.0) == b"x"
    finally:
        ours.close()
        theirs.close()
