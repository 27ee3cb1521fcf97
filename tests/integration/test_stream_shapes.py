"""Big stream shapes on the real server: many messages read, many partitions, many
streams created and deleted by one long-lived client; what the client holds must stay
bounded and be released."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import Counter

import pytest

from liftbridge_sync import (
    ByKey,
    Client,
    NoSuchStreamError,
    RetryPolicy,
    RoundRobin,
    StartAt,
    StopAt,
)
from liftbridge_sync.testing import TcpProxy
from tests.constants import SHORT_RETRY
from tests.waiting import wait_until

from ._pubdata import publish_values
from .conftest import StreamFactory, unique

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_timers_of_a_long_read_do_not_pile_up(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    # A read with a stop offset arms a silence timer (rpc_timeout) per read, and with
    # "grpc" a get(timeout) one more: each was cancelled and then held (with its call)
    # in the timer heap until its deadline, 6,000 entries for these 3,000 messages.
    name = new_stream()
    count = 3000
    publish_values(liftbridge_address, name, count)
    with Client([liftbridge_address], subscribe_transport=transport) as client:
        scheduler = client._core.scheduler()
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            for _ in range(count):
                sub.get(10)
            held = len(scheduler._heap)
        assert held <= 512, f"{held} timer entries held after reading {count} messages"


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_stream_deleted_by_another_client_fails_publishes_fast_once_judged_gone(
    liftbridge_address: str, liftbridge_client: Client, transport: str
) -> None:
    # The first publish after another client deleted the stream is retried for the
    # retry policy's max_delay (a restarting broker refuses publishes alike); the
    # stream then stayed in this client's metadata for good, so that every later
    # publish to it (and to each such stream) waited out max_delay again.
    name = unique()
    liftbridge_client.create_stream(name, name, partitions=2)
    with Client([liftbridge_address], retry=SHORT_RETRY, publish_transport=transport) as client:  # type: ignore[arg-type]
        client.publish(name, b"a", partition=1)
        client.fetch_metadata(name)  # known as a client using a partitioner knows it
        liftbridge_client.delete_stream(name)
        with pytest.raises(NoSuchStreamError):
            client.publish(name, b"b", partition=1)
        wait_until(lambda: client._core.metadata.cached_stream(name) is None, timeout=5)
        for partition in (0, 1, 1):
            started = time.monotonic()
            with pytest.raises(NoSuchStreamError):
                client.publish(name, b"c", partition=partition)
            assert time.monotonic() - started < 1.0
        # Created again (with another partition count), it is published to as before.
        liftbridge_client.create_stream(name, name, partitions=3)
        try:
            ack = client.publish(name, b"d", partition=2)
            assert ack is not None and ack.offset == 0
        finally:
            liftbridge_client.delete_stream(name)


def test_stats_of_many_partitions_with_their_broker_gone_take_one_retry_budget(
    liftbridge_address: str, new_stream: StreamFactory
) -> None:
    # stats() asks each read partition's leader for its high watermark, each under the
    # retry policy: with the broker gone, a subscribe_stream of 256 partitions held
    # stats() (and the liftbridge-stats thread) for 256 x max_delay, 43 minutes.
    name = new_stream(partitions=8)
    retry = RetryPolicy(max_attempts=100, max_delay=1.0, initial=0.05, maximum=0.2, jitter=0.0)
    with TcpProxy(liftbridge_address) as proxy:

        def via_proxy(address: str) -> str:
            return proxy.address if address == liftbridge_address else address

        with Client([proxy.address], address_translator=via_proxy, retry=retry) as client:
            with client.subscribe_stream(name) as sub:
                assert {lag.lag for lag in client.stats().lag} == {0}
                proxy.close()  # refuses connections from now on
                started = time.monotonic()
                stats = client.stats()
                took = time.monotonic() - started
                sub.close(5)
            assert len(stats.lag) == 8 and {lag.lag for lag in stats.lag} == {None}
            assert took < retry.max_delay + 1.5, f"stats() took {took:.1f}s"


def _library_objects() -> Counter[str]:
    gc.collect()
    return Counter(
        f"{type(o).__module__}.{type(o).__qualname__}"
        for o in gc.get_objects()
        if str(type(o).__module__).startswith(("liftbridge_sync", "h2.", "hpack."))
    )


def test_creating_using_and_deleting_streams_for_long_leaves_nothing_behind(
    liftbridge_address: str,
) -> None:
    # A long-running process that creates, uses and deletes uniquely named streams: after
    # a warm-up, what the library holds (its objects, threads, open files) must not grow
    # with the number of streams it went through.
    rr = RoundRobin()

    def churn(client: Client) -> None:
        name = unique("churn")
        client.create_stream(name, name, partitions=3)
        client.publish(name, b"k", key=b"a", partitioner=ByKey())
        client.publish_async(name, b"r", partitioner=rr).result(10)
        client.publish_batch(name, [b"b", b"c"], partition=2)
        with client.subscribe_stream(name, start=StartAt.earliest(), stop=StopAt.latest()) as s:
            assert sum(1 for _ in s) == 4
        with client.subscribe(
            name, partition=2, start=StartAt.earliest(), stop=StopAt.latest()
        ) as s:
            assert [m.value for m in s] == [b"b", b"c"]
        client.set_cursor("c", name, 2, 1)
        assert client.fetch_cursor("c", name, 2) == 1
        client.stats()
        client.delete_stream(name)

    for transport in ("h2", "grpc"):
        with Client(
            [liftbridge_address], publish_transport=transport, subscribe_transport=transport
        ) as client:  # type: ignore[arg-type]
            for _ in range(5):
                churn(client)
            before = _library_objects()
            threads, files = threading.active_count(), len(os.listdir("/proc/self/fd"))
            for _ in range(40):
                churn(client)
            after = _library_objects()
            # Cancelled timers wait in the heap until it is swept (bounded on its own).
            timers = "liftbridge_sync._runtime.scheduler.TimerHandle"
            assert len(client._core.scheduler()._heap) <= 512
            grown = {
                k: after[k] - before[k] for k in after if after[k] - before[k] > 20 and k != timers
            }
            assert not grown, f"{transport}: objects grew over 40 streams: {grown}"
            assert threading.active_count() <= threads
            assert len(os.listdir("/proc/self/fd")) <= files + 2
