"""The publish command's waits for its acks towards signals (as the mailboxes' in
test_mailbox_signals): a signal the kernel hands another thread ends the main thread's
wait within a slice, and a second one cannot leave the tracker's lock broken."""

from __future__ import annotations

import concurrent.futures
import threading
import types
from typing import Any, cast

import pytest

from liftbridge_sync import Ack
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.cli import publish as publish_module
from liftbridge_sync.cli.publish import _Tracker
from tests.signals import GIVE_UP, second_signal_while_locked, signal_another_thread


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
        self.release.wait(GIVE_UP + 5.0)

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
    try:
        took = signal_another_thread(
            tracker.close, unblock=output.release.set, what="close() waiting for the printer"
        )
    finally:
        output.release.set()
        raising_handler.set()
        tracker.close()
    assert took < WAIT_SLICE + 2.0


def test_a_signal_given_another_thread_ends_the_wait_for_the_acks(
    raising_handler: threading.Event,
) -> None:
    tracker = _Tracker(print_acks=False)
    unanswered: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
    tracker.add(unanswered)
    try:
        took = signal_another_thread(
            tracker.wait_settled,
            unblock=lambda: unanswered.set_result(None),
            what="the wait for the acks",
        )
    finally:
        raising_handler.set()
        tracker.close()
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
    # The lock, as a done-callback settling a future holds it.
    second_signal_while_locked(
        tracker.wait_settled, tracker._lock, raising_handler, what="the wait for the acks"
    )
    # Still sound: an ack settled on another thread ends the next wait.
    waiter = threading.Thread(target=tracker.wait_settled, name="test-waiter")
    waiter.start()
    unanswered.set_result(None)
    waiter.join(10)
    assert not waiter.is_alive()
    assert (tracker.sent, tracker.acked) == (1, 1)
    tracker.close()
