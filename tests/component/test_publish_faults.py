"""Publisher behaviour under faults the real server cannot produce on demand."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import AckPolicy, Client
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY
from tests.waiting import wait_until


def _fake_broker() -> FakeBroker:
    """A fake broker whose metadata lists every stream asked for, with four partitions."""
    return FakeBroker(cluster=FakeCluster(leader="fake", partitions=4))


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with _fake_broker() as server:
        yield server


@pytest.fixture(params=["grpc", "h2"])
def transport(request: pytest.FixtureRequest) -> str:
    """Every publisher behaviour below holds for both PublishAsync transports."""
    return str(request.param)


def _client(fake: FakeBroker, transport: str = "grpc", **options: object) -> Client:
    return Client(
        [fake.address],
        retry=FAST_RETRY,
        publish_transport=transport,
        **options,  # type: ignore[arg-type]
    )


def test_an_id_awaiting_an_ack_fails_the_new_publish_unsent(
    fake: FakeBroker, transport: str
) -> None:
    # Acks are matched by id: a second publish under the id of one still waiting would
    # take its ack. It is failed (not raised), and never reaches the broker.
    fake.publish_script = lambda req, n: "drop" if req.value == b"first" else "ack"
    with _client(fake, transport) as client:
        first = client.publish_async("s", b"first", correlation_id="dup", timeout=30)
        again = client.publish_async("s", b"again", correlation_id="dup")
        with pytest.raises(lb.ConfigurationError, match="correlation id 'dup' in use"):
            again.result(timeout=5)
        assert client.publish("s", b"after").offset == 0  # type: ignore[union-attr]
        assert not first.done()
        assert [r.value for r in fake.received] == [b"first", b"after"]
        client.close(timeout=0)


def test_lost_ack_fails_only_that_future_with_ack_timeout(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda req, n: "drop" if req.value == b"lost" else "ack"
    with _client(fake, transport) as client:
        started = time.monotonic()
        lost = client.publish_async("s", b"lost", partition=1, timeout=0.3, correlation_id="c-7")
        kept = client.publish_async("s", b"kept", timeout=5)
        assert kept.result(timeout=5).offset == 0  # type: ignore[union-attr]
        # The error says which publish it was, for logs of many threads publishing.
        with pytest.raises(
            lb.AckTimeoutError, match=r"\(stream 's', partition 1, correlation id c-7\)"
        ):
            lost.result(timeout=5)
        assert 0.25 <= time.monotonic() - started < 3


def test_unavailable_mid_stream_reopens_and_resends_in_order(
    fake: FakeBroker, transport: str
) -> None:
    aborted = threading.Event()

    def script(req: api_pb2.PublishRequest, n: int) -> object:
        if req.value == b"m5" and not aborted.is_set():
            aborted.set()
            return "abort"
        return "ack"

    fake.publish_script = script
    with _client(fake, transport) as client:
        futures = [client.publish_async("s", b"m%d" % i, timeout=10) for i in range(10)]
        acks = [f.result(timeout=10) for f in futures]
    assert all(ack is not None for ack in acks)
    assert fake.streams_opened == 2
    values = [r.value for r in fake.received]
    # m5 went out on the first stream, was never acked, and was sent again first on the
    # new stream; everything after it follows in the original order.
    resent = values[values.index(b"m5") + 1 :]
    tail = [v for v in resent if v != b"m5"]
    assert tail == sorted(set(tail), key=lambda v: int(v[1:]))
    assert b"m5" in resent
    assert {v for v in values} == {b"m%d" % i for i in range(10)}


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (api_pb2.PublishAsyncError.NOT_FOUND, lb.NotFoundError),
        (api_pb2.PublishAsyncError.READONLY, lb.ReadonlyPartitionError),
        (api_pb2.PublishAsyncError.INCORRECT_OFFSET, lb.IncorrectOffsetError),
        (api_pb2.PublishAsyncError.ENCRYPTION_FAILED, lb.PublishRejectedError),
        (api_pb2.PublishAsyncError.BAD_REQUEST, lb.PublishRejectedError),
        (api_pb2.PublishAsyncError.UNKNOWN, lb.PublishRejectedError),
    ],
)
def test_async_errors_are_typed(fake: FakeBroker, code: int, error: type, transport: str) -> None:
    fake.publish_script = lambda req, n: code
    with _client(fake, transport) as client:
        with pytest.raises(error) as info:
            client.publish("s", b"x")
    assert isinstance(info.value, lb.LiftbridgeError)
    assert info.value.code == api_pb2.PublishAsyncError.Code.Name(code)


def test_error_followed_by_ack_for_same_id_is_handled_once(
    fake: FakeBroker, transport: str
) -> None:
    fake.publish_script = lambda req, n: (
        "error_then_ack",
        api_pb2.PublishAsyncError.PERMISSION_DENIED,
    )
    with _client(fake, transport) as client:
        first = client.publish_async("s", b"a")
        with pytest.raises(lb.PermissionDeniedError):
            first.result(timeout=5)
        # The stray ack that follows is ignored; the next publish gets its own answer.
        fake.publish_script = lambda req, n: "ack"
        assert client.publish("s", b"b") is not None


def test_ack_policy_none_resolves_once_sent(fake: FakeBroker, transport: str) -> None:
    with _client(fake, transport) as client:
        assert client.publish("s", b"fire", ack_policy=AckPolicy.NONE, timeout=0.5) is None
        client.flush(5)
    assert [r.value for r in fake.received] == [b"fire"]


def test_a_refused_ack_policy_none_publish_is_logged_not_dropped(
    fake: FakeBroker, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    # An AckPolicy.NONE publish resolves once written; the broker may still refuse it
    # (a stream with optimistic concurrency refuses every one). The refusal matched
    # nothing and was dropped without a word: the message was lost silently.
    refused = api_pb2.PublishAsyncError.INCORRECT_OFFSET
    written = threading.Event()

    def script(request: api_pb2.PublishRequest, n: int) -> object:
        if n == 1:
            # Refuse only once the client has counted the publish written: a refusal
            # arriving first fails its future instead (typed, so nothing is lost either).
            assert written.wait(10)
            return refused
        return "ack"

    fake.publish_script = script
    with caplog.at_level("WARNING", logger="liftbridge_sync.publisher"):
        with _client(fake, transport) as client:
            assert client.publish("s", b"lost", ack_policy=AckPolicy.NONE) is None
            written.set()
            # Answers come in order: once this ack is back, the refusal was handled.
            assert client.publish("s", b"kept") is not None
    (record,) = [r for r in caplog.records if "nothing waits for" in r.getMessage()]
    assert "refused 1 publish(es)" in record.getMessage()
    assert fake.received[0].correlationId in record.getMessage()
    assert "scripted" in record.getMessage()  # the broker's own words


def test_backpressure_raises_queue_full(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda req, n: "drop"
    with _client(fake, transport, max_in_flight=2, enqueue_timeout=0.2) as client:
        client.publish_async("s", b"1", timeout=30)
        client.publish_async("s", b"2", timeout=30)
        started = time.monotonic()
        with pytest.raises(lb.PublishQueueFullError):
            client.publish_async("s", b"3")
        assert time.monotonic() - started >= 0.15
        client.close(timeout=0.1)


def test_close_fails_what_is_still_pending(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda req, n: "drop"
    client = _client(fake, transport)
    future = client.publish_async("s", b"never-acked", timeout=60)
    client.close(timeout=0.2)
    with pytest.raises(lb.ClientClosedError):
        future.result(timeout=1)
    with pytest.raises(lb.ClientClosedError):
        client.publish_async("s", b"late")


def _blocked_publishes(client: Client, count: int) -> tuple[list[threading.Thread], list[object]]:
    """``count`` threads blocked in ``publish()``, each on its own gate (``wait_gated``);
    what each call returned or raised goes into the list."""
    outcomes: list[object] = []

    def publish(index: int) -> None:
        try:
            outcomes.append(client.publish("s", b"blocked%d" % index))
        except lb.LiftbridgeError as exc:
            outcomes.append(exc)

    threads = [
        threading.Thread(target=publish, args=(i,), name=f"test-publish-{i}") for i in range(count)
    ]
    for thread in threads:
        thread.start()
    publisher = client._publisher
    wait_until(
        lambda: (
            publisher is not None
            and len(publisher._table.entries) == count
            and all(e.future._gate is not None for e in list(publisher._table.entries.values()))
        ),
        what="every publish to block on its gate",
    )
    return threads, outcomes


def test_close_from_another_thread_wakes_publish_callers(fake: FakeBroker, transport: str) -> None:
    fake.publish_script = lambda req, n: "drop"
    client = _client(fake, transport, ack_timeout=60.0)
    threads, outcomes = _blocked_publishes(client, 4)
    started = time.monotonic()
    client.close(timeout=0.2)
    for thread in threads:
        thread.join(5.0)
    assert not any(thread.is_alive() for thread in threads)
    assert time.monotonic() - started < 5.0
    assert len(outcomes) == 4
    assert all(isinstance(outcome, lb.ClientClosedError) for outcome in outcomes)


def test_publish_callers_fail_at_their_ack_timeout(fake: FakeBroker, transport: str) -> None:
    # One ack comes late (after every caller blocked), the others never.
    fake.publish_script = lambda req, n: ("delay", 1.0) if req.value == b"blocked1" else "drop"
    with _client(fake, transport, ack_timeout=2.0) as client:
        threads, outcomes = _blocked_publishes(client, 3)
        for thread in threads:
            thread.join(10.0)
        assert not any(thread.is_alive() for thread in threads)
    assert sum(isinstance(outcome, lb.Ack) for outcome in outcomes) == 1
    assert sum(isinstance(outcome, lb.AckTimeoutError) for outcome in outcomes) == 2


def test_done_callbacks_may_publish_flush_and_close_without_deadlock(
    fake: FakeBroker, transport: str
) -> None:
    client = _client(fake, transport, max_in_flight=1)
    results: list[object] = []
    finished = threading.Event()

    def callback(future: concurrent.futures.Future[lb.Ack | None]) -> None:
        # max_in_flight=1 and the slot of `future` is released just before this runs;
        # publish() here must keep the publisher thread working while it waits.
        results.append(client.publish("s", b"from-callback"))
        client.flush(5)
        client.close()
        finished.set()

    client.publish_async("s", b"first").add_done_callback(callback)
    assert finished.wait(10), "done-callback deadlocked"
    assert results and results[0] is not None
    assert client.closed


def test_flush_waits_for_everything_and_times_out(fake: FakeBroker, transport: str) -> None:
    with _client(fake, transport) as client:
        futures = [client.publish_async("s", b"%d" % i) for i in range(50)]
        client.flush(5)
        assert all(f.done() for f in futures)
        fake.publish_script = lambda req, n: "drop"
        client.publish_async("s", b"stuck", timeout=30)
        with pytest.raises(TimeoutError):
            client.flush(0.2)
        client.close(timeout=0.1)


def test_flush_reports_failures_observed_in_callbacks_only_once(
    fake: FakeBroker, transport: str
) -> None:
    fake.publish_script = lambda req, n: "drop" if req.value.startswith(b"lost") else "ack"
    inspected: list[BaseException | None] = []
    with _client(fake, transport) as client:
        watched = client.publish_async("s", b"lost-watched", timeout=0.2)
        watched.add_done_callback(lambda f: inspected.append(f.exception()))
        client.publish_async("s", b"lost-ignored", timeout=0.2)
        client.publish_async("s", b"kept", timeout=5)
        with pytest.raises(lb.UnobservedPublishFailuresError) as raised:
            client.flush(5)
        assert raised.value.count == 1
        assert isinstance(raised.value.errors[0], lb.AckTimeoutError)
        assert isinstance(inspected[0], lb.AckTimeoutError)
        client.flush(5)


def test_unreachable_seed_is_skipped(fake: FakeBroker) -> None:
    # The first seed refuses connections: UNAVAILABLE is retried on the next broker.
    with Client(["127.0.0.1:1", fake.address], retry=FAST_RETRY) as client:
        assert "fake" in [b.id for b in client.fetch_metadata().brokers]


def test_not_leader_refreshes_and_retries(fake: FakeBroker) -> None:
    fake.not_leader_times = 2
    with _client(fake) as client:
        assert client.fetch_partition_metadata("s", 1).id == 1
    assert fake.partition_metadata_calls == 3


def test_publishing_while_closing_never_leaves_a_future_pending(
    fake: FakeBroker, transport: str
) -> None:
    client = _client(fake, transport, max_in_flight=64)
    futures: list[concurrent.futures.Future[lb.Ack | None]] = []
    refused = [0]
    started = threading.Barrier(5)
    filling = threading.Event()

    def produce() -> None:
        started.wait()
        for i in range(2000):
            try:
                futures.append(client.publish_async("s", b"%d" % i, timeout=5))
                if len(futures) >= 200:
                    filling.set()
            except lb.ClientClosedError:
                refused[0] += 1
                return

    producers = [threading.Thread(target=produce) for _ in range(4)]
    for thread in producers:
        thread.start()
    started.wait()
    assert filling.wait(10)  # the pipeline is busy: close under it
    client.close(timeout=0.5)
    for thread in producers:
        thread.join(10)
    done, pending = concurrent.futures.wait(list(futures), timeout=10)
    assert not pending, f"{len(pending)} futures never resolved"
    for future in done:
        error = future.exception()
        assert error is None or isinstance(error, lb.ClientClosedError), error
    assert refused[0] == 4  # every producer was eventually refused


@pytest.mark.parametrize("call", ["publish", "publish_batch"])
def test_deeply_nested_callbacks_fail_typed_and_never_falsely(
    fake: FakeBroker, transport: str, call: str
) -> None:
    """Each level publishes synchronously, then chains the next level and flushes, so
    every level nests one deeper on the publisher thread. Past the limit, publish (and
    publish_batch, which sent its messages before it raised) raises a typed error
    *before* sending: no message is reported failed that the broker got."""
    outcomes: list[tuple[str, int]] = []
    done = threading.Event()

    with _client(fake, transport) as client:

        def level(depth: int) -> Callable[[concurrent.futures.Future[lb.Ack | None]], None]:
            def callback(_: concurrent.futures.Future[lb.Ack | None]) -> None:
                try:
                    if call == "publish":
                        client.publish("s", b"sync-%d" % depth)
                    else:
                        (outcome,) = client.publish_batch("s", [b"sync-%d" % depth])
                        assert isinstance(outcome, lb.Ack), outcome
                    outcomes.append(("ok", depth))
                except lb.PublishError:
                    outcomes.append(("refused", depth))
                    done.set()
                    return
                client.publish_async("s", b"chain-%d" % depth).add_done_callback(level(depth + 1))
                try:
                    client.flush(10)
                except lb.PublishError:
                    pass  # the next level is deeper than the limit: typed, nothing lost

            return callback

        client.publish_async("s", b"start").add_done_callback(level(0))
        assert done.wait(30), "the chain never reached the nesting limit"
        client.flush(10)
    received = [r.value for r in fake.received]
    refused = [d for kind, d in outcomes if kind == "refused"]
    assert refused and all(b"sync-%d" % d not in received for d in refused)
    assert all(received.count(b"sync-%d" % d) == 1 for kind, d in outcomes if kind == "ok")


class _CountedWaits(list):  # type: ignore[type-arg]
    """The publisher's list of blocked threads, counting who went to sleep on it."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[str] = []

    def append(self, item: object) -> None:
        self.sleeps.append(threading.current_thread().name)
        super().append(item)


