"""The waits of a reading thread (a whole-stream subscription's and a consumer group's
mailboxes, a consumer's wait for its assignment, a whole-stream close()) towards signals
and close(): a Ctrl-C the kernel hands another thread ends the main thread's wait within
a slice, a second one cannot leave the lock broken, and a close() from another thread
ends a mailbox's wait at once."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest

from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.consumer._mailbox import Mailbox
from liftbridge_sync.consumer.group import Consumer
from liftbridge_sync.subscription.stream import StreamSubscription, _Mailbox
from tests.messages import make_message
from tests.waiting import wait_until

#: How long a test lets a wait ignore its signal before it closes the mailbox to end it.
_GIVE_UP = WAIT_SLICE + 5.0


class _Interrupted(Exception):
    """What the tests' SIGUSR1 handler raises (as Ctrl-C's raises KeyboardInterrupt)."""


@dataclasses.dataclass
class _Reader:
    """What the consumer's mailbox asks of a partition reader."""

    stopped: bool = False


def _state(thread_id: int | None) -> str:
    """A thread's scheduler state from /proc (``S``: asleep in the kernel)."""
    stat = Path(f"/proc/self/task/{thread_id}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


@pytest.fixture
def raising_handler() -> Iterator[threading.Event]:
    """SIGUSR1 raises :class:`_Interrupted` in the main thread until the event is set."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    quiet = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        if not quiet.is_set():
            raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield quiet
    finally:
        quiet.set()
        signal.signal(signal.SIGUSR1, previous)


def _stream_box() -> tuple[Callable[[], object], Callable[[], None]]:
    box = _Mailbox(capacity=4, producers=1)
    return lambda: box.get(None), box.close


def _consumer_box() -> tuple[Callable[[], object], Callable[[], None]]:
    box = Mailbox(4)
    return lambda: box.get(None), box.close


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
    main = threading.main_thread().native_id
    waiting = threading.Event()
    ended = threading.Event()
    gave_up: list[bool] = []

    def other() -> None:
        waiting.wait(30)
        wait_until(lambda: _state(main) == "S", what="the main thread to block in get()")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this thread
        if not ended.wait(_GIVE_UP):
            gave_up.append(True)
            close()  # ends the wait the signal did not

    thread = threading.Thread(target=other, name="test-signal-target")
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(_Interrupted):
            waiting.set()
            try:
                get()
            finally:
                ended.set()
        took = time.monotonic() - started
    finally:
        ended.set()
        thread.join(30)
        close()
    assert gave_up == [], "the wait went on although a signal's handler was pending"
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
        wait_until(lambda: _state(main) == "S", what="the main thread to block in get()")
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
    main = threading.main_thread()
    native = main.native_id
    assert main.ident is not None
    ident = main.ident
    waiting = threading.Event()
    ended = threading.Event()
    failures: list[BaseException] = []

    def reader() -> None:
        try:
            waiting.wait(30)
            wait_until(lambda: _state(native) == "S", what="the main thread to block in get()")
            with box._not_full:  # the lock, as a reader's put() holds it
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

    thread = threading.Thread(target=reader, name="test-lock-holder")
    thread.start()
    try:
        with pytest.raises(_Interrupted):
            waiting.set()
            try:
                box.get(None)
            finally:
                ended.set()
    finally:
        raising_handler.set()
        thread.join(30)
    assert not thread.is_alive()
    assert failures == []
    # Still sound: a message queued by another thread is handed out.
    message = make_message(7)
    producer = threading.Thread(target=box.put, args=(message,), name="test-producer")
    producer.start()
    assert box.get(5.0) is message
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
        self.ended.wait(_GIVE_UP + 5.0)
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
            reader.ended.set()  # ends the wait the signal did not

    thread = threading.Thread(target=other, name="test-signal-target")
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(_Interrupted):
            closing.set()
            try:
                whole.close()
            finally:
                ended.set()
        took = time.monotonic() - started
    finally:
        thread.join(30)
        reader.ended.set()
        raising_handler.set()
        whole.close(10)
    assert gave_up == [], "close() went on waiting although a signal's handler was pending"
    assert took < WAIT_SLICE + 2.0
