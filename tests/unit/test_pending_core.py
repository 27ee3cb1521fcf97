"""The pending table's state, ``PendingCore``: the C type and its pure-Python twin behave
the same (one suite, run over both)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import pytest

from liftbridge_sync._publishing.pending_core import PendingCoreType, PyPendingCore
from liftbridge_sync._wire import speedups
from tests.lock_signals import BLOCKING_TAKES, assert_a_signal_ends_a_blocked_take
from tests.twins import twins
from tests.waiting import wait_until

Factory = Callable[..., PendingCoreType]

IMPLEMENTATIONS = twins(PyPendingCore, speedups.PendingCore)


def _clock() -> float:
    return 12.5


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def test_a_new_core_is_empty_with_the_limits_given(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    assert (core.max_in_flight, core.max_message, core.id_prefix) == (8, 1000, "ab.")
    assert core.clock is _clock and core.clock() == 12.5
    assert core.pending == {} and type(core.pending) is dict
    assert core.expiry == {} and type(core.expiry) is dict
    assert core.live is None and core.outbound is None
    assert core.sleep_until == float("inf") and core.in_line == 0
    assert (core.closing, core.finished, core.seq) == (False, False, 0)
    assert not core.locked()


def test_its_tables_are_the_same_objects_every_time(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    core.pending["x"] = 1
    core.expiry[1.0] = collections.deque([1])
    assert core.pending is core.pending and core.pending == {"x": 1}
    assert core.expiry is core.expiry and list(core.expiry[1.0]) == [1]


def test_sequence_numbers_count_from_one_and_seq_is_the_last(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    assert [core.next_seq() for _ in range(3)] == [1, 2, 3]
    assert core.seq == 3


def test_id_numbers_count_from_zero_and_are_unique_across_threads(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    assert core.next_id() == 0
    seen: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        mine = [core.next_id() for _ in range(2000)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=take, name=f"test-ids-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(seen) == list(range(1, 8001))


def test_the_writable_fields_keep_what_is_written(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    stream = object()
    queue = object()
    core.live = stream
    core.outbound = queue
    core.sleep_until = 3.25
    core.in_line = 3
    core.closing = True
    core.finished = True
    assert core.live is stream and core.outbound is queue and core.sleep_until == 3.25
    assert core.in_line == 3
    assert (core.closing, core.finished) == (True, True)
    core.live = None
    core.closing = False
    assert core.live is None and core.closing is False and core.finished is True


def test_the_lock_is_a_lock(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    assert core.acquire() is True
    assert core.locked()
    assert core.acquire(False) is False  # not re-entrant
    assert core.acquire(blocking=False) is False
    core.release()
    assert not core.locked()
    with core:
        assert core.locked()
    assert not core.locked()
    with pytest.raises(RuntimeError):
        core.release()


def test_the_lock_is_released_when_the_block_raises(make: Factory) -> None:
    core = make(8, 1000, "ab.", _clock)
    with pytest.raises(KeyError), core:
        raise KeyError("x")
    assert not core.locked()


def test_a_blocked_acquire_waits_for_the_holder_and_lets_it_run(make: Factory) -> None:
    # The waiting thread must not hold the GIL while it waits: the holder runs Python
    # code (appends) and releases; then the waiter gets the lock.
    core = make(8, 1000, "ab.", _clock)
    order: list[str] = []
    core.acquire()
    started = threading.Event()

    def wait_for_it() -> None:
        started.set()
        with core:
            order.append("waiter")

    waiter = threading.Thread(target=wait_for_it, name="test-core-waiter")
    waiter.start()
    started.wait(10)
    order.append("holder")
    core.release()
    waiter.join(10)
    assert not waiter.is_alive()
    assert order == ["holder", "waiter"]
    wait_until(lambda: not core.locked(), what="the waiter to let the lock go")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, 1000, "p.", _clock), ValueError),
        ((8, -1, "p.", _clock), ValueError),
        ((8, 1000, b"p.", _clock), TypeError),
        ((8, 1000, "p.", "not callable"), TypeError),
        (("8", 1000, "p.", _clock), TypeError),
    ],
)
def test_bad_arguments_are_refused(make: Factory, args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        make(*args)


@pytest.mark.parametrize("take", BLOCKING_TAKES)
def test_a_signal_handler_runs_during_a_blocked_acquire_and_its_error_ends_it(
    make: Factory, take: Callable[[Any], object]
) -> None:
    # As threading.Lock's: Ctrl-C reaches a thread blocked on a lock another holds.
    core = make(8, 1000, "ab.", _clock)
    assert_a_signal_ends_a_blocked_take(core, take)
