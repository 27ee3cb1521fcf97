"""A resubscribe keeps to the ``get(timeout)`` it runs in, its metadata look-up included:
a partition the cache lacked was looked up with a refresh retried under the whole
retry policy, and ``get(0.3)`` returned only once that policy gave up."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from liftbridge_sync import Client, RetryPolicy, StartAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError, PartitionPausedError
from liftbridge_sync.models import FrozenMap, Metadata
from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.testing import FakeBroker, FakeCluster, SubscribeScript, refuse, serve, silent
from tests.component.hanging_metadata import HangingMetadata
from tests.waiting import wait_until

#: Only max_delay ends the retries: a refresh under it takes 3 s with no broker up.
_PATIENT = RetryPolicy(max_attempts=1_000_000, max_delay=3.0, initial=0.05, maximum=0.2, jitter=0)


@contextlib.contextmanager
def _cluster_gone(resubscribe_wait: float) -> Iterator[Subscription]:
    """A subscription that read offset 0 and is to resubscribe, once its broker has
    stopped and the metadata cache no longer lists the stream (another thread's refresh
    answered without it): the resubscribe must look the partition up.

    The grpc transport: a get() timing out cancels the call, and the next read
    subscribes again at the cached leader (the leader is not suspect). The client is
    closed on the way out.
    """
    broker = FakeBroker("a").start()
    stopped = False
    try:
        broker.subscribe_scripts = [serve([0], "hang")]
        with Client(
            [broker.address],
            retry=_PATIENT,
            subscribe_transport="grpc",
            resubscribe_wait=resubscribe_wait,
        ) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert sub.get(5).offset == 0
            with pytest.raises(TimeoutError):
                sub.get(0.1)
            broker.stop()
            stopped = True
            client._core.metadata.store(Metadata(brokers=(), streams=FrozenMap({})))
            yield sub
    finally:
        if not stopped:
            broker.stop()


def test_a_resubscribe_looking_up_a_partition_the_cache_lacks_keeps_to_the_get_timeout() -> None:
    with _cluster_gone(resubscribe_wait=30.0) as sub:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            sub.get(0.3)
        elapsed = time.monotonic() - started
        assert not sub.closed and not sub._conn.done  # it goes on resubscribing
    assert elapsed < 0.3 + 0.5


def test_an_iterated_resubscribe_looking_up_a_partition_keeps_to_resubscribe_wait() -> None:
    # Without a get() deadline the look-up ran under the whole retry policy (3 s here),
    # past the resubscribe_wait (0.5 s) the subscription promises to keep trying for.
    with _cluster_gone(resubscribe_wait=0.5) as sub:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            next(sub)
        elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 0.8


#: The checks' rpc_timeout: per broker, four brokers, with nothing answering.
_CHECK_RPC_TIMEOUT = 1.0
_CHECK_WAIT = 0.3

#: A subscribe refused as a deleted partition or a paused one would be.
_REFUSALS = pytest.mark.parametrize(
    "refusal",
    [
        ("NOT_FOUND", "no such partition"),
        ("INTERNAL", "Failed to create stream reader: segment has been closed"),
    ],
    ids=["not-found", "paused"],
)


@contextlib.contextmanager
def _hanging_cluster() -> Iterator[list[HangingMetadata]]:
    """Four brokers of one cluster led by the first, whose metadata can be made to hang."""
    cluster = FakeCluster(leader="a")
    brokers = [HangingMetadata(name, cluster) for name in "abcd"]
    for broker in brokers:
        broker.start()
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


@_REFUSALS
def test_a_resubscribe_asking_what_a_refusal_means_keeps_to_resubscribe_wait(
    refusal: tuple[str, str],
) -> None:
    # A refusal's meaning (a deleted stream, a paused partition) is asked of fresh
    # metadata. The question went to every broker in turn with rpc_timeout each,
    # whatever was left of resubscribe_wait: 4 x 1 s here, for a budget of 0.3 s
    # (and one attempt's rpc_timeout past it, as the leader's look-up keeps to).
    with _hanging_cluster() as brokers:
        leader = brokers[0]
        leader.subscribe_scripts = [serve([0], ("CANCELLED", "cancelled")), refuse(*refusal)]
        with Client(
            [leader.address],
            rpc_timeout=_CHECK_RPC_TIMEOUT,
            resubscribe_wait=_CHECK_WAIT,
            subscribe_transport="grpc",
        ) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            for broker in brokers:
                broker.hang = True
            assert next(sub).offset == 0
            started = time.monotonic()
            with pytest.raises(LiftbridgeError):
                next(sub)
            elapsed = time.monotonic() - started
    assert elapsed < _CHECK_WAIT + _CHECK_RPC_TIMEOUT + 1.0


class _SlowMetadata(FakeBroker):
    """A broker whose FetchMetadata answers take :attr:`delay` seconds (a slow but
    answering broker: the answer arrives within ``rpc_timeout``)."""

    def __init__(self, broker_id: str) -> None:
        super().__init__(broker_id)
        self.delay = 0.0
        self._never = threading.Event()

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        self._never.wait(self.delay)  # the scripted fault: a slow answer
        return super().FetchMetadata(request, context)


_ATTEMPT_RPC_TIMEOUT = 3.0
_ATTEMPT_WAIT = 0.5


#: What an attempt may take past resubscribe_wait beyond its rpc_timeout on a loaded
#: machine; the faults below took 1.5-2 s more than that.
_ATTEMPT_SLACK = 1.0


def _resubscribe_after_a_slow_look_up(
    second: SubscribeScript, expected: type[LiftbridgeError]
) -> tuple[float, FakeBroker]:
    """Seconds a read took to fail with ``expected`` once its resubscribe's look-up of
    the leader took most of rpc_timeout and its Subscribe ran ``second``; the broker."""
    broker = _SlowMetadata("a")
    broker.start()
    try:
        broker.subscribe_scripts = [serve([0], ("UNAVAILABLE", "scripted: gone")), second]
        with Client(
            [broker.address],
            rpc_timeout=_ATTEMPT_RPC_TIMEOUT,
            resubscribe_wait=_ATTEMPT_WAIT,
        ) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert next(sub).offset == 0
            broker.delay = _ATTEMPT_RPC_TIMEOUT - 0.5
            started = time.monotonic()
            with pytest.raises(expected):
                next(sub)
            elapsed = time.monotonic() - started
    finally:
        broker.stop()
    return elapsed, broker


def test_a_resubscribe_handshake_keeps_to_resubscribe_wait_after_a_slow_look_up() -> None:
    # The look-up of the leader took most of rpc_timeout, and the wait for the
    # handshake then took rpc_timeout more: an attempt begun within resubscribe_wait
    # ended two rpc_timeouts past it, not the one an attempt may take past it.
    elapsed, _ = _resubscribe_after_a_slow_look_up(silent(), BrokerUnavailableError)
    assert elapsed < _ATTEMPT_WAIT + _ATTEMPT_RPC_TIMEOUT + _ATTEMPT_SLACK


def test_close_from_another_thread_ends_a_resubscribe_waiting_for_its_handshake() -> None:
    broker = FakeBroker("a").start()
    try:
        broker.subscribe_scripts = [serve([0], ("UNAVAILABLE", "scripted: gone")), silent()]
        with Client([broker.address], rpc_timeout=30.0, resubscribe_wait=60.0) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert next(sub).offset == 0

            def close_once_resubscribed() -> None:
                wait_until(lambda: len(broker.subscribe_requests) == 2, 10)
                sub.close()

            closer = threading.Thread(target=close_once_resubscribed, name="test-closer")
            closer.start()
            started = time.monotonic()
            with pytest.raises(StopIteration):
                next(sub)
            elapsed = time.monotonic() - started
            closer.join(10)
    finally:
        broker.stop()
    assert elapsed < 5.0  # not the handshake's rpc_timeout (30 s)


@_REFUSALS
def test_a_refusal_after_a_slow_look_up_keeps_to_the_attempts_bound(
    refusal: tuple[str, str],
) -> None:
    # The look-up of the leader took most of rpc_timeout and the server refused the
    # subscribe; asking fresh metadata what the refusal meant then took rpc_timeout
    # more of its own: the attempt ended about two rpc_timeouts past resubscribe_wait.
    elapsed, broker = _resubscribe_after_a_slow_look_up(refuse(*refusal), LiftbridgeError)
    assert len(broker.subscribe_requests) == 2  # the refusal was met
    assert elapsed < _ATTEMPT_WAIT + _ATTEMPT_RPC_TIMEOUT + _ATTEMPT_SLACK


def test_asking_whether_a_read_broke_on_a_pause_keeps_to_one_attempts_time() -> None:
    # A running read ended "commit log was closed" (paused under it): whether the
    # partition is paused is asked of fresh metadata. Iterated (no get() deadline), the
    # question went to every broker in turn with rpc_timeout each: 4 x 1 s here.
    with _hanging_cluster() as brokers:
        leader = brokers[0]
        leader.subscribe_scripts = [serve([0], ("FAILED_PRECONDITION", "commit log was closed"))]
        with Client(
            [leader.address], rpc_timeout=_CHECK_RPC_TIMEOUT, subscribe_transport="grpc"
        ) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert len(client._core.addresses()) == len(brokers)
            for broker in brokers:
                broker.hang = True
            assert next(sub).offset == 0
            started = time.monotonic()
            with pytest.raises(PartitionPausedError):
                next(sub)
            elapsed = time.monotonic() - started
            assert sum(broker.hung for broker in brokers) >= 1  # it was asked
    assert elapsed < _CHECK_RPC_TIMEOUT + 1.5  # 4.4 s before
