"""Client.stats(): lag of every kind of reader, the stats callback thread, the lag gauge."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from liftbridge_sync import Client, ClientStats, ConfigurationError, StartAt
from tests.waiting import wait_until

from .conftest import unique

pytestmark = pytest.mark.integration


def _lags(stats: ClientStats) -> dict[tuple[str, int, str], int | None]:
    return {(item.stream, item.partition, item.reader): item.lag for item in stats.lag}


def test_lag_of_subscriptions_stream_subscriptions_and_consumers(
    liftbridge_address: str,
) -> None:
    name = unique("stats")
    with Client([liftbridge_address]) as client:
        client.create_stream(name, name, partitions=2)
        for i in range(10):
            client.publish(name, f"m{i}".encode(), partition=i % 2)  # offsets 0..4 each
        assert client.stats().lag == ()

        with client.subscribe(name, partition=0, start=StartAt.earliest()) as sub:
            first = [sub.get(10), sub.get(10)]  # offsets 0 and 1 of 0..4
            assert [m.offset for m in first] == [0, 1]
            with client.subscribe_stream(name, start=StartAt.earliest()) as whole:
                taken = [whole.get(10) for _ in range(10)]
                assert len(taken) == 10
                with client.consumer(
                    unique("group"), streams=[name], auto_commit=None, start=StartAt.earliest()
                ) as consumer:
                    consumer.get(30)
                    wait_until(lambda: len(consumer.assignment()) == 2, timeout=30)
                    stats = client.stats()
        after = client.stats()

    lags = _lags(stats)
    assert lags[(name, 0, "subscription")] == 3  # read 0..1 of 0..4
    assert lags[(name, 0, "stream_subscription")] == 0
    assert lags[(name, 1, "stream_subscription")] == 0
    consumer_lags = [lag or 0 for (_, _, kind), lag in lags.items() if kind == "consumer"]
    assert sorted(consumer_lags) == [4, 5]  # one message taken of one partition
    assert {i.high_watermark for i in stats.lag} == {4}
    assert stats.total_lag == sum(v for v in lags.values() if v is not None)
    assert liftbridge_address in stats.connections
    assert stats.publisher.connects >= 1
    assert after.lag == ()  # closed readers are not reported


def test_stats_callback_runs_on_its_thread_and_stops_with_close(liftbridge_address: str) -> None:
    seen: list[ClientStats] = []
    threads: set[str] = set()
    arrived = threading.Event()

    def callback(stats: ClientStats) -> None:
        threads.add(threading.current_thread().name)
        seen.append(stats)
        if len(seen) >= 2:
            arrived.set()

    client = Client([liftbridge_address], stats_callback=callback, stats_interval=0.05)
    assert not [t for t in threading.enumerate() if t.name == "liftbridge-stats"]
    client.fetch_metadata()  # first use starts the thread
    assert arrived.wait(10)
    client.close()
    assert threads == {"liftbridge-stats"}
    assert not [t for t in threading.enumerate() if t.name == "liftbridge-stats"]

    with pytest.raises(ConfigurationError):
        Client([liftbridge_address], stats_callback=callback, stats_interval=0)
    with pytest.raises(ConfigurationError):
        Client([liftbridge_address], stats_callback="not callable")  # type: ignore[arg-type]


def test_the_lag_gauge_and_publisher_instruments(liftbridge_address: str) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    name = unique("stats")
    try:
        with Client([liftbridge_address], meter_provider=meters) as client:
            client.create_stream(name, name)
            for i in range(5):
                client.publish(name, f"m{i}".encode())
            with client.subscribe(name, start=StartAt.earliest()) as sub:
                sub.get(10)
                data = reader.get_metrics_data()
        assert data is not None
        found: dict[str, list[Any]] = {
            m.name: list(m.data.data_points)
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        }
        (lag,) = found["messaging.liftbridge.consumer.lag"]
        assert lag.value == 4
        assert lag.attributes["messaging.destination.name"] == name
        (connects,) = found["messaging.liftbridge.publish.connects"]
        assert connects.value >= 1
        assert "messaging.liftbridge.publish.in_flight" in found
        assert "messaging.liftbridge.publish.resent" in found
    finally:
        meters.shutdown()
