"""Partitioners' partition count: fetched again when old, kept when no broker answers."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from liftbridge_sync import BrokerUnavailableError, RetryPolicy
from liftbridge_sync._transport.metadata import MetadataCache
from liftbridge_sync._transport.partition_counts import PartitionCounts
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync.models import FrozenMap, Metadata, PartitionInfo, StreamInfo


def _budget() -> Budget:
    """A refresh's default budget here: longer than any test waits."""
    return Budget.once(30.0)


def _metadata(partitions: int) -> Metadata:
    infos = {
        p: PartitionInfo(stream="s", id=p, leader="a", replicas=("a",), isr=("a",))
        for p in range(partitions)
    }
    stream = StreamInfo(name="s", subject="s", partitions=FrozenMap(infos))
    return Metadata(brokers=(), streams=FrozenMap({"s": stream}))


class _Server:
    """Answers FetchMetadata with ``partitions`` partitions, or fails."""

    def __init__(self) -> None:
        self.partitions = 2
        self.down = False
        self.fetches = 0

    def fetch(self, streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        self.fetches += 1
        if self.down:
            raise BrokerUnavailableError("no broker answered FetchMetadata")
        return _metadata(self.partitions)


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


def _counts(server: _Server, clock: list[float], max_age: float | None) -> PartitionCounts:
    cache = MetadataCache(server.fetch, default_budget=_budget, clock=lambda: clock[0])

    def refresh_once(streams: Sequence[str], deadline: float | None) -> None:
        # One pass, and a short one: the publish that asked waits for it.
        assert deadline is not None and deadline - time.monotonic() <= 1.0
        cache.merge(server.fetch(streams))

    def fetch_count(stream: str, budget: Budget) -> int:
        snapshot = server.fetch([stream])
        cache.merge(snapshot)
        return len(snapshot.streams[stream].partitions)

    return PartitionCounts(
        cache, max_age, refresh_once, fetch_count, RetryPolicy(), 1.0, time.sleep
    )


def test_an_old_count_is_fetched_again_once_and_a_silent_server_keeps_it(
    clock: list[float],
) -> None:
    server = _Server()
    counts = _counts(server, clock, 30.0)
    assert counts.count("s") == 2
    fetched = server.fetches
    server.partitions = 6
    clock[0] += 29.0
    assert counts.count("s") == 2  # young enough: the cache answers
    assert server.fetches == fetched
    clock[0] += 1.0
    assert counts.count("s") == 6
    assert server.fetches == fetched + 1
    assert counts.count("s") == 6
    assert server.fetches == fetched + 1
    # Old again, and nobody answers: the cached count goes on placing keys, and the
    # next attempt waits for another max age.
    server.down = True
    server.partitions = 3
    clock[0] += 30.0
    assert counts.count("s") == 6
    assert counts.count("s") == 6
    assert server.fetches == fetched + 2
    server.down = False
    clock[0] += 30.0
    assert counts.count("s") == 3


def test_no_max_age_keeps_the_first_count(clock: list[float]) -> None:
    server = _Server()
    counts = _counts(server, clock, None)
    assert counts.count("s") == 2
    server.partitions = 6
    clock[0] += 3600.0
    assert counts.count("s") == 2
