"""An HTTP/2 publish stream's outbound queue, ``OutboundQueue``: the C type and its
pure-Python twin behave the same (one suite, run over both)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync._transport.h2.outbound_queue import OutboundQueueType, PyOutboundQueue
from liftbridge_sync._wire import speedups
from tests.lock_signals import BLOCKING_TAKES, assert_a_signal_ends_a_blocked_take
from tests.twins import twins
from tests.waiting import wait_until

Factory = Callable[..., OutboundQueueType]

IMPLEMENTATIONS = twins(PyOutboundQueue, speedups.OutboundQueue)

#: The C sources in the checkout these tests run from (not the installed package).
SOURCES = Path(__file__).resolve().parents[2] / "liftbridge_sync"


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def test_a_new_queue_is_empty_with_the_threshold_given(make: Factory) -> None:
    queue = make(16384)
    assert queue.write_here_at == 16384
    assert queue.frames == [] and type(queue.frames) is list
    assert (queue.queued_bytes, queue.taken_bytes, queue.asked) == (0, 0, 0)
    assert (queue.signalled, queue.done, queue.close_requested) == (False, False, False)
    assert (queue.direct_mark, queue.combining, queue.deferred) == (0, 0, False)
    assert not queue.locked()


def test_the_writable_fields_keep_what_is_written(make: Factory) -> None:
    queue = make(10)
    queue.queued_bytes = 1 << 40  # byte counts only grow: they outgrow 32 bits
    queue.taken_bytes = 7
    queue.asked = 3
    queue.signalled = True
    queue.done = True
    queue.close_requested = True
    assert (queue.queued_bytes, queue.taken_bytes, queue.asked) == (1 << 40, 7, 3)
    assert (queue.signalled, queue.done, queue.close_requested) == (True, True, True)
    queue.signalled = False
    assert queue.signalled is False and queue.done is True
    queue.direct_mark = 1 << 40
    queue.combining = 5
    queue.combining -= 1
    queue.deferred = True
    assert (queue.direct_mark, queue.combining, queue.deferred) == (1 << 40, 4, True)


def test_the_frames_list_and_threshold_cannot_be_replaced(make: Factory) -> None:
    queue = make(10)
    with pytest.raises(AttributeError):
        queue.frames = []  # type: ignore[misc]
    with pytest.raises(AttributeError):
        queue.write_here_at = 1  # type: ignore[misc]


def test_take_hands_over_what_is_queued_and_counts_it_taken(make: Factory) -> None:
    queue = make(10)
    frames = queue.frames
    frames.append(b"abc")
    frames.append(b"de")
    queue.queued_bytes += 5
    batch = queue.take()
    assert batch == [b"abc", b"de"] and batch is frames
    assert queue.frames == [] and queue.frames is not frames
    assert (queue.queued_bytes, queue.taken_bytes) == (5, 5)
    queue.frames.append(b"f")
    queue.queued_bytes += 1
    assert queue.take() == [b"f"] and queue.taken_bytes == 6


def test_take_of_an_empty_queue_leaves_the_counts(make: Factory) -> None:
    queue = make(10)
    queue.queued_bytes = 9  # counted, not yet appended (no caller does this; the count stays)
    assert queue.take() == []
    assert queue.taken_bytes == 0 and queue.frames == []


def test_the_lock_is_a_lock(make: Factory) -> None:
    queue = make(10)
    assert queue.acquire() is True
    assert queue.locked()
    assert queue.acquire(False) is False  # not re-entrant
    assert queue.acquire(blocking=False) is False
    queue.release()
    assert not queue.locked()
    with queue:
        assert queue.locked()
    assert not queue.locked()
    with pytest.raises(RuntimeError):
        queue.release()


def test_the_lock_is_released_when_the_block_raises(make: Factory) -> None:
    queue = make(10)
    with pytest.raises(KeyError), queue:
        raise KeyError("x")
    assert not queue.locked()


def test_a_blocked_acquire_waits_for_the_holder_and_lets_it_run(make: Factory) -> None:
    # The waiting thread must not hold the GIL while it waits: the holder runs Python
    # code (appends) and releases; then the waiter gets the lock.
    queue = make(10)
    order: list[str] = []
    queue.acquire()
    started = threading.Event()

    def wait_for_it() -> None:
        started.set()
        with queue:
            order.append("waiter")

    waiter = threading.Thread(target=wait_for_it, name="test-queue-waiter")
    waiter.start()
    started.wait(10)
    order.append("holder")
    queue.release()
    waiter.join(10)
    assert not waiter.is_alive()
    assert order == ["holder", "waiter"]
    wait_until(lambda: not queue.locked(), what="the waiter to let the lock go")


def test_threads_queueing_under_the_lock_lose_nothing(make: Factory) -> None:
    queue = make(10)

    def put(tag: bytes) -> None:
        for _ in range(2000):
            with queue:
                queue.frames.append(tag)
                queue.queued_bytes += 1
                queue.asked += 1

    threads = [
        threading.Thread(target=put, args=(bytes([i]),), name=f"test-queue-{i}") for i in range(4)
    ]
    for thread in threads:
        thread.start()
    taken: list[bytes] = []
    while any(thread.is_alive() for thread in threads):
        with queue:
            taken += queue.take()
    for thread in threads:
        thread.join(10)
    with queue:
        taken += queue.take()
    assert len(taken) == 8000 and queue.asked == 8000
    assert queue.queued_bytes == queue.taken_bytes == 8000


@pytest.mark.parametrize(("args", "error"), [((-1,), ValueError), (("16",), TypeError)])
def test_bad_arguments_are_refused(make: Factory, args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        make(*args)


def test_the_c_fast_path_names_no_attribute_of_the_streams_classes() -> None:
    # The slots the C code once located by name on H2PublishStream and AckGathering
    # (member_offsets); it now works on the OutboundQueue struct it defines itself.
    former = {
        "_lock", "_done", "_close_requested", "_queue", "_queued_bytes", "_taken_bytes",
        "_signalled", "_gathering", "asked",
    }  # fmt: skip
    # The checkout's source: wheels ship no C sources.
    source = (SOURCES / "_speedups_submit.c").read_text()
    assert not set(re.findall(r'"([^"\n]*)"', source)) & former
    assert "member_offsets" not in source


@pytest.mark.parametrize("take", BLOCKING_TAKES)
def test_a_signal_handler_runs_during_a_blocked_acquire_and_its_error_ends_it(
    make: Factory, take: Callable[[Any], object]
) -> None:
    # As threading.Lock's: Ctrl-C reaches a thread blocked on a lock another holds.
    queue = make(10)
    assert_a_signal_ends_a_blocked_take(queue, take)
