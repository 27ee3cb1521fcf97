"""``wait_sliced``: the one loop behind the package's waits in slices (a Ctrl-C the
kernel gave another thread is handled within a slice, not at the timeout)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from liftbridge_sync._runtime.doorbell import WAIT_SLICE, join_sliced, wait_event, wait_sliced
from liftbridge_sync.nats._support import wait_all, wait_future


class _Recorder:
    """A ``wait`` that records each step it is given and answers from a script."""

    def __init__(self, answers: list[bool], sleep: bool = False) -> None:
        self.steps: list[float] = []
        self._answers = answers
        self._sleep = sleep

    def __call__(self, step: float) -> bool:
        self.steps.append(step)
        if self._sleep:  # the step's time really passes (what a timeout waits for)
            threading.Event().wait(step)
        return self._answers.pop(0) if self._answers else False


def test_without_a_limit_it_waits_in_whole_slices_until_told() -> None:
    wait = _Recorder([False, False, True])
    assert wait_sliced(wait, None) is True
    assert wait.steps == [WAIT_SLICE] * 3


def test_a_limit_is_cut_into_slices_and_the_last_takes_the_rest() -> None:
    wait = _Recorder([], sleep=True)
    started = time.monotonic()
    assert wait_sliced(wait, WAIT_SLICE + 0.1) is False
    took = time.monotonic() - started
    assert wait.steps[0] == WAIT_SLICE
    assert len(wait.steps) == 2 and 0 < wait.steps[1] <= 0.1, wait.steps
    assert WAIT_SLICE + 0.1 <= took < WAIT_SLICE + 2.0


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_no_time_left_asks_once_without_waiting(seconds: float) -> None:
    told, untold = _Recorder([True]), _Recorder([False])
    assert wait_sliced(told, seconds) is True
    assert wait_sliced(untold, seconds) is False
    assert told.steps == untold.steps == [0.0]


def test_wait_event_answers_as_event_wait() -> None:
    event = threading.Event()
    assert wait_event(event, 0.0) is False
    event.set()
    assert wait_event(event, None) is True


def test_wait_future_gives_the_outcome_or_times_out() -> None:
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    with pytest.raises(TimeoutError):
        wait_future(pending, 0.0)
    failed: concurrent.futures.Future[int] = concurrent.futures.Future()
    failed.set_exception(TimeoutError("its own"))
    with pytest.raises(TimeoutError, match="its own"):
        wait_future(failed, None)
    pending.set_result(7)
    assert wait_future(pending, None) == 7


def test_wait_all_returns_the_futures_not_done_in_time() -> None:
    done: concurrent.futures.Future[int] = concurrent.futures.Future()
    done.set_result(1)
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    assert wait_all([done, pending], 0.0) == {pending}
    assert wait_all([], None) == set()
    pending.set_result(2)
    assert wait_all([done, pending], None) == set()


def test_join_sliced_says_whether_the_thread_ended() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(30,), name="test-joined", daemon=True)
    assert join_sliced(thread, 0.0) is True  # never started: not alive
    thread.start()
    assert join_sliced(thread, 0.0) is False
    release.set()
    assert join_sliced(thread, None) is True
