"""flush() in a client shared by threads, against the real server.

A failure counts as unobserved only once its future is gone without anybody having
retrieved it: a thread holding its futures is never blamed in another thread's flush,
and fire-and-forget failures are still reported by the next flush.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client

from .conftest import StreamFactory, unique

pytestmark = pytest.mark.integration

THREADS = 50
PER_THREAD = 40


def test_threads_checking_their_own_futures_are_never_blamed(liftbridge_address: str) -> None:
    """50 threads publish to a stream deleted mid-run and check their own futures while
    another thread flushes in a loop: no flush raises, and nothing is left over."""
    name = unique("shared")
    with Client(liftbridge_address, ack_timeout=10.0) as client:
        client.create_stream(name, name)
        published = threading.Semaphore(0)
        deleted = threading.Event()
        stop = threading.Event()
        false_raises: list[lb.UnobservedPublishFailuresError] = []
        flushes_after_delete = [0]

        def flusher() -> None:
            while not stop.is_set():
                try:
                    client.flush(30)
                except lb.UnobservedPublishFailuresError as exc:
                    false_raises.append(exc)
                if deleted.is_set():
                    flushes_after_delete[0] += 1

        def worker(index: int) -> tuple[int, int]:
            futures: list[concurrent.futures.Future[lb.Ack | None]] = []
            for i in range(PER_THREAD):
                if i == PER_THREAD // 2:  # half stored before the deletion, half after
                    futures[-1].exception(timeout=30)  # acks come in order: all stored
                    published.release()
                    assert deleted.wait(30)
                try:
                    futures.append(client.publish_async(name, b"%d-%d" % (index, i)))
                except lb.LiftbridgeError:
                    break  # refused up front once the stream is gone: also fine
            # Hold the failed futures across several flushes of the other thread
            # before looking at them: those flushes must not report them.
            deadline = time.monotonic() + 30
            while flushes_after_delete[0] < 3 and time.monotonic() < deadline:
                deleted.wait(0.01)
            acked = failed = 0
            for future in futures:
                error = future.exception(timeout=30)
                if error is None:
                    acked += 1
                else:
                    assert isinstance(error, lb.LiftbridgeError), error
                    failed += 1
            return acked, failed

        flushing = threading.Thread(target=flusher, name="test-flusher", daemon=True)
        flushing.start()
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            results = [pool.submit(worker, n) for n in range(THREADS)]
            for _ in range(THREADS):  # every thread is under way
                assert published.acquire(timeout=30)
            client.delete_stream(name)
            deleted.set()
            outcomes = [r.result(timeout=120) for r in results]
        stop.set()
        flushing.join(60)
        assert not flushing.is_alive()
        acked = sum(a for a, _ in outcomes)
        failed = sum(f for _, f in outcomes)
        assert acked > 0 and failed > 0, (acked, failed)  # the deletion hit mid-run
        assert flushes_after_delete[0] >= 3
        assert false_raises == []
        client.flush(30)  # every failure was retrieved by its own thread


def test_fire_and_forget_failures_are_reported_by_the_next_flush(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    name = new_stream()
    liftbridge_client.set_stream_readonly(name)
    held = [liftbridge_client.publish_async(name, b"held") for _ in range(5)]
    for i in range(300):
        liftbridge_client.publish_async(name, b"dropped %d" % i)  # future dropped
    with pytest.raises(lb.UnobservedPublishFailuresError) as raised:
        liftbridge_client.flush(30)
    # The 300 dropped futures are reported; the 5 still held may yet be looked at.
    assert raised.value.count == 300
    assert all(isinstance(e, lb.ReadonlyPartitionError) for e in raised.value.errors)
    liftbridge_client.flush(30)  # reported once
    # A held failure dropped without a look is reported by the flush after that.
    del held[:2]
    with pytest.raises(lb.UnobservedPublishFailuresError) as raised:
        liftbridge_client.flush(30)
    assert raised.value.count == 2
    assert all(isinstance(f.exception(timeout=30), lb.ReadonlyPartitionError) for f in held)
    held.clear()
    liftbridge_client.flush(30)  # the retrieved ones are never reported
