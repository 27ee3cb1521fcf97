"""The failure ledger behind flush(): only failures dropped unretrieved count, never < 0."""

from __future__ import annotations

import concurrent.futures
import gc
import threading

import pytest

from liftbridge_sync._publishing.futures import PublishFuture, settle
from liftbridge_sync._publishing.pending import FailureLedger
from liftbridge_sync.errors import PublishRejectedError


def _failed(ledger: FailureLedger, n: int) -> list[PublishFuture[object]]:
    futures: list[PublishFuture[object]] = [PublishFuture() for _ in range(n)]
    settle([(f, None, PublishRejectedError(f"#{i}")) for i, f in enumerate(futures)], ledger)
    return futures


def test_held_failures_are_not_reported_dropped_ones_are() -> None:
    ledger = FailureLedger()
    held = _failed(ledger, 4)
    assert ledger.take() == (0, [])  # somebody may still look at them
    assert ledger.live == 4
    assert isinstance(held[0].exception(), PublishRejectedError)
    with pytest.raises(PublishRejectedError):
        held[1].result()
    del held[:2]  # retrieved, then dropped: never reported
    assert ledger.take() == (0, [])
    del held[0]  # dropped unretrieved
    count, errors = ledger.take()
    assert count == 1 and [str(e) for e in errors] == ["#2"]
    assert ledger.take() == (0, [])  # reported once
    assert ledger.live == 1
    held.clear()
    assert ledger.take()[0] == 1 and ledger.live == 0


def test_a_done_callback_that_retrieves_counts_as_observed() -> None:
    ledger = FailureLedger()
    seen: list[BaseException | None] = []
    futures: list[PublishFuture[object]] = [PublishFuture(), PublishFuture()]
    futures[0].add_done_callback(lambda f: seen.append(f.exception()))
    futures[1].add_done_callback(lambda f: None)  # looks at nothing
    settle([(f, None, PublishRejectedError("x")) for f in futures], ledger)
    assert len(seen) == 1
    futures.clear()
    assert ledger.take()[0] == 1


def test_reference_cycles_are_collected_before_counting() -> None:
    ledger = FailureLedger()
    future = _failed(ledger, 1)[0]
    future._result = future  # a cycle: only the garbage collector frees it
    gc.disable()
    try:
        del future
        assert ledger.take()[0] == 1
    finally:
        gc.enable()


def test_concurrent_retrievals_and_takes_never_go_negative() -> None:
    """Many threads retrieve the same failures at once while another takes in a loop."""
    ledger = FailureLedger()
    rounds, per_round = 50, 40
    taken: list[int] = []
    stop = threading.Event()

    def taker() -> None:
        while not stop.is_set():
            count, _ = ledger.take()
            taken.append(count)

    def retrieve(futures: list[PublishFuture[object]]) -> None:
        for future in futures:
            assert isinstance(future.exception(), PublishRejectedError)

    thread = threading.Thread(target=taker, name="test-taker")
    thread.start()
    dropped = 0
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(rounds):
            futures = _failed(ledger, per_round)
            looked_at = futures[: per_round // 2]
            list(pool.map(retrieve, [looked_at] * 4))  # four threads look at each
            del futures[: per_round // 2]
            dropped += len(futures)
            futures.clear()
            looked_at.clear()
    stop.set()
    thread.join(10)
    taken.append(ledger.take()[0])
    assert min(taken) >= 0
    assert sum(taken) == dropped
    assert ledger.live == 0
