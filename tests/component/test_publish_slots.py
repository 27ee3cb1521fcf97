"""A ``publish()`` caller waiting for a free slot (``max_in_flight``) is served before
the ``publish_async`` and ``publish_batch`` calls waiting too: it gets the next slot
that frees, on both paths (the C ``submit_plain`` and the Python one).

The fake broker answers only as the test lets it (a permit per ack), so the test knows
who waited first when slots free; the server's speed has no part in the outcome.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Ack, Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing import publisher as publisher_module
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.stacks import thread_in
from tests.waiting import wait_until

#: The window the flood keeps full.
_WINDOW = 4


@pytest.fixture(params=["c", "python"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both publish paths: the C fast path (when built) and the Python one."""
    if request.param == "python":
        monkeypatch.setattr(publisher_module, "_submit_plain", None)
    elif publisher_module._submit_plain is None:
        pytest.skip("C speedups not built or disabled")
    return str(request.param)


class _Permits:
    """The fake broker's answers, one per permit the test gives."""

    def __init__(self) -> None:
        self._permits = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._given = self._taken = 0
        self.stop = threading.Event()

    def script(self, request: api_pb2.PublishRequest, n: int) -> object:
        while not self._permits.acquire(timeout=0.05):
            if self.stop.is_set():
                return "ack"
        with self._lock:
            self._taken += 1
        return "ack"

    def give(self, count: int) -> None:
        with self._lock:
            self._given += count
        self._permits.release(count)

    def used_up(self) -> bool:
        """Whether every permit given was taken (the broker sends no more acks)."""
        with self._lock:
            return self._taken == self._given

    @property
    def taken(self) -> int:
        """How many acks the broker has sent or is sending."""
        with self._lock:
            return self._taken


@pytest.fixture
def permits() -> Iterator[tuple[FakeBroker, _Permits]]:
    gate = _Permits()
    with FakeBroker(cluster=FakeCluster(leader="fake", partitions=1)) as fake:
        fake.publish_script = gate.script
        try:
            yield fake, gate
        finally:
            gate.stop.set()


@contextlib.contextmanager
def _client(permits: tuple[FakeBroker, _Permits], **options: Any) -> Iterator[Client]:
    """A client of the fake broker (``FAST_RETRY``, no re-sends, and ``options``), closed
    on the way out once the broker answers all it holds back, so that close() has no ack
    to wait for. The broker withholds acks on purpose, for as long as a loaded machine
    takes between a test's steps: a "silent" partition's re-sends would add publishes
    the tests do not count on."""
    fake, gate = permits
    client = Client([fake.address], retry=FAST_RETRY, resend_after=None, **options)
    try:
        yield client
    finally:
        gate.stop.set()
        client.close(timeout=5)


def _waiting_publish(client: Client, name: str) -> tuple[threading.Thread, list[Ack | None]]:
    """A thread calling ``publish("s", b"sync")``, once it waits in line for a slot; the
    list its ack goes to."""
    acks: list[Ack | None] = []
    caller = threading.Thread(
        target=lambda: acks.append(client.publish("s", b"sync", timeout=60)),
        name=name,
        daemon=True,
    )
    caller.start()
    wait_until(lambda: thread_in(caller, "wait_turn"), what="the caller waiting in line")
    return caller, acks


@pytest.mark.parametrize("transport", ["grpc", "h2"])
def test_a_publish_waiting_for_a_slot_goes_before_a_waiting_publish_async_flood(
    permits: tuple[FakeBroker, _Permits], path: str, transport: str
) -> None:
    fake, gate = permits
    stop = threading.Event()
    flood: list[Future[Ack | None]] = []
    failures: list[BaseException] = []

    def flooding() -> None:
        try:
            while not stop.is_set():
                # Each value is the call's index in ``flood``.
                flood.append(client.publish_async("s", b"%d" % len(flood), timeout=60))
        except lb.LiftbridgeError as exc:
            failures.append(exc)

    with _client(
        permits, publish_transport=transport, max_in_flight=_WINDOW, enqueue_timeout=60
    ) as client:
        flooder = threading.Thread(target=flooding, name="test-flood", daemon=True)
        try:
            gate.give(1)
            client.publish("s", b"warm-up", timeout=60)
            publisher: Any = client._publisher
            flooder.start()
            overtaken: list[int] = []
            for round_ in range(20):
                # The flood has the window full and waits for a slot, and no ack is on its
                # way (the broker has used up its permits, and the client settled their
                # acks: a slot an ack frees after the caller comes would go to whoever
                # looks first, and the caller would not wait in line)...
                settled = 1 + round_  # the warm-up's and the callers' acks

                def window_full_and_quiet(settled: int = settled) -> bool:
                    futures = list(flood)
                    unsettled = sum(1 for f in futures if not f.done())
                    return (
                        gate.used_up()
                        and gate.taken == settled + len(futures) - unsettled
                        and unsettled == _WINDOW
                        and len(publisher._table) == _WINDOW
                        and thread_in(flooder, "wait_for_space")
                    )

                wait_until(window_full_and_quiet, what="the flood waiting for a slot")
                # ... and a publish() caller comes to wait behind it.
                before = len(flood)
                caller, acks = _waiting_publish(client, f"test-publish-{round_}")
                # The whole window is acknowledged at once (and what follows, to let the
                # caller's own ack through).
                gate.give(4 * _WINDOW)
                caller.join(30)
                assert not caller.is_alive() and acks[0] is not None
                # The flood's calls the broker received before the caller's publish, of those
                # made once the caller waited (the first of them was waiting already).
                values = [r.value for r in fake.received]
                ahead = values[: len(values) - values[::-1].index(b"sync") - 1]
                overtaken.append(sum(1 for v in ahead if v.isdigit() and int(v) >= before))
            # The flood took no slot before the caller, not even the one its waiting call
            # had waited for since before the caller came.
            assert overtaken == [0] * 20, overtaken
        finally:
            stop.set()
            gate.stop.set()
            flooder.join(30)
    assert not flooder.is_alive() and not failures