def test_a_flush_wakes_when_it_is_done_not_at_every_batch_of_acks(
    fake: FakeBroker, transport: str
) -> None:
    # Acks arrive one by one over a third of a second, the last one later still: the
    # flushing thread sleeps through them (each wake-up costs two context switches).
    fake.publish_script = lambda req, n: (
        ("delay", 0.6) if req.value == b"last" else ("delay", 0.015 * n)
    )
    with _client(fake, transport) as client:
        client.publish("s", b"first")  # the publisher is running
        publisher = client._publisher
        assert publisher is not None
        waits = publisher._waiters._waits = _CountedWaits()
        futures = [client.publish_async("s", b"m%d" % i) for i in range(20)]
        futures.append(client.publish_async("s", b"last"))
        client.flush(10)
        assert all(f.done() and f.exception() is None for f in futures)
        # Listed once (a second time only if the first look raced an ack): each time
        # it is listed it sleeps until its gate opens.
        assert 1 <= len(waits.sleeps) <= 2, waits.sleeps


def _voluntary_switches(native_id: int) -> int:
    """How often a thread of this process blocked so far (Linux)."""
    with open(f"/proc/self/task/{native_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


def test_a_finished_batch_wakes_its_own_thread_only(fake: FakeBroker, transport: str) -> None:
    # One thread's flush waits for a slow ack while another thread's batches complete:
    # their completions must not wake the flushing thread (with many threads waiting,
    # each completion would wake them all). A blocked thread that nobody wakes does
    # not run, so its count of voluntary context switches stays put.
    fake.publish_script = lambda req, n: "drop" if req.value == b"never" else "ack"
    with _client(fake, transport) as client:
        client.publish("s", b"first")
        publisher = client._publisher
        assert publisher is not None
        waits = publisher._waiters._waits = _CountedWaits()
        slow = client.publish_async("s", b"never", timeout=3.0)  # fails in 3 s
        slow.add_done_callback(lambda f: f.exception())  # observed: flush() returns
        flusher = threading.Thread(target=client.flush, args=(30,), name="flusher")
        flusher.start()
        wait_until(lambda: "flusher" in waits.sleeps, what="the flush to block")
        assert flusher.native_id is not None
        before = _voluntary_switches(flusher.native_id)
        for n in range(10):
            outcomes = client.publish_batch("s", [b"b%d-%d" % (n, i) for i in range(20)])
            assert all(isinstance(o, lb.Ack) for o in outcomes)
        woken = _voluntary_switches(flusher.native_id) - before
        assert not slow.done()  # the flush was blocked all along
        flusher.join(30)
        assert not flusher.is_alive()
        assert isinstance(slow.exception(), lb.AckTimeoutError)
    # At most the one switch of blocking, if it had not blocked yet when counted.
    assert woken <= 1, f"the flushing thread ran {woken} times while other batches completed"


def test_a_large_batch_keeps_two_chunks_alive_and_returns_errors_once_entered(
    fake: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from liftbridge_sync._publishing.batches import Batches
    from liftbridge_sync._publishing.futures import PublishFuture

    # max_in_flight 256: a batch of 1,000 goes in chunks of 256, each entered while
    # the one before is in flight. The third chunk is refused (as if the enqueue
    # timeout expired): what was entered keeps its acks, the rest gets the error.
    submit_values = Batches.submit_values
    live: list[int] = []
    refused = lb.PublishQueueFullError("no slot freed in time")

    def counting(self: Batches, *args: object, **kwargs: object) -> object:
        live.append(sum(1 for o in gc.get_objects() if type(o) is PublishFuture))
        if len(live) == 3:
            raise refused
        return submit_values(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Batches, "submit_values", counting)
    with _client(fake, "h2", max_in_flight=256) as client:
        outcomes = client.publish_batch("s", [b"%d" % i for i in range(1000)])
    assert len(outcomes) == 1000
    assert [o.offset for o in outcomes[:512]] == list(range(512))  # type: ignore[union-attr]
    assert all(o is refused for o in outcomes[512:])
    # Never two whole chunks' futures besides the new one (beyond those other tests
    # left to the garbage collector before the first chunk): the chunk in flight, and
    # at most a few of the one before, still referenced by the I/O thread that
    # resolved them while it wakes this one (it opens the gate with the GIL released,
    # so this thread may run before that turn ends). A chunk kept alive counts 512.
    assert max(live) - live[0] < 2 * 256
    assert len(fake.received) == 512


def test_a_batch_refused_by_a_check_sends_nothing(fake: FakeBroker) -> None:
    # A batch larger than max_in_flight goes in chunks; a too-large message in a later
    # chunk must still refuse the whole batch before anything is sent, as it does when
    # the batch fits in one chunk, and so must a bad message after plain values.
    values = [b"%d" % i for i in range(600)]
    values[500] = b"x" * 5000
    with _client(
        fake, "h2", max_in_flight=256, grpc_options=(("grpc.max_send_message_length", 2000),)
    ) as client:
        with pytest.raises(lb.MessageTooLargeError):
            client.publish_batch("s", values)
        # Plain values first, then one refused by the per-message path: still nothing.
        with pytest.raises(lb.MessageTooLargeError):
            client.publish_batch("s", [b"a", b"b", (None, b"x" * 5000)])
        with pytest.raises(TypeError):
            client.publish_batch("s", [b"a", b"b", "text"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="tuple of 4"):
            client.publish_batch("s", [b"a", (None, b"b", None, b"?")])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            client.publish_batch("s", [b"a", (None, b"b", {"h": "text"})])  # type: ignore[dict-item]
        assert fake.received == []
        values[500] = b"fits"
        outcomes = client.publish_batch("s", values)
    assert [o.offset for o in outcomes] == list(range(600))  # type: ignore[union-attr]
    assert len(fake.received) == 600
