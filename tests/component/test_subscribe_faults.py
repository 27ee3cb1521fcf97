"""Subscription faults the real server cannot produce on demand, against a scripted fake.

Each ``Subscribe`` call on the fake runs the next script of its broker; the tests check
both what the iterator delivers and what the client asked the server for (resubscribe
offsets), which is where other clients went wrong.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy, StartAt, StopAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync.testing import (
    FakeBroker,
    FakeCluster,
    SubscribeScript,
    fake_message,
    refuse,
    serve,
    silent,
)
from tests.constants import SHORT_RETRY
from tests.signals import signal_another_thread
from tests.waiting import wait_until

SC = grpc.StatusCode


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker("a").start()
    yield fake
    fake.stop()


#: Subscribe transport of the clients made here (every test runs on both).
TRANSPORT = {"name": "h2"}


@pytest.fixture(autouse=True, params=["h2", "grpc"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    TRANSPORT["name"] = request.param
    yield request.param
    TRANSPORT["name"] = "h2"


def make_client(*brokers: FakeBroker, **options: Any) -> Client:
    options.setdefault("retry", SHORT_RETRY)
    options.setdefault("subscribe_transport", TRANSPORT["name"])
    options.setdefault("resubscribe_wait", 5.0)
    return Client([b.address for b in brokers], **options)


@pytest.fixture
def client(broker: FakeBroker) -> Iterator[Client]:
    with make_client(broker) as client:
        yield client


def values(messages: Iterator[lb.Message] | list[lb.Message]) -> list[int]:
    return [m.offset for m in messages]


# ---------------------------------------------------------------------- handshake


def test_handshake_is_never_shown(broker: FakeBroker, client: Client) -> None:
    broker.subscribe_scripts = [serve([0, 1], "end")]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0, 1]


def test_open_error_before_the_handshake_is_raised_by_subscribe(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [
        refuse(SC.INTERNAL, "failed to find log segment for timestamp: EOF")
    ]
    with pytest.raises(lb.ServerError, match="failed to find log segment"):
        client.subscribe("s", start=StartAt.timestamp(10))


def test_not_found_for_a_partition_the_metadata_lists_is_retried(
    broker: FakeBroker, client: Client
) -> None:
    """A restarted server answers NOT_FOUND while it recovers: not a missing partition."""
    broker.subscribe_scripts = [refuse(SC.NOT_FOUND, "No such partition")] * 2 + [serve([0], "end")]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0]
    assert len(broker.subscribe_requests) == 3


def test_not_found_that_persists_names_the_recovering_partition(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [refuse(SC.NOT_FOUND, "No such partition")] * 5
    with make_client(broker) as client:
        with pytest.raises(lb.BrokerUnavailableError, match="not served yet"):
            client.subscribe("s", start=StartAt.earliest())


def test_missing_handshake_times_out_and_is_retried(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [silent(), serve([0], "end")]
    with make_client(broker, rpc_timeout=0.2) as client:
        started = time.monotonic()
        sub = client.subscribe("s", start=StartAt.earliest())
        assert time.monotonic() - started < 2.0
        assert values(sub) == [0]
    assert len(broker.subscribe_starts()) == 2


def test_stop_latest_on_an_empty_partition(broker: FakeBroker, client: Client) -> None:
    # Pinned from partition metadata: newest offset -1 means nothing to read, no Subscribe.
    assert list(client.subscribe("s", start=StartAt.earliest(), stop=StopAt.latest())) == []
    assert broker.subscribe_starts() == []
    broker.subscribe_scripts = [refuse(SC.RESOURCE_EXHAUSTED, "Stream is empty")]
    assert list(client.subscribe("s", start=StartAt.earliest(), stop=StopAt.offset(0))) == []


def test_stop_latest_is_pinned_to_an_offset(broker: FakeBroker, client: Client) -> None:
    broker.cluster.newest_offset = 7
    broker.subscribe_scripts = [serve([6, 7], (SC.RESOURCE_EXHAUSTED, "Stop offset reached"))]
    assert values(client.subscribe("s", start=StartAt.offset(6), stop=StopAt.latest())) == [6, 7]
    request = broker.subscribe_requests[0]
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 7)


# ---------------------------------------------------------------------- resubscribe


def test_unavailable_mid_stream_resumes_after_the_last_offset(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [
        serve([0, 1, 2], (SC.UNAVAILABLE, "connection lost")),
        serve([3, 4], "end"),
    ]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0, 1, 2, 3, 4]
    assert broker.subscribe_starts() == [(api_pb2.EARLIEST, 0), (api_pb2.OFFSET, 3)]


def test_a_server_that_resends_from_the_start_after_a_restart_causes_no_duplicate(
    broker: FakeBroker, client: Client
) -> None:
    """Seen on v1.9.0: asked for offset 3 right after a restart, it served from 0."""
    broker.subscribe_scripts = [
        serve([0, 1, 2], (SC.UNAVAILABLE, "restarting")),
        serve([0, 1, 2, 3, 4], "end"),
        serve([3, 4], "end"),
    ]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert values(sub) == [0, 1, 2, 3, 4]
    assert broker.subscribe_starts() == [
        (api_pb2.EARLIEST, 0),
        (api_pb2.OFFSET, 3),
        (api_pb2.OFFSET, 3),
    ]
    assert sub.stats() == lb.SubscriptionStats(resubscribes=2, out_of_order=1)


def test_offsets_going_backwards_mid_call_are_never_delivered(
    broker: FakeBroker, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A diverged replica: 1154 then 1111 (issue 26). What came before the step back is
    delivered; the step back is logged with both payload sizes, counted, and the
    subscription resubscribes after the last delivered offset."""

    def diverged(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        yield api_pb2.Message(offset=1153, value=b"a")
        yield api_pb2.Message(offset=1154, value=b"bb")
        yield api_pb2.Message(offset=1111, value=b"ccccc")
        yield api_pb2.Message(offset=1155, value=b"d")
        context.abort(SC.UNAVAILABLE, "gone")

    broker.subscribe_scripts = [diverged, serve([1155, 1156], "end")]
    sub = client.subscribe("s", start=StartAt.offset(1153))
    assert values(sub) == [1153, 1154, 1155, 1156]
    assert broker.subscribe_starts() == [(api_pb2.OFFSET, 1153), (api_pb2.OFFSET, 1155)]
    assert sub.stats().out_of_order == 1
    refused = [r.getMessage() for r in caplog.records if "offset 1111" in r.getMessage()]
    assert len(refused) == 1
    # Worked around, not given up on: WARNING (an ERROR alarmed after every restart).
    assert [r.levelname for r in caplog.records if "offset 1111" in r.getMessage()] == ["WARNING"]
    assert "payload 5 bytes" in refused[0] and "offset 1154 (payload 2 bytes)" in refused[0]


def test_an_offset_repeated_at_the_start_of_a_call_is_refused(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [
        serve([0, 1], (SC.UNAVAILABLE, "gone")),
        serve([1], "hang"),
        serve([2], "end"),
    ]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert values(sub) == [0, 1, 2]
    assert broker.subscribe_starts()[1:] == [(api_pb2.OFFSET, 2)] * 2
    assert sub.stats().out_of_order == 1


def test_a_server_that_only_ever_goes_backwards_is_given_up_on(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [serve([5], (SC.UNAVAILABLE, "gone"))] + [
        serve([4], "hang") for _ in range(1000)
    ]
    with make_client(broker, resubscribe_wait=0.5) as client:
        sub = client.subscribe("s", start=StartAt.offset(5))
        assert next(sub).offset == 5
        started = time.monotonic()
        with pytest.raises(lb.ServerError, match="at or below the last delivered one, 5,"):
            next(sub)
        assert 0.4 < time.monotonic() - started < 3.0
        assert sub.stats().out_of_order >= 2
        with pytest.raises(StopIteration):
            next(sub)


def _serving_another_partition(offsets: list[int], then_ours: list[int]) -> SubscribeScript:
    """A script that answers with partition 1's messages at ``offsets`` (a server or proxy
    bug), then this read's own at ``then_ours``, and ends with UNAVAILABLE."""

    def script(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        for offset in then_ours:
            yield fake_message(offset, request.partition, request.stream)
        for offset in offsets:
            yield fake_message(offset, request.partition + 1, request.stream)
        context.abort(SC.UNAVAILABLE, "gone")

    return script


def test_messages_of_another_partition_are_never_delivered(
    broker: FakeBroker, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Each message names its stream and partition: one naming another is refused,
    logged and counted, and the read resubscribes after the last delivered offset."""
    broker.subscribe_scripts = [_serving_another_partition([2, 3], [0, 1]), serve([2], "end")]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert values(sub) == [0, 1, 2]
    assert broker.subscribe_starts() == [(api_pb2.EARLIEST, 0), (api_pb2.OFFSET, 2)]
    assert sub.stats().misaddressed == 1
    refused = [r for r in caplog.records if "of 's' partition 1" in r.getMessage()]
    assert [r.levelname for r in refused] == ["WARNING"]


def test_a_server_that_only_ever_answers_for_another_partition_is_given_up_on(
    broker: FakeBroker,
) -> None:
    broker.subscribe_scripts = [_serving_another_partition([0], []) for _ in range(1000)]
    with make_client(broker, resubscribe_wait=0.5) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        with pytest.raises(lb.ServerError, match="another stream's or partition's"):
            next(sub)
        assert sub.stats().misaddressed >= 2


def test_nothing_received_resubscribes_from_the_original_start(
    broker: FakeBroker, client: Client
) -> None:
    # go-liftbridge #51/#69: it resumed at offset 1 (lastOffset + 1 with lastOffset = 0).
    broker.subscribe_scripts = [serve([], (SC.UNAVAILABLE, "gone")), serve([5], "end")]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [5]
    assert [r.startPosition for r in broker.subscribe_requests] == [
        api_pb2.EARLIEST,
        api_pb2.EARLIEST,
    ]


def test_new_only_is_pinned_so_a_resubscribe_misses_nothing(
    broker: FakeBroker, client: Client
) -> None:
    broker.cluster.newest_offset = 41
    broker.subscribe_scripts = [serve([], (SC.UNAVAILABLE, "gone")), serve([42], "end")]
    assert values(client.subscribe("s")) == [42]
    assert broker.subscribe_starts() == [(api_pb2.OFFSET, 42), (api_pb2.OFFSET, 42)]


def test_time_delta_is_resolved_once(broker: FakeBroker, client: Client) -> None:
    """Pinned to an offset (an empty partition: 0), the same for the resubscribe, and one
    instant for the screening of messages not committed when it was pinned."""
    broker.subscribe_scripts = [serve([], (SC.UNAVAILABLE, "gone")), serve([], "end")]
    before = time.time_ns()
    sub = client.subscribe("s", start=StartAt.time_delta(10))
    list(sub)
    assert broker.subscribe_starts() == [(api_pb2.OFFSET, 0), (api_pb2.OFFSET, 0)]
    since = sub._target.start_timestamp_ns
    assert since is not None
    assert before - 10_000_000_000 <= since <= time.time_ns() - 10_000_000_000


def test_not_leader_at_open_refreshes_metadata_and_moves() -> None:
    cluster = FakeCluster(leader="a")
    a = FakeBroker("a", cluster).start()
    b = FakeBroker("b", cluster).start()
    try:
        a.subscribe_scripts = [refuse(SC.FAILED_PRECONDITION, "Server not partition leader")]
        b.subscribe_scripts = [serve([0, 1], "end")]
        with make_client(a) as client:
            client.fetch_metadata()  # cache says: leader a
            cluster.leader = "b"
            assert values(client.subscribe("s", start=StartAt.earliest())) == [0, 1]
        assert len(a.subscribe_requests) == 1 and len(b.subscribe_requests) == 1
    finally:
        a.stop()
        b.stop()


def test_leader_dies_mid_stream_and_the_new_leader_continues() -> None:
    cluster = FakeCluster(leader="a")
    a = FakeBroker("a", cluster).start()
    b = FakeBroker("b", cluster).start()
    try:
        a.subscribe_scripts = [serve([0, 1, 2], (SC.UNAVAILABLE, "node died"))]
        b.subscribe_scripts = [serve([3], "end")]
        with make_client(a, b) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert values([next(sub) for _ in range(3)]) == [0, 1, 2]
            cluster.leader = "b"
            a.stop()
            assert values(sub) == [3]
        assert b.subscribe_starts() == [(api_pb2.OFFSET, 3)]
    finally:
        b.stop()


def test_resubscribe_gives_up_after_resubscribe_wait(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "gone"))] + [
        refuse(SC.UNAVAILABLE, "still gone") for _ in range(1000)
    ]
    with make_client(broker, resubscribe_wait=0.5) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert next(sub).offset == 0
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError):
            next(sub)
        assert 0.4 < time.monotonic() - started < 3.0
        with pytest.raises(StopIteration):
            next(sub)


def test_a_signal_given_another_thread_ends_a_resubscribe_back_off(
    broker: FakeBroker, raising_handler: threading.Event
) -> None:
    # The kernel hands a process's SIGINT to any of its threads: one given another
    # thread was handled only once the main thread's back-off (up to RetryPolicy.maximum)
    # had passed.
    broker.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "gone"))] + [
        refuse(SC.UNAVAILABLE, "still gone") for _ in range(10)
    ]
    slow = RetryPolicy(max_attempts=10, max_delay=60.0, initial=30.0, maximum=30.0, jitter=0.0)
    with make_client(broker, retry=slow, resubscribe_wait=60.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert next(sub).offset == 0
        try:
            took = signal_another_thread(
                lambda: next(sub),
                unblock=sub.close,
                what="the resubscribe back-off",
                ready=lambda: len(broker.subscribe_starts()) >= 2,  # a refused resubscribe
            )
        finally:
            raising_handler.set()
            sub.close()
    assert took < WAIT_SLICE + 5.0


def test_stop_offset_delivered_just_before_the_stream_broke(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [serve([0, 1], (SC.UNAVAILABLE, "gone"))]
    sub = client.subscribe("s", start=StartAt.earliest(), stop=StopAt.offset(1))
    assert values(sub) == [0, 1]
    assert len(broker.subscribe_requests) == 1  # no pointless resubscribe
    assert sub.exhausted


def stamped(messages: list[tuple[int, int]], then: str = "hang") -> SubscribeScript:
    """A subscribe script sending (offset, timestamp) messages, then hanging or ending."""

    def script(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        for offset, stamp in messages:
            yield api_pb2.Message(offset=offset, timestamp=stamp, value=b"v")
        if then == "hang":
            while context.is_active():
                time.sleep(0.02)

    return script


def test_stop_timestamp_ends_before_the_first_later_message(
    broker: FakeBroker, client: Client
) -> None:
    """The server is never asked to resolve the time (its lookup may name an offset that
    compaction removed): the request stops at the newest offset, the subscription before
    the first message stamped after the stop time."""
    broker.cluster.newest_offset = 9
    broker.subscribe_scripts = [stamped([(0, 100), (2, 200), (5, 300), (6, 400)])]
    sub = client.subscribe("s", start=StartAt.earliest(), stop=StopAt.timestamp(300))
    assert values(sub) == [0, 2, 5]
    request = broker.subscribe_requests[0]
    assert (request.stopPosition, request.stopOffset) == (api_pb2.STOP_OFFSET, 9)
    assert len(broker.subscribe_requests) == 1


def test_stop_timestamp_before_every_message_is_empty(broker: FakeBroker, client: Client) -> None:
    broker.cluster.newest_offset = 9
    broker.subscribe_scripts = [stamped([(3, 500), (4, 600)])]
    assert list(client.subscribe("s", start=StartAt.earliest(), stop=StopAt.timestamp(10))) == []


def test_stop_timestamp_reached_just_before_the_stream_broke(
    broker: FakeBroker, client: Client
) -> None:
    broker.cluster.newest_offset = 1
    broker.subscribe_scripts = [serve([0, 1], (SC.UNAVAILABLE, "gone"))]
    sub = client.subscribe("s", start=StartAt.earliest(), stop=StopAt.timestamp(10**18))
    assert values(sub) == [0, 1]
    assert len(broker.subscribe_requests) == 1


@pytest.mark.parametrize("stop", [StopAt.offset(10), StopAt.latest()])
def test_a_stop_offset_that_is_missing_ends_before_the_next_message(
    broker: FakeBroker, client: Client, stop: StopAt
) -> None:
    """Compaction removed offsets 9-11: the server's exact-offset stop never fires, and
    the next message (12) is past the stop. It is not delivered; the iterator ends."""
    broker.cluster.newest_offset = 10  # the stop of StopAt.latest(); 10 was removed since
    broker.subscribe_scripts = [serve([1, 4, 8, 12, 13], "hang")]
    sub = client.subscribe("s", start=StartAt.offset(1), stop=stop)
    assert values(sub) == [1, 4, 8]
    assert len(broker.subscribe_requests) == 1
    assert sub.exhausted
    with pytest.raises(StopIteration):
        sub.get(0)


def test_a_stop_offset_that_fell_to_retention_is_an_empty_range(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [serve([51, 52], "hang")]  # 0-50 deleted by retention
    assert list(client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(10))) == []
    broker.subscribe_scripts = [
        refuse(SC.INVALID_ARGUMENT, "Stop offset is before start offset: 10 < 51")
    ]
    assert list(client.subscribe("s", start=StartAt.earliest(), stop=StopAt.offset(10))) == []


def test_a_start_past_the_end_with_a_stop_is_an_empty_range(
    broker: FakeBroker, client: Client
) -> None:
    broker.cluster.newest_offset = 99
    broker.subscribe_scripts = [
        # Pinning the start time: the server puts it past the end, and the newest
        # message (stamped 0) is older, so the range starts at 100.
        refuse(SC.INVALID_ARGUMENT, "Stop offset is before start offset: 99 < 100"),
        serve([99], "end"),
    ]
    sub = client.subscribe("s", start=StartAt.timestamp(10**18), stop=StopAt.latest())
    assert list(sub) == []
    for start, stop in [
        (StartAt.new_only(), StopAt.latest()),
        (StartAt.offset(100), StopAt.latest()),
        (StartAt.offset(7), StopAt.offset(6)),
    ]:
        assert list(client.subscribe("s", start=start, stop=stop)) == []
    # The two look-ups of the start time; every range was decided without a subscribe.
    assert [r.startPosition for r in broker.subscribe_requests] == [
        api_pb2.TIMESTAMP,
        api_pb2.OFFSET,
    ]


def test_whole_stream_stops_every_partition_at_or_before_the_stop() -> None:
    cluster = FakeCluster(leader="a", partitions=2)
    a = FakeBroker("a", cluster).start()
    try:
        scripts = {0: serve([0, 3, 7], "hang"), 1: serve([2, 5], "hang")}

        def by_partition(
            request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
        ) -> Iterator[api_pb2.Message]:
            yield from scripts[request.partition](request, context)

        a.subscribe_scripts = [by_partition] * 2
        with make_client(a) as client:
            sub = client.subscribe_stream("s", start=StartAt.earliest(), stop=StopAt.offset(4))
            got = sorted((m.partition, m.offset) for m in sub)
        assert got == [(0, 0), (0, 3), (1, 2)]
    finally:
        a.stop()


def test_a_committed_range_that_stays_silent_ends_after_rpc_timeout(broker: FakeBroker) -> None:
    """v1.9.0 after retention deleted every message: its reader waits for the next publish
    even for committed offsets. Nothing for ``rpc_timeout`` on a committed range, then
    nothing for ``rpc_timeout`` on a fresh read after the last offset: ended."""
    broker.cluster.newest_offset = 20  # committed up to 20
    broker.subscribe_scripts = [serve([1, 2], "hang"), serve([], "hang")]
    with make_client(broker, rpc_timeout=0.3) as client:
        sub = client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(10))
        started = time.monotonic()
        assert values(sub) == [1, 2]
        assert 0.55 < time.monotonic() - started < 2.5
        assert sub.exhausted
    assert [r.startOffset for r in broker.subscribe_requests] == [1, 3]


def test_a_stalled_reader_on_a_committed_range_is_not_taken_for_deletion(
    broker: FakeBroker,
) -> None:
    """A server reader can stall with the rest of the range stored (a probe saw a v1.9.0
    broker go silent on a compacted stream being written, shortly before it crashed).
    One silent call ended the range 316 messages short, blamed on retention; the fresh
    read that confirms the silence now gets the rest."""
    broker.cluster.newest_offset = 20  # committed up to 20
    broker.subscribe_scripts = [serve([1, 2], "hang"), serve(list(range(3, 11)), "hang")]
    with make_client(broker, rpc_timeout=0.3) as client:
        sub = client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(10))
        assert values(sub) == list(range(1, 11))
        assert sub.exhausted
    assert [r.startOffset for r in broker.subscribe_requests] == [1, 3]


def test_a_message_between_two_silences_starts_the_confirmation_afresh(
    broker: FakeBroker,
) -> None:
    """Only two silent calls in a row, with no message between, end the range: a
    message after a silent call starts the confirmation afresh."""
    broker.cluster.newest_offset = 20
    broker.subscribe_scripts = [
        serve([1], "hang"),
        serve([2], "hang"),  # after one silence: not the confirming one, it had a message
        serve([3], "hang"),
        serve([], "hang"),
    ]
    with make_client(broker, rpc_timeout=0.3) as client:
        sub = client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(10))
        assert values(sub) == [1, 2, 3]
        assert sub.exhausted
    assert [r.startOffset for r in broker.subscribe_requests] == [1, 2, 3, 4]


def test_a_lagging_replicas_silence_is_not_taken_for_deletion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``read_isr_replica`` the read may go to a follower, which may lag the
    leader's high watermark by more than ``rpc_timeout`` and still be in the ISR. Its
    silence was taken for retention having deleted the rest: the range ended early,
    missing offsets the leader had. The rest is now read from the leader."""
    cluster = FakeCluster(leader="a", newest_offset=9)  # the leader committed 0-9
    leader, follower = FakeBroker("a", cluster).start(), FakeBroker("b", cluster).start()
    try:
        leader.subscribe_scripts = [serve([5, 6, 7, 8, 9], "hang")]
        follower.subscribe_scripts = [serve([0, 1, 2, 3, 4], "hang")]  # then lags
        # The replica chosen first is the follower.
        monkeypatch.setattr(random, "choice", lambda brokers: brokers[-1])
        with make_client(leader, rpc_timeout=0.3) as client:
            sub = client.subscribe(
                "s", start=StartAt.earliest(), stop=StopAt.offset(9), read_isr_replica=True
            )
            assert values(sub) == list(range(10))
            assert sub.exhausted
        assert [r.startOffset for r in leader.subscribe_requests] == [5]
    finally:
        leader.stop()
        follower.stop()


def test_a_stop_not_committed_yet_is_waited_for(broker: FakeBroker) -> None:
    broker.cluster.newest_offset = 20
    broker.subscribe_scripts = [serve([1, 2], "hang")] + [serve([], "hang") for _ in range(100)]
    with make_client(broker, rpc_timeout=0.3) as client:
        sub = client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(30))
        assert values([sub.get(1), sub.get(1)]) == [1, 2]
        with pytest.raises(TimeoutError):
            sub.get(1.0)  # idle checks found 30 not committed: still waiting
        assert len(broker.subscribe_requests) >= 2  # each idle check reopened the read
        broker.cluster.newest_offset = 30  # committed now, yet nothing comes: gone
        started = time.monotonic()
        with pytest.raises(StopIteration):
            sub.get(5)
        assert time.monotonic() - started < 2.0


def test_the_idle_check_of_a_range_keeps_within_the_get_timeout(broker: FakeBroker) -> None:
    """The check made after ``rpc_timeout`` of silence on a range asks the leader for its
    high watermark. It went through the client's retry policy with no deadline: a leader
    answering "not leader" (an election under way) held ``get(0.5)`` for the policy's
    whole ``max_delay``, and ``close()`` could not end it sooner. One attempt, within
    what is left of the read, now decides; not knowing is waiting on."""
    broker.cluster.newest_offset = 20  # committed up to 20
    broker.subscribe_scripts = [serve([1], "hang")] + [serve([], "hang") for _ in range(100)]
    patient = RetryPolicy(max_attempts=1000, max_delay=6.0, initial=0.1, maximum=0.1, jitter=0)
    with make_client(broker, rpc_timeout=0.2, retry=patient) as client:
        sub = client.subscribe("s", start=StartAt.offset(1), stop=StopAt.offset(10))
        assert sub.get(1).offset == 1
        broker.not_leader_times = 10**6
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            sub.get(0.5)
        assert time.monotonic() - started < 1.5
        assert broker.partition_metadata_calls > 0  # the check was made, and failed
        broker.not_leader_times = 0  # the leader answers again: the rest is gone
        with pytest.raises(StopIteration):
            sub.get(5)
        assert sub.exhausted


# ---------------------------------------------------------------------- transient refusals


@pytest.mark.parametrize(
    "details",
    [
        "Failed to create stream reader: segment has been closed",
        "Failed to create stream reader: segment was replaced",
    ],
)
def test_a_reader_caught_in_a_segment_swap_at_open_is_retried(
    broker: FakeBroker, client: Client, details: str
) -> None:
    broker.subscribe_scripts = [refuse(SC.INTERNAL, details)] * 2 + [serve([0, 1], "end")]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0, 1]
    assert len(broker.subscribe_requests) == 3


class _OncePaused(FakeBroker):
    """A broker whose metadata lists partition 0 as paused, as v1.9.0 goes on listing
    a partition paused once and resumed since (it never clears the flag), with its
    last pause or resume at ``changed_ns`` and its last message received at
    ``received_ns``."""

    def __init__(self, changed_ns: int, received_ns: int) -> None:
        super().__init__("a")
        self.changed_ns = changed_ns
        self.received_ns = received_ns

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        for stream in response.streamMetadata:
            partition = stream.partitions[0]
            partition.paused = True
            partition.pauseTimestamps.firstTimestamp = self.changed_ns - 1
            partition.pauseTimestamps.latestTimestamp = self.changed_ns
            partition.messagesReceivedTimestamps.firstTimestamp = 1
            partition.messagesReceivedTimestamps.latestTimestamp = self.received_ns
        return response


@pytest.mark.parametrize("published_since", [True, False], ids=["resumed", "paused"])
def test_a_partition_paused_once_reads_as_paused_only_without_a_message_since(
    published_since: bool,
) -> None:
    # v1.9.0 lists a partition paused forever once it was paused, resumed or not: a
    # passing "segment has been closed" (a compaction) on a partition an auto-pause had
    # once stopped ended the read as paused. A message received since the last pause or
    # resume shows the partition live.
    changed = 2_000_000_000
    fake = _OncePaused(changed, changed + 5 if published_since else changed - 5).start()
    try:
        details = "Failed to create stream reader: segment has been closed"
        fake.subscribe_scripts = [refuse(SC.INTERNAL, details)] * 2 + [serve([0, 1], "end")]
        with make_client(fake) as client:
            if published_since:
                assert values(client.subscribe("s", start=StartAt.earliest())) == [0, 1]
            else:
                with pytest.raises(lb.PartitionPausedError, match="resume=True"):
                    client.subscribe("s", start=StartAt.earliest())
    finally:
        fake.stop()


def test_a_reader_caught_in_a_segment_swap_mid_stream_resubscribes(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [
        serve([0, 1], (SC.UNKNOWN, "failed to reinitialize reader: segment has been closed")),
        refuse(SC.INTERNAL, "Failed to create stream reader: segment has been closed"),
        serve([2], "end"),
    ]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert values(sub) == [0, 1, 2]
    assert broker.subscribe_starts()[1:] == [(api_pb2.OFFSET, 2)] * 2


def test_a_segment_refusal_that_persists_surfaces_typed(broker: FakeBroker) -> None:
    """Retried past the retry policy (a cleaner pass over a big log lasts seconds), for up
    to ``resubscribe_wait``; then the server's refusal is raised, typed."""
    details = "Failed to create stream reader: segment has been closed"
    broker.subscribe_scripts = [refuse(SC.INTERNAL, details) for _ in range(1000)]
    with make_client(broker, resubscribe_wait=1.0) as client:
        started = time.monotonic()
        with pytest.raises(lb.ServerError, match="segment has been closed") as caught:
            client.subscribe("s", start=StartAt.earliest())
        assert 0.9 < time.monotonic() - started < 4.0
    assert caught.value.code == "INTERNAL"
    assert len(broker.subscribe_requests) > SHORT_RETRY.max_attempts


def test_other_server_errors_at_open_are_not_retried_for_longer(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [refuse(SC.INTERNAL, "log closed") for _ in range(100)]
    with make_client(broker) as client:
        with pytest.raises(lb.ServerError, match="log closed"):
            client.subscribe("s", start=StartAt.earliest())
    assert len(broker.subscribe_requests) == 1


# ---------------------------------------------------------------------- terminal statuses


@pytest.mark.parametrize(
    ("code", "details", "error"),
    [
        (SC.NOT_FOUND, "commit log was deleted", lb.StreamDeletedError),
        (SC.FAILED_PRECONDITION, "commit log was closed", lb.PartitionPausedError),
        (SC.PERMISSION_DENIED, "nope", lb.PermissionDeniedError),
        (SC.INTERNAL, "log closed", lb.ServerError),
    ],
)
def test_terminal_statuses_mid_stream(
    broker: FakeBroker,
    client: Client,
    code: grpc.StatusCode,
    details: str,
    error: type[Exception],
) -> None:
    broker.subscribe_scripts = [serve([0], (code, details))]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert next(sub).offset == 0
    with pytest.raises(error):
        next(sub)
    with pytest.raises(StopIteration):
        next(sub)
    assert len(broker.subscribe_requests) == 1


def test_end_of_readonly_partition_and_ok_status_end_the_iteration(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [serve([0], (SC.RESOURCE_EXHAUSTED, "End of readonly partition"))]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0]
    broker.subscribe_scripts = [serve([0], "end")]
    assert values(client.subscribe("s", start=StartAt.earliest())) == [0]


def test_a_message_over_the_receive_limit_is_an_error_not_the_end(
    broker: FakeBroker, transport: str
) -> None:
    # grpcio fails such a read with RESOURCE_EXHAUSTED "Received message larger than
    # max", the code v1.9.0 also ends a read-only partition with: only the server's own
    # texts may end the iteration.
    def oversized(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        yield api_pb2.Message(offset=0, value=b"small")
        yield api_pb2.Message(offset=1, value=b"x" * 4096)
        yield api_pb2.Message(offset=2, value=b"after")

    broker.subscribe_scripts = [oversized]
    with make_client(broker, max_receive_message_size=1024) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert sub.get(5).offset == 0
        with pytest.raises(lb.ServerError, match="max_receive_message_size"):
            sub.get(5)
    assert len(broker.subscribe_requests) == 1


def test_another_resource_exhausted_before_the_handshake_is_raised(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [refuse(SC.RESOURCE_EXHAUSTED, "quota exceeded")]
    with pytest.raises(lb.ServerError, match="quota exceeded"):
        client.subscribe("s", start=StartAt.earliest())


# ---------------------------------------------------------------------- reverse


def test_reverse_reads_down_to_eof_and_resumes_below_the_last_offset(
    broker: FakeBroker, client: Client
) -> None:
    broker.subscribe_scripts = [
        serve([9, 8], (SC.UNAVAILABLE, "gone")),
        serve([7, 6], (SC.UNKNOWN, "EOF")),
    ]
    sub = client.subscribe("s", start=StartAt.latest(), reverse=True)
    assert values(sub) == [9, 8, 7, 6]
    assert broker.subscribe_starts() == [(api_pb2.LATEST, 0), (api_pb2.OFFSET, 7)]
    assert all(r.reverse for r in broker.subscribe_requests)


def test_reverse_on_an_empty_log(broker: FakeBroker, client: Client) -> None:
    broker.subscribe_scripts = [
        refuse(SC.INTERNAL, "Failed to create stream reader: segment not found")
    ]
    assert list(client.subscribe("s", start=StartAt.earliest(), reverse=True)) == []
    broker.subscribe_scripts = [refuse(SC.INTERNAL, "something else broke")]
    with pytest.raises(lb.ServerError):
        client.subscribe("s", start=StartAt.earliest(), reverse=True)


def test_reverse_ignored_by_the_server_is_unsupported(broker: FakeBroker, client: Client) -> None:
    broker.subscribe_scripts = [serve([3, 4], "hang")]
    sub = client.subscribe("s", start=StartAt.offset(3), reverse=True)
    assert next(sub).offset == 3
    with pytest.raises(lb.UnsupportedError, match="does not support reverse"):
        next(sub)


def test_reverse_stops_after_offset_zero(broker: FakeBroker, client: Client) -> None:
    broker.subscribe_scripts = [serve([1, 0], (SC.UNAVAILABLE, "gone"))]
    assert values(client.subscribe("s", start=StartAt.offset(1), reverse=True)) == [1, 0]
    assert len(broker.subscribe_requests) == 1


# ---------------------------------------------------------------------- timeouts and close


def test_get_timeout_cancels_and_the_next_read_resumes_exactly(
    broker: FakeBroker, client: Client, transport: str
) -> None:
    if transport == "h2":
        # The h2 reader waits on the socket until the deadline: the call stays open and
        # the next read goes on with it, no resubscribe.
        broker.subscribe_scripts = [serve([0, 1], "hang")]
    else:
        # grpcio's reads take no deadline: the timer cancels the call, and the next read
        # resubscribes after the last delivered offset.
        broker.subscribe_scripts = [serve([0, 1], "hang"), serve([], "hang"), serve([2], "hang")]
    sub = client.subscribe("s", start=StartAt.earliest())
    assert values([sub.get(1), sub.get(1)]) == [0, 1]
    metadata_calls = broker.metadata_calls
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            sub.get(0.1)
        assert time.monotonic() - started < 0.5
    if transport == "h2":
        assert broker.subscribe_starts() == [(api_pb2.EARLIEST, 0)]
        assert sub.stats().resubscribes == 0
    else:
        assert sub.get(1).offset == 2
        assert broker.subscribe_starts() == [
            (api_pb2.EARLIEST, 0),
            (api_pb2.OFFSET, 2),
            (api_pb2.OFFSET, 2),
        ]
    assert broker.metadata_calls == metadata_calls  # a timeout is not a reason to refresh
    sub.close()


def test_close_while_resubscribing_stops_promptly(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "gone"))] + [
        refuse(SC.UNAVAILABLE, "still gone") for _ in range(1000)
    ]
    slow = RetryPolicy(max_attempts=5, initial=0.5, maximum=0.5, jitter=0.0)
    with make_client(broker, retry=slow, resubscribe_wait=30.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert next(sub).offset == 0
        result: list[object] = []
        reader = threading.Thread(target=lambda: result.append(list(sub)))
        reader.start()
        deadline = time.monotonic() + 5
        while len(broker.subscribe_requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        sub.close()
        reader.join(5)
        assert result == [[]]
        assert time.monotonic() - started < 0.4


def test_close_ends_a_get_in_a_resubscribe_back_off_with_stop_iteration(
    broker: FakeBroker,
) -> None:
    # A get(timeout) whose back-off reached past its deadline waited for what was left
    # of it, and then raised TimeoutError even when close() had woken it: a closed
    # subscription ends with StopIteration.
    broker.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "gone"))] + [
        refuse(SC.UNAVAILABLE, "still gone") for _ in range(1000)
    ]
    slow = RetryPolicy(max_attempts=1_000_000, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)
    with make_client(broker, retry=slow, resubscribe_wait=30.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert sub.get(5).offset == 0
        result: list[BaseException] = []

        def read() -> None:
            try:
                sub.get(5)
            except BaseException as exc:  # noqa: BLE001 - what ended it is the question
                result.append(exc)

        reader = threading.Thread(target=read, name="liftbridge-test-reader", daemon=True)
        reader.start()
        # The second Subscribe is refused; its back-off (10 s) reaches past the get's
        # deadline (5 s): the reader waits for what is left of the get, or soon will.
        wait_until(lambda: len(broker.subscribe_requests) >= 2, 5, "a refused resubscribe")
        sub.close()
        reader.join(5)
        assert not reader.is_alive()
        assert len(result) == 1 and isinstance(result[0], StopIteration), result


def test_get_timeout_bounds_a_resubscribe_in_progress(broker: FakeBroker) -> None:
    broker.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "gone"))] + [
        refuse(SC.UNAVAILABLE, "still gone") for _ in range(1000)
    ]
    slow = RetryPolicy(initial=0.3, maximum=0.3, jitter=0.0)
    with make_client(broker, retry=slow, resubscribe_wait=30.0) as client:
        sub = client.subscribe("s", start=StartAt.earliest())
        assert sub.get(1).offset == 0
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            sub.get(0.1)
        assert time.monotonic() - started < 0.3
        broker.subscribe_scripts = [serve([1], "hang")]
        assert sub.get(5).offset == 1
        sub.close()


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A local port whose SYNs go unanswered: a listener with a full accept queue (Linux
    drops further SYNs), as a broker host that went away leaves its address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=5)
    yield port
    filler.close()
    listener.close()


def _connecting_to(port: int) -> bool:
    """Whether a local socket is in SYN_SENT towards ``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return any(row[3] == "02" and int(row[2].split(":")[1], 16) == port for row in rows)


def test_get_timeout_and_close_bound_a_resubscribe_to_an_unreachable_leader(
    black_hole: int, transport: str
) -> None:
    """The new leader's address black-holes SYNs (its host is gone): the h2 reader's
    TCP connect blocked for the whole ``rpc_timeout``, which neither the ``get(timeout)``
    deadline nor ``close()`` from another thread could cut short."""
    cluster = FakeCluster(leader="a")
    a = FakeBroker("a", cluster).start()
    FakeBroker("b", cluster, advertised_port=black_hole)  # never started: an address only
    try:
        a.subscribe_scripts = [serve([0], (SC.UNAVAILABLE, "node died"))]
        with make_client(a, rpc_timeout=5.0, resubscribe_wait=30.0) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            cluster.leader = "b"
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                sub.get(0.3)
            assert time.monotonic() - started < 1.5
            result: list[object] = []
            reader = threading.Thread(target=lambda: result.append(list(sub)))
            reader.start()
            if transport == "h2":  # grpcio connects on its own threads, and backs off
                wait_until(lambda: _connecting_to(black_hole), 5, "a connect to the black hole")
            started = time.monotonic()
            sub.close()
            reader.join(5)
            assert result == [[]]
            assert time.monotonic() - started < 1.5
    finally:
        a.stop()


# ---------------------------------------------------------------------- whole stream


def test_whole_stream_partitions_resubscribe_independently() -> None:
    cluster = FakeCluster(leader="a", partitions=2)
    a = FakeBroker("a", cluster).start()
    try:
        scripts: dict[int, list[SubscribeScript]] = {
            0: [serve([0, 1], (SC.UNAVAILABLE, "gone")), serve([2], "end")],
            1: [serve([0], "end")],
        }

        def by_partition(
            request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
        ) -> Iterator[api_pb2.Message]:
            yield from scripts[request.partition].pop(0)(request, context)

        a.subscribe_scripts = [by_partition] * 3
        with make_client(a) as client:
            sub = client.subscribe_stream("s", start=StartAt.earliest())
            got = sorted((m.partition, m.offset) for m in sub)
        assert got == [(0, 0), (0, 1), (0, 2), (1, 0)]
    finally:
        a.stop()


def test_whole_stream_reader_that_cannot_start_leaves_nothing_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(leader="a", partitions=3)
    a = FakeBroker("a", cluster).start()
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == "liftbridge-subscribe-s-1":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    calls: dict[int, grpc.ServicerContext] = {}

    def hang(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        # The call's context, not code after the script: grpcio stops resuming the
        # handler of a call cancelled while it waits to be resumed.
        calls[request.partition] = context
        yield from serve([], "hang")(request, context)

    try:
        a.subscribe_scripts = [hang] * 3
        with make_client(a) as client:
            monkeypatch.setattr(threading.Thread, "start", start)
            with pytest.raises(lb.InternalThreadError, match="partition 1") as raised:
                client.subscribe_stream("s", start=StartAt.earliest())
            monkeypatch.undo()
            assert isinstance(raised.value.__cause__, RuntimeError)
            # Partition 0's reader was stopped and joined before the error was raised.
            assert [t for t in threading.enumerate() if t.name.startswith("liftbridge-subs")] == []
            # Every partition's call was cancelled, not left open on the server.
            wait_until(
                lambda: (
                    sorted(calls) == [0, 1, 2] and not any(c.is_active() for c in calls.values())
                ),
                10,
                "every call cancelled",
            )
    finally:
        a.stop()


def test_whole_stream_terminal_error_is_raised_and_closes_everything() -> None:
    cluster = FakeCluster(leader="a", partitions=2)
    a = FakeBroker("a", cluster).start()
    try:

        def by_partition(
            request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
        ) -> Iterator[api_pb2.Message]:
            if request.partition == 0:
                yield from serve([0], (SC.NOT_FOUND, "commit log was deleted"))(request, context)
            else:
                yield from serve([], "hang")(request, context)

        a.subscribe_scripts = [by_partition] * 2
        with make_client(a) as client:
            sub = client.subscribe_stream("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            with pytest.raises(lb.StreamDeletedError):
                sub.get(5)
            with pytest.raises(StopIteration):
                sub.get(0)
    finally:
        a.stop()


def test_a_server_failing_every_call_at_once_is_resubscribed_to_with_back_off(
    broker: FakeBroker,
) -> None:
    """A server that accepts every Subscribe (handshake) and at once ends it with
    UNAVAILABLE: each resubscribe connected, so the budget started afresh and the next
    one followed at once, some 450 calls a second (and as many warnings) for as long as
    it lasted. Now a stream lost again before any message since the last loss waits for
    the retry back-off first (the first loss after messages still resubscribes at once)."""
    gone = ("UNAVAILABLE", "gone")
    broker.subscribe_scripts = [serve([0], then=gone)] + [serve([], then=gone)] * 20_000
    with make_client(broker, retry=SHORT_RETRY) as client:
        subscription = client.subscribe("s", start=StartAt.earliest())
        assert subscription.get(timeout=10).offset == 0
        with pytest.raises(TimeoutError):
            subscription.get(timeout=1.0)  # resubscribing all along, nothing arrives
        calls = len(broker.subscribe_requests)
    # Back-off from 10 ms, doubling to 50 ms: about 25 calls in the second.
    assert calls <= 60, calls


def test_a_server_cancelling_every_call_at_once_is_resubscribed_to_with_back_off(
    broker: FakeBroker,
) -> None:
    """As above, with CANCELLED, which a cancel of ours that raced a message is too:
    that one is resubscribed at once, but each one after it was too, without end, some
    hundreds of calls a second against a server (or a proxy) resetting every stream."""
    cancelled = ("CANCELLED", "stream reset")
    broker.subscribe_scripts = [serve([0], then=cancelled)] + [serve([], then=cancelled)] * 20_000
    with make_client(broker, retry=SHORT_RETRY) as client:
        subscription = client.subscribe("s", start=StartAt.earliest())
        assert subscription.get(timeout=10).offset == 0
        with pytest.raises(TimeoutError):
            subscription.get(timeout=1.0)  # resubscribing all along, nothing arrives
        calls = len(broker.subscribe_requests)
    assert calls <= 60, calls
