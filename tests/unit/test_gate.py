"""What a blocked publishing thread sleeps on, ``Gate``: the C type and its pure-Python
twin behave the same (one suite, run over both)."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from liftbridge_sync._publishing.gates import GateLike, PyGate
from liftbridge_sync._wire import speedups
from tests.twins import twins

Factory = Callable[[], GateLike]

IMPLEMENTATIONS = twins(PyGate, speedups.Gate)


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def test_a_new_gate_is_closed(make: Factory) -> None:
    gate = make()
    assert gate.wait(0) is False
    assert gate.wait(0.01) is False


def test_an_open_gate_lets_one_wait_through_then_closes(make: Factory) -> None:
    gate = make()
    gate.open()
    assert gate.wait() is True
    assert gate.wait(0) is False


def test_an_open_before_the_wait_is_kept_for_it(make: Factory) -> None:
    gate = make()
    gate.open()
    assert gate.wait(0) is True


def test_a_second_open_before_the_wait_is_refused(make: Factory) -> None:
    gate = make()
    gate.open()
    with pytest.raises(RuntimeError, match="already open"):
        gate.open()
    assert gate.wait(0) is True
    assert gate.wait(0) is False


def test_a_gate_is_reused_wait_after_wait(make: Factory) -> None:
    gate = make()
    for _ in range(3):
        gate.open()
        assert gate.wait(1.0) is True


def test_a_waiter_sleeps_until_another_thread_opens_it(make: Factory) -> None:
    gate = make()
    waiting = threading.Event()
    results: list[bool] = []

    def wait() -> None:
        waiting.set()
        results.append(gate.wait(30.0))

    thread = threading.Thread(target=wait, name="liftbridge-test-gate")
    thread.start()
    waiting.wait(5.0)
    # Still blocked: nothing opened it (the join returns at its timeout).
    thread.join(0.05)
    assert thread.is_alive() and results == []
    gate.open()
    thread.join(5.0)
    assert results == [True]


def test_the_opener_and_other_threads_run_while_a_thread_waits(make: Factory) -> None:
    # The wait releases the GIL: a thread counting meanwhile makes progress.
    gate = make()
    counted = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal counted
        while not stop.is_set():
            counted += 1

    counter = threading.Thread(target=count, name="liftbridge-test-count")
    counter.start()
    try:
        assert gate.wait(0.05) is False
    finally:
        stop.set()
        counter.join(5.0)
    assert counted > 0


def test_a_timed_wait_ends_at_its_timeout(make: Factory) -> None:
    gate = make()
    start = time.monotonic()
    assert gate.wait(0.05) is False
    assert time.monotonic() - start >= 0.04


@pytest.mark.parametrize("timeout", [-1.0, -0.001, math.nan])
def test_a_negative_or_nan_timeout_is_refused(make: Factory, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        make().wait(timeout)


def test_many_opens_and_waits_across_threads_lose_none(make: Factory) -> None:
    # Two threads hand a turn back and forth on two gates: every open is waited for
    # exactly once, none is lost or doubled.
    ping, pong = make(), make()
    turns = 2000
    seen: list[int] = []

    def answer() -> None:
        for i in range(turns):
            assert ping.wait(10.0)
            seen.append(i)
            pong.open()

    thread = threading.Thread(target=answer, name="liftbridge-test-answer")
    thread.start()
    for _ in range(turns):
        ping.open()
        assert pong.wait(10.0)
    thread.join(10.0)
    assert seen == list(range(turns))
    assert ping.wait(0) is False and pong.wait(0) is False


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_a_signal_handler_runs_during_a_wait_and_its_error_ends_it(make: Factory) -> None:
    # As threading.Lock's acquire: a signal's handler runs while the main thread
    # waits (KeyboardInterrupt and the like end the wait).
    gate = make()

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(Interrupted):
            gate.wait(30.0)
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_a_signal_whose_handler_returns_leaves_the_timed_wait_running(make: Factory) -> None:
    gate = make()
    handled = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.set())
    timer = threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGUSR1))
    start = time.monotonic()
    timer.start()
    try:
        assert gate.wait(0.2) is False
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    assert handled.is_set()
    assert time.monotonic() - start >= 0.19


def test_the_c_gate_takes_no_arguments() -> None:
    if speedups.Gate is None:
        pytest.skip("C speedups not built or disabled")
    with pytest.raises(TypeError):
        speedups.Gate(1)
    with pytest.raises(TypeError):
        speedups.Gate().wait(1.0, 2.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        speedups.Gate().wait(when=1.0)  # type: ignore[call-arg]
