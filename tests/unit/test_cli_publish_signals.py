"""The publish command's waits for its acks towards signals (as the mailboxes' in
test_mailbox_signals): a signal the kernel hands another thread ends the main thread's
wait within a slice, and a second one cannot leave the tracker's lock broken."""

from __future__ import annotations

import concurrent.futures
import signal
import threading
import time
import types
from typing import Any, cast

import pytest

from liftbridge_sync import Ack
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.cli import publish as publish_module
from liftbridge_sync.cli.publish import _Tracker
from tests.unit import test_mailbox_signals as mailbox_signals
from tests.unit.test_mailbox_signals import _GIVE_UP, _Interrupted, _state
from tests.waiting import wait_until

#: SIGUSR1 raises in the main thread (the fixture of the mailboxes' tests).
raising_handler = mailbox_signals.raising_handler


def _ack(offset: int) -> concurrent.futures.Future[Ack | None]:
    future: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
    future.set_result(cast(Any, types.SimpleNamespace(stream="s", partition=0, offset=offset)))
    return future


class _StuckOutput:
    """Standard output whose reader reads nothing: a write blocks until ``release``."""

    def __init__(self) -> None:
        self.writing = threading.Event()
        self.release = threading.Event()

    def write(self, data: bytes) -> None:
        self.writing.set()
        self.release.wait(_GIVE_UP + 5.0)

    def flush(self) -> None:
        pass


def test_a_signal_given_another_thread_ends_a_close_waiting_for_the_printer(
    raising_handler: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    # close() joined the acks' printer in one sleep: a second Ctrl-C the kernel gave
    # another thread was handled only once a printer held up by a slow reader had ended.
    output = _StuckOutput()
    monkeypatch.setattr(publish_module, "Output", lambda: output)
    tracker = _Tracker(print_acks=True)
    tracker.add(_ack(0))
    assert output.writing.wait(10)
    main = threading.main_thread().native_id
    closing = threading.Event()
    ended = threading.Event()
    gave_up: list[bool] = []

    def other() -> None:
        closing.wait(30)
        wait_until(lambda: _state(main) == "S", what="the main thread to wait in close()")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this thread
        if not ended.wait(_GIVE_UP):
            gave_up.append(True)
            output.release.set()  # ends the wait the signal did not

    thread = threading.Thread(target=other, name="test-signal-target")
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(_Interrupted):
            closing.set()
            try:
                tracker.close()
            finally:
                ended.set()
        took = time.monotonic() - started
    finally:
        thread.join(30)
        output.release.set()
        raising_handler.set()
        tracker.close()
    assert gave_up == [], "close() went on waiting although a signal's handler was pending"
    assert took < WAIT_SLICE + 2.0


def test_a_signal_given_another_thread_ends_the_wait_for_the_acks(
    raising_handler: threading.Event,
) -> None:
    tracker = _Tracker(print_acks=False)
    unanswered: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
    tracker.add(unanswered)
    main = threading.main_thread().native_id
    waiting = threading.Event()
    ended = threading.Event()
    gave_up: list[bool] = []

    def other() -> None:
        waiting.wait(30)
        wait_until(lambda: _state(main) == "S", what="the main thread to wait for the acks")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        if not ended.wait(_GIVE_UP):
            gave_up.append(True)
            unanswered.set_result(None)

    thread = threading.Thread(target=other, name="test-signal-target")
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(_Interrupted):
            waiting.set()
            try:
                tracker.wait_settled()
            finally:
                ended.set()
        took = time.monotonic() - started
    finally:
        thread.join(30)
        raising_handler.set()
        tracker.close()
    assert gave_up == []
    assert took < WAIT_SLICE + 2.0


def test_a_second_signal_while_the_wait_for_the_acks_wants_the_lock_back_leaves_it_sound(
    raising_handler: threading.Event,
) -> None:
    # Two Ctrl-Cs: the first ended Condition.wait()'s sleep, the second its retaking of
    # the lock a settling thread held; the wait ended without the lock and released the
    # settling thread's hold ("RuntimeError: release unlocked lock" in one of them).
    tracker = _Tracker(print_acks=False)
    unanswered: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
    tracker.add(unanswered)
    main = threading.main_thread()
    native = main.native_id
    assert main.ident is not None
    ident = main.ident
    waiting = threading.Event()
    ended = threading.Event()
    failures: list[BaseException] = []

    def settler() -> None:
        try:
            waiting.wait(30)
            wait_until(lambda: _state(native) == "S", what="the main thread to wait")
            with tracker._lock:  # as a done-callback settling a future holds it
                signal.pthread_kill(ident, signal.SIGUSR1)
                # The main thread now either waits for the lock back, or is done.
                wait_until(
                    lambda: ended.is_set() or _state(native) == "S",
                    what="the main thread to wait for the lock back",
                )
                if not ended.is_set():
                    signal.pthread_kill(ident, signal.SIGUSR1)
                    ended.wait(_GIVE_UP)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=settler, name="test-lock-holder")
    thread.start()
    try:
        with pytest.raises(_Interrupted):
            waiting.set()
            try:
                tracker.wait_settled()
            finally:
                ended.set()
    finally:
        raising_handler.set()
        thread.join(30)
    assert not thread.is_alive()
    assert failures == []
    # Still sound: an ack settled on another thread ends the next wait.
    waiter = threading.Thread(target=tracker.wait_settled, name="test-waiter")
    waiter.start()
    unanswered.set_result(None)
    waiter.join(10)
    assert not waiter.is_alive()
    assert (tracker.sent, tracker.acked) == (1, 1)
    tracker.close()
