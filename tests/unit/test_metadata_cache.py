"""The metadata cache collapses concurrent refreshes without returning stale snapshots."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from liftbridge_sync._transport.metadata import MetadataCache
from liftbridge_sync.models import FrozenMap, Metadata, StreamInfo
from tests.waiting import wait_until


def test_a_refresh_that_began_before_the_caller_asked_is_not_reused() -> None:
    fetches: list[int] = []
    release_first = threading.Event()
    first_started = threading.Event()

    def fetch(streams: Sequence[str]) -> Metadata:
        number = len(fetches)
        fetches.append(number)
        if number == 0:
            first_started.set()
            assert release_first.wait(10)
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=float(number))

    cache = MetadataCache(fetch)
    results: dict[str, Metadata] = {}
    early = threading.Thread(target=lambda: results.setdefault("early", cache.refresh()))
    early.start()
    assert first_started.wait(10)
    # Asks while the first fetch is in flight: that fetch may predate what it needs.
    late = threading.Thread(target=lambda: results.setdefault("late", cache.refresh()))
    late.start()
    release_first.set()
    early.join(10)
    late.join(10)
    assert results["early"].fetched_at == 0.0
    assert results["late"].fetched_at == 1.0
    assert fetches == [0, 1]


def test_waiters_share_a_refresh_that_began_after_they_asked() -> None:
    fetches: list[int] = []
    gate = threading.Lock()

    def fetch(streams: Sequence[str]) -> Metadata:
        fetches.append(len(fetches))
        with gate:  # held by the test while waiters pile up
            pass
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=float(len(fetches)))

    cache = MetadataCache(fetch)
    gate.acquire()
    threads = [threading.Thread(target=cache.refresh) for _ in range(8)]
    for thread in threads:
        thread.start()
    wait_until(lambda: bool(fetches), what="the first waiter inside its fetch")
    gate.release()
    for thread in threads:
        thread.join(10)
    # Whoever asked during the first fetch shares one second fetch: at most two in all.
    assert 1 <= len(fetches) <= 2


def test_a_stream_entry_older_than_the_max_age_is_claimed_by_one_caller() -> None:
    now = [100.0]

    def fetch(streams: Sequence[str]) -> Metadata:
        return Metadata(
            brokers=(),
            streams=FrozenMap({n: StreamInfo(name=n, subject=n) for n in ("s", "t")}),
            fetched_at=now[0],
        )

    cache = MetadataCache(fetch, clock=lambda: now[0])
    assert cache.claim_stale("s", 30.0)  # never fetched: stale
    cache.refresh()
    assert not cache.claim_stale("s", 30.0)
    now[0] += 30.0
    assert cache.claim_stale("s", 30.0)
    # The claim counts as fresh for the others until it is max_age old in turn.
    assert not cache.claim_stale("s", 30.0)
    assert cache.claim_stale("t", 30.0)  # each stream ages on its own
    now[0] += 29.0
    assert not cache.claim_stale("s", 30.0)
    # A partial fetch of one stream makes only that one fresh.
    now[0] += 5.0
    cache.merge(Metadata(brokers=(), streams=FrozenMap({"t": StreamInfo(name="t", subject="t")})))
    assert not cache.claim_stale("t", 30.0)
    assert cache.claim_stale("s", 30.0)
    cache.forget_stream("t")
    assert cache.claim_stale("t", 30.0)


def test_a_claim_does_not_wait_for_a_full_refresh_in_progress() -> None:
    entered, release = threading.Event(), threading.Event()

    def fetch(streams: Sequence[str]) -> Metadata:
        entered.set()
        assert release.wait(10)
        return Metadata(brokers=(), streams=FrozenMap({}))

    cache = MetadataCache(fetch)
    refresher = threading.Thread(target=cache.refresh)
    refresher.start()
    try:
        assert entered.wait(10)
        claimed: list[bool] = []
        claimer = threading.Thread(target=lambda: claimed.append(cache.claim_stale("s", 30.0)))
        claimer.start()
        # The refresh holds its lock until released: a claim that waited for it would
        # still be blocked after this join's bound.
        claimer.join(5)
        assert claimed == [True]
    finally:
        release.set()
        refresher.join(10)
