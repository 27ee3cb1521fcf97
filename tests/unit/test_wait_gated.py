"""``wait_gated``: a ``publish()`` caller blocked on a lock of its own until its future
resolves, whichever way it resolves (acks in bulk from C or Python, a failure, a
done-callback's future), and the lock reused for the thread's next wait."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing import futures as futures_module
from liftbridge_sync._publishing.futures import (
    PublishFuture,
    settle,
    settle_acks,
    settle_plain,
    take_acks,
    wait_gated,
)
from liftbridge_sync._publishing.pending import Entry
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.publish_codec import ack_from_proto
from liftbridge_sync.errors import ClientClosedError
from tests.waiting import wait_until


def _Entry(future: PublishFuture[Any]) -> Entry:  # noqa: N802 - a stand-in
    return Entry(b"", "c", 0, True, future, 1.0, 1.0)


def _blocked(future: PublishFuture[Any]) -> tuple[threading.Thread, list[str]]:
    """A thread blocked in ``wait_gated(future)`` (started, and seen blocked)."""
    events: list[str] = []

    def wait() -> None:
        wait_gated(future)
        events.append("woken")

    thread = threading.Thread(target=wait, name="test-gated", daemon=True)
    thread.start()
    wait_until(lambda: future._gate is not None, what="the waiter to set its gate")
    return thread, events


def _woken(thread: threading.Thread, events: list[str]) -> None:
    thread.join(5.0)
    assert not thread.is_alive() and events == ["woken"]


def test_a_resolved_future_returns_at_once_without_a_gate() -> None:
    future: PublishFuture[Any] = PublishFuture()
    future.set_result(1)
    wait_gated(future)
    assert future._gate is None and not future._waited


def _plain(future: PublishFuture[Any]) -> None:
    assert settle_plain([(future, "ack")]) == []


def _failed(future: PublishFuture[Any]) -> None:
    settle([(future, None, ClientClosedError("closed"))])


def _c_acks(future: PublishFuture[Any]) -> None:
    ack = ack_from_proto(api_pb2.Ack(correlationId="c"), -1)
    taken = settle_acks([ack], {"c": _Entry(future)})
    if speedups.settle_acks is None:  # no speedups: Python resolves it
        assert taken == 0
        settle_plain([(future, ack)])


def _owner_acks(future: PublishFuture[Any]) -> None:
    ack = ack_from_proto(api_pb2.Ack(correlationId="c"), -1)
    count, ready = take_acks([ack], {"c": _Entry(future)})
    if speedups.settle_acks is None:
        assert (count, ready) == (0, [])
        settle([(future, ack, None)])
    else:
        settle((), None, ready)


@pytest.mark.parametrize(
    "resolve",
    [_plain, _failed, _c_acks, _owner_acks],
    ids=["settle_plain", "settle failure", "settle_acks", "take_acks then settle"],
)
def test_every_way_of_resolving_opens_the_gate(
    resolve: Callable[[PublishFuture[Any]], None],
) -> None:
    future: PublishFuture[Any] = PublishFuture()
    thread, events = _blocked(future)
    assert events == []  # really blocked until resolved
    resolve(future)
    _woken(thread, events)
    assert future._gate is None and future.done()


def test_a_thread_reuses_its_gate_and_is_not_woken_by_an_old_one() -> None:
    first: PublishFuture[Any] = PublishFuture()
    second: PublishFuture[Any] = PublishFuture()
    gates: list[Any] = []
    woken: list[int] = []
    may_go = threading.Event()

    def wait_twice() -> None:
        wait_gated(first)
        gates.append(futures_module._GATES.gate)
        woken.append(1)
        may_go.wait(5.0)
        wait_gated(second)
        gates.append(futures_module._GATES.gate)
        woken.append(2)

    thread = threading.Thread(target=wait_twice, name="test-gated", daemon=True)
    thread.start()
    wait_until(lambda: first._gate is not None, what="the first wait")
    settle_plain([(first, 1)])
    wait_until(lambda: woken == [1], what="the first wake-up")
    may_go.set()
    wait_until(lambda: second._gate is not None, what="the second wait")
    assert second._gate is gates[0]  # the same lock, closed again
    assert woken == [1]  # not opened by the first resolution
    settle_plain([(second, 2)])
    thread.join(5.0)
    assert woken == [1, 2] and gates == [gates[0], gates[0]]


def test_a_future_with_a_condition_waiter_too_wakes_both() -> None:
    future: PublishFuture[Any] = PublishFuture()
    thread, events = _blocked(future)
    results: list[Any] = []
    other = threading.Thread(target=lambda: results.append(future.result(5.0)), daemon=True)
    other.start()
    wait_until(lambda: future._conditioned, what="result() to build its condition")
    settle_plain([(future, "ack")])
    _woken(thread, events)
    other.join(5.0)
    assert results == ["ack"]


def test_settle_plain_runs_before_waking_while_the_waiter_still_sleeps() -> None:
    """The entries of resolved futures leave the pending table before their callers
    wake (``before_waking``): a caller that publishes again at once with the same
    correlation id must not be refused as "in use"."""
    future: PublishFuture[Any] = PublishFuture()
    thread, events = _blocked(future)
    seen: list[tuple[list[str], list[int], str]] = []

    def before_waking(skipped: list[int]) -> None:
        seen.append((list(events), skipped, future._state))

    assert settle_plain([(future, "ack")], before_waking=before_waking) == []
    _woken(thread, events)
    assert seen == [([], [], "FINISHED")]
