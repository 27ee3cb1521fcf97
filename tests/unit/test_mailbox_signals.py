"""The waits of a reading thread (a whole-stream subscription's and a consumer group's
mailboxes, a consumer's wait for its assignment, a whole-stream close()) towards signals
and close(): a Ctrl-C the kernel hands another thread ends the main thread's wait within
a slice, a second one cannot leave the lock broken, and a close() from another thread
ends a mailbox's wait at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.consumer._mailbox import Mailbox
from liftbridge_sync.consumer.group import Consumer
from liftbridge_sync.subscription.merging import Mailbox as _Mailbox
from liftbridge_sync.subscription.stream import StreamSubscription
from tests.messages import make_message
from tests.signals import (
    GIVE_UP,
    second_signal_while_locked,
    signal_another_thread,
    thread_state,
)
from tests.waiting import wait_until


def _stream_box() -> tuple[Callable[[], object], Callable[[], None]]:
    box = _Mailbox(capacity=4, producers=1)
    return lambda: box.peek(1, None), box.close


def _consumer_box() -> tuple[Callable[[], object], Callable[[], None]]:
    box = Mailbox(4)
    return lambda: box.peek(1, None), box.close


MAILBOXES: list[Any] = [
    pytest.param(_stream_box, id="stream-subscription"),
    pytest.param(_consumer_box, id="consumer-group"),
]


def _assignment_wait() -> tuple[Callable[[], object], Callable[[], None]]:
    client = Client("127.0.0.1:1", retry=RetryPolicy(max_attempts=1))  # a quick close()
    consumer = Consumer(client._core, "g", ["s"], auto_commit=None)  # never answered

    def close() -> None:
        consumer.close()
        client.close()

    return lambda: consumer.wait_for_assignment(None), close


@pytest.mark.parametrize(
    "make", [*MAILBOXES, pytest.param(_assignment_wait, id="wait_for_assignment")]
)
def test_a_signal_given_another_thread_ends_the_main_threads_wait(
    raising_handler: threading.Event,
    make: Callable[[], tuple[Callable[[], object], Callable[[], None]]],
) -> None:
    # The kernel gives a process's SIGINT to any of its threads: one given a reader
    # thread used to leave the main thread asleep in Condition.wait() until a message.
    get, close = make()
    try:
        took = signal_another_thread(get, unblock=close, what="get()")
    finally:
        close()
    assert took < WAIT_SLICE + 2.0


@pytest.mark.parametrize("make", MAILBOXES)
def test_close_from_another_thread_ends_a_blocked_get_at_once(
    make: Callable[[], tuple[Callable[[], object], Callable[[], None]]],
) -> None:
    get, close = make()
    waiting = threading.Event()
    closed_at: list[float] = []

    def other() -> None:
        waiting.wait(30)
        main = threading.main_thread().native_id
        wait_until(lambda: thread_state(main) == "S", what="the main thread to block in get()")
        closed_at.append(time.monotonic())
        close()

    thread = threading.Thread(target=other, name="test-closer")
    thread.start()
    try:
        with pytest.raises(StopIteration):
            waiting.set()
            get()
        ended_at = time.monotonic()
    finally:
        thread.join(30)
    # Woken by the close, not by the end of a slice.
    assert ended_at - closed_at[0] < WAIT_SLICE / 2


def test_a_second_signal_while_the_wait_wants_the_lock_back_leaves_it_sound(
    raising_handler: threading.Event,
) -> None:
    # Two Ctrl-Cs: the first ended Condition.wait()'s sleep, the second its retaking of
    # the lock a reader held; the wait ended without the lock and released the reader's
    # hold ("RuntimeError: release unlocked lock" in the reader, or in the iterator).
    box = _Mailbox(capacity=4, producers=1)
    # The lock, as a reader's put() holds it.
    second_signal_while_locked(
        lambda: box.peek(1, None), box._not_full, raising_handler, what="peek()"
    )
    # Still sound: a message queued by another thread is handed out.
    message = make_message(7)
    producer = threading.Thread(target=box.put, args=(message,), name="test-producer")
    producer.start()
    assert box.peek(1, 5.0) == [message]
    producer.join(5)


class _SlowToEnd:
    """A partition's subscription whose reader ends only a while after close(), as one in
    a metadata call to a hung broker does (up to ``rpc_timeout``)."""

    partition = 0

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.ended = threading.Event()

    def __iter__(self) -> _SlowToEnd:
        return self

    def __next__(self) -> object:
        self.reading.set()
        self.ended.wait(GIVE_UP + 5.0)
        raise StopIteration

    def close(self) -> None:
        pass  # the call under way does not end for it


class _Core:
    """What a whole-stream subscription asks of its client."""

    forked = False

    def refuse_if_forked(self, what: str) -> None:
        pass


def test_a_signal_given_another_thread_ends_a_close_waiting_for_a_reader(
    raising_handler: threading.Event,
) -> None:
    reader = _SlowToEnd()
    whole = StreamSubscription(cast(Any, _Core()), "s", [cast(Any, reader)])
    assert reader.reading.wait(10)
    try:
        took = signal_another_thread(whole.close, unblock=reader.ended.set, what="close()")
    finally:
        reader.ended.set()
        raising_handler.set()
        whole.close(10)
    assert took < WAIT_SLICE + 2.0
