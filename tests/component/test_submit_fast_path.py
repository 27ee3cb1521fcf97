"""The C fast path of ``publish_async`` and ``publish()`` (``submit_plain``) against the
fake broker.

It enters a publish and queues its request without taking the publisher's send lock or
the stream's lock, having seen both free while it holds the GIL. These tests check that
it leaves exactly the state the Python path leaves, that it steps aside (to the Python
path, which waits) whenever either lock is held, and that messages keep their order
when both paths interleave.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import AckPolicy, Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing import publisher as publisher_module
from liftbridge_sync._publishing.futures import PublishFuture
from liftbridge_sync._wire import speedups
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(
    speedups.submit_plain is None, reason="C speedups not built or disabled"
)


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=4)) as server:
        yield server


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """What each ``submit_plain`` call returned: future, todo (a tuple), entry or none."""
    real = publisher_module._submit_plain
    assert real is not None
    seen: collections.Counter[str] = collections.Counter()

    def spy(*args: Any) -> Any:
        result = real(*args)
        if isinstance(result, PublishFuture):
            seen["future"] += 1
        elif isinstance(result, tuple):
            seen["todo"] += 1
        else:
            seen["entry" if result is not None else "none"] += 1
        return result

    monkeypatch.setattr(publisher_module, "_submit_plain", spy)
    return seen


def _client(fake: FakeBroker, **options: Any) -> Client:
    return Client([fake.address], retry=FAST_RETRY, publish_transport="h2", **options)


def _state(client: Client) -> dict[str, Any]:
    publisher = client._publisher
    assert publisher is not None
    stream = publisher._table.live
    return {
        "seq": publisher._table.last_seq,
        "pending": dict(publisher._table.entries),
        "queued_bytes": stream.outbound.queued_bytes,  # type: ignore[union-attr]
        "asked": stream.outbound.asked,  # type: ignore[union-attr]
        "queue": list(stream.outbound.frames),  # type: ignore[union-attr]
    }


@pytest.mark.parametrize("path", ["c", "python"])
def test_both_paths_leave_the_same_state(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "python":
        monkeypatch.setattr(publisher_module, "_submit_plain", None)
    client = _client(fake, ack_timeout=7.5)
    try:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        assert stream is not None
        io_lock: threading.Lock = stream._io_lock  # type: ignore[attr-defined]
        with io_lock:  # the I/O thread stops between turns: nothing is taken or read
            before = _state(client)
            started = publisher._table.clock()
            future = client.publish_async("s", b"value", partition=2, ack_policy=AckPolicy.ALL)
            finished = publisher._table.clock()
            after = _state(client)
            (cid,) = set(after["pending"]) - set(before["pending"])
            entry = after["pending"][cid]
            assert entry.future is future
            assert entry.seq == after["seq"] == before["seq"] + 1
            assert (entry.partition, entry.wants_ack, entry.timeout) == (2, True, 7.5)
            assert started + 7.5 <= entry.deadline <= finished + 7.5
            assert entry in publisher._table.core.expiry[7.5]
            assert after["queue"] == [*before["queue"], entry.framed]
            assert after["queued_bytes"] == before["queued_bytes"] + len(entry.framed)
            assert after["asked"] == before["asked"] + 1
            request = api_pb2.PublishRequest.FromString(entry.framed[5:])
            assert (request.stream, request.partition, request.value) == ("s", 2, b"value")
            assert (request.correlationId, request.ackPolicy) == (cid, api_pb2.ALL)
            assert not future.done()
        ack = future.result(timeout=10)
        assert ack is not None and (ack.partition, ack.correlation_id) == (2, cid)
    finally:
        client.close()


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("combining", [0, 2])
def test_a_publish_caller_leaves_the_same_state_on_both_paths(
    fake: FakeBroker,
    monkeypatch: pytest.MonkeyPatch,
    outcomes: collections.Counter[str],
    path: str,
    combining: int,
) -> None:
    # publish() (direct): acks are not gathered past the caller's request, and the
    # caller writes it itself unless callers woken by a hand-over are combining (then
    # it leaves it to the last of them) or the I/O thread is busy (then it wakes it).
    if path == "python":
        monkeypatch.setattr(publisher_module, "_submit_plain", None)
    client = _client(fake)
    try:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None
        stream: Any = publisher._table.live
        out = stream.outbound
        result: list[Any] = []
        caller = threading.Thread(
            target=lambda: result.append(client.publish("s", b"direct")), name="test-caller"
        )
        fast_before = outcomes["future"] + outcomes["todo"]
        with stream._io_lock:  # nobody can write: the caller's request stays queued
            with out:
                out.combining = combining
                # As if an earlier caller of the same hand-over had left its request:
                # the I/O thread, woken meanwhile, stops waiting for the rest of them
                # (combining = 0) only when none has.
                out.deferred = combining > 0
                asked = out.asked
            caller.start()
            wait_until(lambda: out.asked == asked + 1, what="the caller's request queued")
            with out:
                assert out.direct_mark == asked + 1
                assert out.combining == max(combining - 1, 0)
                assert out.deferred is (combining > 0)
                assert len(out.frames) == 1
                # Not combining, it found the I/O lock held and woke the I/O thread.
                assert out.signalled is (combining == 0)
            if path == "c":
                assert outcomes["future"] + outcomes["todo"] == fast_before + 1
        stream.nudge(False)  # the I/O thread, asleep since before the test combined
        caller.join(timeout=10)
        assert not caller.is_alive()
        assert result[0] is not None and result[0].offset == 1
        assert [r.value for r in fake.received] == [b"warm-up", b"direct"]
    finally:
        client.close()


@pytest.mark.parametrize("lock_name", ["send lock", "stream lock"])
def test_a_held_lock_sends_the_publish_down_the_waiting_path(
    fake: FakeBroker, outcomes: collections.Counter[str], lock_name: str
) -> None:
    client = _client(fake)
    try:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None
        stream = publisher._table.live
        lock: contextlib.AbstractContextManager[Any] = (
            publisher._table.core  # type: ignore[assignment]
            if lock_name == "send lock"
            else stream.outbound  # type: ignore[union-attr]
        )
        result: list[Any] = []
        publishing = threading.Thread(
            target=lambda: result.append(client.publish_async("s", b"behind the lock")),
            name="test-publisher",
        )
        stepped_aside = outcomes["entry"]  # the warm-up's, before the stream was open
        with lock:
            publishing.start()
            wait_until(
                lambda: outcomes["entry"] == stepped_aside + 1, what="the fast path to step aside"
            )
            publishing.join(timeout=0.2)
            assert publishing.is_alive(), "the publish went past a held lock"
            assert stream.outbound.frames == []  # type: ignore[union-attr]
            if lock_name == "send lock":
                assert len(publisher._table.entries) == 0
        publishing.join(timeout=10)
        assert not publishing.is_alive()
        ack = result[0].result(timeout=10)
        assert ack is not None and ack.offset == 1
        assert [r.value for r in fake.received] == [b"warm-up", b"behind the lock"]
    finally:
        client.close()


def test_interleaved_paths_keep_each_threads_order(
    fake: FakeBroker, outcomes: collections.Counter[str]
) -> None:
    # Publishing threads race a thread that keeps taking the send lock, so some
    # publishes take the fast path and others the locked Python path.
    threads, per_thread = 4, 500
    client = _client(fake, max_in_flight=300)
    stop = threading.Event()
    try:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None

        def interfere() -> None:
            while not stop.wait(0.0002):
                with publisher._table.core:  # held while the others run
                    stop.wait(0.0001)

        def publish(t: int) -> Callable[[], None]:
            def run() -> None:
                for i in range(per_thread):
                    client.publish_async("s", b"%d:%d" % (t, i), timeout=30)

            return run

        interferer = threading.Thread(target=interfere, name="test-interferer")
        workers = [threading.Thread(target=publish(t), name=f"test-{t}") for t in range(threads)]
        interferer.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        stop.set()
        interferer.join(timeout=10)
        client.flush(timeout=30)
    finally:
        stop.set()
        client.close()
    assert outcomes["future"] + outcomes["todo"] > 0 and outcomes["entry"] > 0
    seen: dict[int, list[int]] = collections.defaultdict(list)
    for request in fake.received[1:]:
        t, i = request.value.split(b":")
        seen[int(t)].append(int(i))
    assert {t: seen[t] for t in range(threads)} == {
        t: list(range(per_thread)) for t in range(threads)
    }


def test_own_correlation_ids_are_kept_as_plain_str(fake: FakeBroker) -> None:
    # The pending table's keys must compare without running Python code (the fast path
    # looks them up holding no lock): a str subclass's id is entered as a plain str.
    class Id(str):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = str.__hash__

    fake.publish_script = lambda request, n: "drop" if request.correlationId == "mine" else "ack"
    client = _client(fake)
    try:
        client.publish("s", b"warm-up")
        publisher = client._publisher
        assert publisher is not None
        kept = client.publish_async("s", b"v", correlation_id=Id("mine"), timeout=30)
        assert [type(key) for key in publisher._table.entries] == [str]
        after = client.publish_async("s", b"fast path, with that id's entry in the table")
        assert after.result(timeout=10) is not None and not kept.done()
    finally:
        client.close(timeout=0.1)
    assert isinstance(kept.exception(timeout=10), lb.ClientClosedError)