def test_a_publish_waiting_for_a_slot_goes_before_the_rest_of_a_large_batch(
    permits: tuple[FakeBroker, _Permits],
) -> None:
    fake, gate = permits
    with _client(permits, max_in_flight=_WINDOW, enqueue_timeout=60) as client:
        outcomes: list[object] = []
        batch = threading.Thread(
            target=lambda: outcomes.extend(
                client.publish_batch("s", [b"b%d" % i for i in range(10 * _WINDOW)], timeout=60)
            ),
            name="test-batch",
            daemon=True,
        )
        gate.give(1)
        client.publish("s", b"warm-up", timeout=60)
        publisher: Any = client._publisher
        batch.start()
        # The batch filled the window and waits for more slots...
        wait_until(
            lambda: len(publisher._table) == _WINDOW and thread_in(batch, "wait_for_space"),
            what="the batch waiting for a slot",
        )
        # ... and so does a publish() caller, behind it.
        caller, _ = _waiting_publish(client, "test-publish")
        gate.give(20 * _WINDOW)
        caller.join(30)
        batch.join(30)
        assert not caller.is_alive() and not batch.is_alive()
        values = [r.value for r in fake.received]
        # The batch's first window, then the caller's publish, then the rest of it.
        assert values.index(b"sync") - values.index(b"b0") == _WINDOW, values
        assert len(outcomes) == 10 * _WINDOW and all(isinstance(o, Ack) for o in outcomes)


def test_a_publish_giving_up_in_line_leaves_it_empty_for_those_that_come_later(
    permits: tuple[FakeBroker, _Permits],
) -> None:
    fake, gate = permits
    with _client(permits, max_in_flight=2, enqueue_timeout=0.3) as client:
        gate.give(1)
        client.publish("s", b"warm-up", timeout=60)
        held = [client.publish_async("s", b"held%d" % i, timeout=60) for i in range(2)]
        publisher: Any = client._publisher
        # No slot frees within the enqueue timeout: the caller gives up, in line.
        with pytest.raises(lb.PublishQueueFullError):
            client.publish("s", b"gives-up", timeout=60)
        # Its place is gone with it: nothing is kept from later publishes.
        assert publisher._table.core.in_line == 0
        gate.give(10)
        assert [f.result(timeout=10).offset for f in held] == [1, 2]  # type: ignore[union-attr]
        late = client.publish_async("s", b"late", timeout=60)
        assert late.result(timeout=10).offset == 3  # type: ignore[union-attr]
        assert client.publish("s", b"after", timeout=60).offset == 4  # type: ignore[union-attr]
        assert b"gives-up" not in [r.value for r in fake.received]


def test_a_batch_that_gets_no_slot_in_time_raises_queue_full_having_sent_nothing(
    permits: tuple[FakeBroker, _Permits],
) -> None:
    fake, gate = permits
    with _client(permits, max_in_flight=2, enqueue_timeout=0.3) as client:
        held = [client.publish_async("s", b"held%d" % i, timeout=60) for i in range(2)]
        # Plain values (in chunks) and keyed items (one by one) alike.
        for items in ([b"a", b"b", b"c"], [(b"k", b"a"), (b"k", b"b")]):
            with pytest.raises(lb.PublishQueueFullError):
                client.publish_batch("s", items)  # type: ignore[arg-type]
        gate.give(2)
        assert [f.result(timeout=10).offset for f in held] == [0, 1]  # type: ignore[union-attr]
        assert [r.value for r in fake.received] == [b"held0", b"held1"]
