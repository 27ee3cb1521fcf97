"""A publish future's state, ``FutureCore``: the C type and its pure-Python twin behave
the same (one suite, run over both), and the C settling code needs the C one."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import weakref
from typing import Any

import pytest

from liftbridge_sync._publishing import futures as futures_module
from liftbridge_sync._publishing.futures import PublishFuture, PyFutureCore, settle
from liftbridge_sync._wire import speedups
from tests.signals import thread_state
from tests.twins import twins
from tests.waiting import wait_until

IMPLEMENTATIONS = twins(PyFutureCore, speedups.FutureCore)


@pytest.fixture(params=IMPLEMENTATIONS)
def future_class(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> type[PublishFuture[Any]]:
    """``PublishFuture``'s methods on the core under test (as the module builds it).

    The twin pairs with the Python settling code: with the C speedups active, their C
    settling functions are set aside while it is under test.
    """
    core: type = request.param
    if core is futures_module.FutureCore:
        built: type[PublishFuture[Any]] = PublishFuture
        return built
    monkeypatch.setattr(futures_module, "_run_callbacks", None)
    monkeypatch.setattr(futures_module, "_settle_acks", None)
    body = {k: v for k, v in vars(PublishFuture).items() if k not in ("__dict__", "__weakref__")}
    twin: type[PublishFuture[Any]] = type(
        "PublishFutureOn" + core.__name__, (core, concurrent.futures.Future), body
    )
    return twin


def test_a_new_future_is_running_with_nothing_attached(
    future_class: type[PublishFuture[Any]],
) -> None:
    future = future_class()
    assert future._state == "RUNNING" and not future.done()
    assert (future._result, future._exception, future.ledger, future._gate) == (None,) * 4
    assert future._done_callbacks == () and future._done_callbacks is futures_module.NO_CALLBACKS
    assert (future._waited, future._conditioned) == (False, False)
    assert future.running() and not future.cancel() and not future.cancelled()
    # Neither builds a condition (only a thread that blocks needs one).
    assert (future._waited, future._conditioned) == (False, False)
    assert "_condition" not in getattr(future, "__dict__", {})


def test_its_fields_keep_what_is_written(future_class: type[PublishFuture[Any]]) -> None:
    future = future_class()
    sentinel, error, gate = object(), RuntimeError("x"), threading.Lock()
    future._result, future._exception, future._gate = sentinel, error, gate
    future._waited = True
    future._conditioned = True
    assert (future._result, future._exception, future._gate) == (sentinel, error, gate)
    assert (future._waited, future._conditioned) == (True, True)
    # Another future is untouched: the defaults are per future, not shared.
    other = future_class()
    assert (other._result, other._waited, other._gate) == (None, False, None)


def test_it_resolves_and_wakes_as_a_concurrent_future(
    future_class: type[PublishFuture[Any]],
) -> None:
    waited, called = future_class(), future_class()
    seen: list[object] = []
    called.add_done_callback(lambda f: seen.append(f.result()))
    ready = threading.Event()

    def resolve() -> None:
        ready.wait(10)
        assert settle([(waited, "a", None), (called, "b", None)]) == 2

    resolver = threading.Thread(target=resolve, name="liftbridge-test-resolver")
    resolver.start()
    ready.set()
    done, not_done = concurrent.futures.wait([waited], timeout=10)
    resolver.join(10)
    assert done == {waited} and not not_done
    assert waited.result(0) == "a" and seen == ["b"] and not waited.running()
    assert waited._state == "FINISHED" and waited._conditioned and waited._waited
    assert called._done_callbacks is futures_module.NO_CALLBACKS


def test_a_failed_future_raises_its_error_and_reports_it_once_observed(
    future_class: type[PublishFuture[Any]],
) -> None:
    observed: list[object] = []

    class Tracker:
        def observed(self, future: Any) -> None:
            observed.append(future)

    class Sink:
        def tracker(self, error: BaseException) -> Any:
            return Tracker()

    future = future_class()
    error = LookupError("nope")
    assert settle([(future, None, error)], Sink()) == 1
    with pytest.raises(LookupError):
        future.result(0)
    assert future.exception(0) is error and observed == [future, future]


def test_a_future_in_a_reference_cycle_is_collected(
    future_class: type[PublishFuture[Any]],
) -> None:
    future = future_class()
    held: list[object] = [future]
    future.add_done_callback(held.append)  # future -> callback -> held -> future
    future._result = held
    ref = weakref.ref(future)
    del future, held
    gc.collect()
    assert ref() is None


@pytest.mark.skipif(speedups.settle_acks is None, reason="C speedups not built or disabled")
def test_the_c_settling_code_refuses_a_future_of_another_kind() -> None:
    assert speedups.run_callbacks is not None
    with pytest.raises(TypeError, match="publish future"):
        speedups.run_callbacks([concurrent.futures.Future()], 0)


def test_wait_never_ends_early_for_a_future_resolved_while_it_installs_its_waiter(
    future_class: type[PublishFuture[Any]],
) -> None:
    """``concurrent.futures.wait`` takes each future's condition, counts the futures not
    done and installs its waiter on each. A future resolved in between, its state set
    outside its condition, was counted done and yet notified to the waiter: the count
    of those pending reached zero with one still running, and ``wait`` returned early
    (a CI run's ``wait`` on 300 publishes returned with 23 not done). The state is now
    set under the lock the conditions share."""
    first, second = future_class(), future_class()
    early, late = sorted((first, second), key=id)  # wait() takes them in this order
    assert early._condition is not None and late._condition is not None  # as a waiter makes them
    outcome: list[Any] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(concurrent.futures.wait([early, late], timeout=30)),
        name="liftbridge-test-waiter",
    )
    resolver = threading.Thread(
        target=settle, args=([(early, "a", None)],), name="liftbridge-test-resolver"
    )
    late._condition.acquire()  # holds wait() up among the conditions it takes
    try:
        waiter.start()
        wait_until(lambda: thread_state(waiter.native_id) == "S", what="wait() to block")
        resolver.start()
        wait_until(lambda: thread_state(resolver.native_id) == "S", what="the resolver to block")
    finally:
        late._condition.release()
    resolver.join(10)
    assert early.done() and not late.done()
    settle([(late, "b", None)])
    waiter.join(10)
    ((done, not_done),) = outcome
    assert done == {early, late} and not not_done
