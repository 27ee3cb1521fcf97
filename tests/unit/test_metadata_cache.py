"""The metadata cache collapses concurrent refreshes without returning stale snapshots."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from liftbridge_sync._runtime.doorbell import WAIT_SLICE
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.metadata import _FORGOTTEN_KEPT, MetadataCache
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync.errors import BrokerUnavailableError, ClientClosedError, DeadlineExceededError
from liftbridge_sync.models import FrozenMap, Metadata, StreamInfo
from tests.waiting import wait_until


def _budget() -> Budget:
    """A refresh's default budget here: longer than any test waits."""
    return Budget.once(30.0)


def test_a_refresh_that_began_before_the_caller_asked_is_not_reused() -> None:
    fetches: list[int] = []
    release_first = threading.Event()
    first_started = threading.Event()

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        number = len(fetches)
        fetches.append(number)
        if number == 0:
            first_started.set()
            assert release_first.wait(10)
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=float(number))

    cache = MetadataCache(fetch, default_budget=_budget)
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

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        fetches.append(len(fetches))
        with gate:  # held by the test while waiters pile up
            pass
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=float(len(fetches)))

    cache = MetadataCache(fetch, default_budget=_budget)
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

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        return Metadata(
            brokers=(),
            streams=FrozenMap({n: StreamInfo(name=n, subject=n) for n in ("s", "t")}),
            fetched_at=now[0],
        )

    cache = MetadataCache(fetch, default_budget=_budget, clock=lambda: now[0])
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

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        entered.set()
        assert release.wait(10)
        return Metadata(brokers=(), streams=FrozenMap({}))

    cache = MetadataCache(fetch, default_budget=_budget)
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


class _CountingLock:
    """A lock that counts the threads that came to take it (having asked already)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.arrived = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.arrived += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def test_a_waiter_does_not_take_an_older_snapshot_for_a_failed_refresh() -> None:
    gate = threading.Event()
    fetches: list[int] = []

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        number = len(fetches)
        fetches.append(number)
        if number == 0:
            assert gate.wait(10)  # the two waiters ask meanwhile
        if number == 1:
            raise BrokerUnavailableError("no broker answered")
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=float(number))

    cache = MetadataCache(fetch, default_budget=_budget)
    lock = _CountingLock()
    cache._refresh_lock = lock  # type: ignore[assignment]
    first = threading.Thread(target=cache.refresh)
    first.start()
    wait_until(lambda: bool(fetches), what="the first refresh under way")
    results: list[Metadata | BaseException] = []

    def waiter() -> None:
        try:
            results.append(cache.refresh())
        except BrokerUnavailableError as exc:
            results.append(exc)

    waiters = [threading.Thread(target=waiter) for _ in range(2)]
    for thread in waiters:
        thread.start()
    wait_until(lambda: lock.arrived == 3, what="both waiters at the lock")
    gate.set()
    for thread in [first, *waiters]:
        thread.join(10)
    # One waiter's refresh failed (it says so); the other's answer must come from a
    # refresh that began after it asked, not the first one, which began before.
    failed = [r for r in results if isinstance(r, BaseException)]
    answered = [r for r in results if isinstance(r, Metadata)]
    assert len(failed) == 1
    assert [m.fetched_at for m in answered] == [2.0]


def test_a_merge_does_not_wait_for_a_full_refresh_in_progress() -> None:
    # A resubscribe keeps to its get(timeout) with a deadline on its own fetch; merging
    # that answer waited for another thread's full refresh (seconds against a stopped
    # broker), and a get(0.2) took 3 s in a rolling restart.
    entered, release = threading.Event(), threading.Event()

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        entered.set()
        assert release.wait(10)
        # Fetched before "t" was merged: its answer must not drop "t" again.
        return Metadata(brokers=(), streams=FrozenMap({"s": StreamInfo(name="s", subject="full")}))

    cache = MetadataCache(fetch, default_budget=_budget)
    cache.merge(Metadata(brokers=(), streams=FrozenMap({"u": StreamInfo(name="u", subject="old")})))
    refresher = threading.Thread(target=cache.refresh)
    refresher.start()
    try:
        assert entered.wait(10)
        partial = Metadata(
            brokers=(), streams=FrozenMap({"t": StreamInfo(name="t", subject="partial")})
        )
        merger = threading.Thread(target=cache.merge, args=(partial,))
        merger.start()
        merger.join(5)  # the refresh holds on until released
        assert not merger.is_alive()
        snapshot = cache.snapshot
        assert snapshot is not None and snapshot.streams["t"].subject == "partial"
        forgetter = threading.Thread(target=cache.forget_stream, args=("u",))
        forgetter.start()
        forgetter.join(5)
        assert not forgetter.is_alive()
    finally:
        release.set()
        refresher.join(10)
    # What changed while the refresh was under way stays changed.
    snapshot = cache.snapshot
    assert snapshot is not None
    assert {n: i.subject for n, i in snapshot.streams.items()} == {"s": "full", "t": "partial"}


def test_merges_without_a_full_refresh_keep_no_record_per_stream_name() -> None:
    # What a full refresh must keep was recorded for every merge and forget, and only a
    # full refresh trimmed it: a client that never refreshed in full (streams made,
    # used and deleted by name, each answer merged) kept one entry per name for good.
    calls: list[int] = []

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        calls.append(1)
        return Metadata(brokers=(), streams=FrozenMap({}))

    cache = MetadataCache(fetch, default_budget=_budget)
    for n in range(2000):
        name = f"temp-{n}"
        cache.merge(
            Metadata(brokers=(), streams=FrozenMap({name: StreamInfo(name=name, subject=name)}))
        )
        cache.merge(Metadata(brokers=(), streams=FrozenMap({})), gone=[name])
        cache.forget_stream(name)
    assert calls == []
    assert len(cache._changed) == 0
    snapshot = cache.snapshot
    assert snapshot is not None and dict(snapshot.streams) == {}
    # A refresh that failed forgets what it recorded too.
    failing = MetadataCache(
        lambda streams, budget: (_ for _ in ()).throw(BrokerUnavailableError("x")),
        default_budget=_budget,
    )
    try:
        failing.refresh()
    except BrokerUnavailableError:
        pass
    failing.merge(Metadata(brokers=(), streams=FrozenMap({"a": StreamInfo(name="a", subject="a")})))
    assert len(failing._changed) == 0


@contextlib.contextmanager
def _behind_a_stuck_refresh(
    default_budget: Callable[[], Budget] = _budget,
) -> Iterator[MetadataCache]:
    """A cache whose refresh, started on another thread, hangs (on a hung broker, say)
    until the block ends."""
    release = threading.Event()
    fetching = threading.Event()

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        fetching.set()
        assert release.wait(10)
        return Metadata(brokers=(), streams=FrozenMap({}), fetched_at=0.0)

    cache = MetadataCache(fetch, default_budget=default_budget)
    stuck = threading.Thread(target=cache.refresh, args=(Budget.once(30.0),))
    stuck.start()
    try:
        assert fetching.wait(10)
        yield cache
    finally:
        release.set()
        stuck.join(10)


def _refresh_on_a_thread(refresh: Callable[[], object]) -> list[BaseException]:
    """Run ``refresh`` on a thread that must end within 5 s; what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            refresh()
        except (DeadlineExceededError, ClientClosedError) as exc:
            errors.append(exc)

    waiter = threading.Thread(target=run)
    waiter.start()
    waiter.join(5)
    assert not waiter.is_alive()
    return errors


def test_a_refresh_within_a_budget_waits_for_another_thread_s_only_that_long() -> None:
    # The other thread's refresh is stuck: the waiter's call must not outlast its own
    # budget waiting for it.
    with _behind_a_stuck_refresh() as cache:
        now = time.monotonic()
        errors = _refresh_on_a_thread(
            lambda: cache.refresh(Budget(retry_until=now, ends=now + 0.2))
        )
    assert [type(e) for e in errors] == [DeadlineExceededError]


def test_a_refresh_waiting_for_another_thread_s_ends_when_its_budget_aborts() -> None:
    # A subscription's reader waits for another thread's refresh on its way to
    # resubscribe: its close() must end that wait, which nothing else wakes.
    abort = DialAbort()
    with _behind_a_stuck_refresh() as cache:
        now = time.monotonic()
        abort_at = now + 0.1
        timer = threading.Timer(0.1, abort.abort)
        timer.start()
        errors = _refresh_on_a_thread(
            lambda: cache.refresh(Budget(retry_until=now + 30, ends=now + 30, abort=abort))
        )
        assert time.monotonic() - abort_at < WAIT_SLICE + 0.5
        timer.join()
    assert [type(e) for e in errors] == [ClientClosedError]


def test_a_refresh_without_a_budget_waits_for_another_thread_s_only_its_default() -> None:
    # Without a budget, the wait for a refresh under way had no bound at all: behind one
    # stuck on a hung broker (or one kept to a longer budget), forever.
    with _behind_a_stuck_refresh(default_budget=lambda: Budget.once(0.2)) as cache:
        errors = _refresh_on_a_thread(cache.refresh)
    assert [type(e) for e in errors] == [DeadlineExceededError]


def _listing(*names: str) -> Metadata:
    return Metadata(
        brokers=(), streams=FrozenMap({n: StreamInfo(name=n, subject=n) for n in names})
    )


def _answering(*names: str) -> Callable[[Sequence[str], Budget | None], Metadata]:
    """A fetch whose every answer lists ``names``."""

    def fetch(streams: Sequence[str], budget: Budget | None = None) -> Metadata:
        return _listing(*names)

    return fetch


def test_a_stream_deleted_here_is_known_until_an_answer_lists_it_again() -> None:
    # What tells a resubscribe's NOT_FOUND for a stream this client deleted (gone at
    # once) from one a recovering server merely left out of its answer (retried).
    cache = MetadataCache(_answering("s"), default_budget=_budget)
    cache.merge(_listing("s"))
    assert not cache.deleted_here("s")
    cache.forget_stream("s")
    assert cache.deleted_here("s")
    cache.merge(_listing("t"))
    assert cache.deleted_here("s")  # an answer without it confirms nothing new
    cache.merge(_listing("s"))  # created again, by anyone
    assert not cache.deleted_here("s")
    cache.forget_stream("s")
    cache.refresh()  # a full answer listing it
    assert not cache.deleted_here("s")


def test_streams_deleted_here_are_remembered_up_to_a_bound() -> None:
    cache = MetadataCache(_answering(), default_budget=_budget)
    for number in range(_FORGOTTEN_KEPT + 10):
        cache.forget_stream(f"s{number}")
    assert not cache.deleted_here("s0")  # the oldest went first
    assert cache.deleted_here(f"s{_FORGOTTEN_KEPT + 9}")
    assert sum(cache.deleted_here(f"s{n}") for n in range(_FORGOTTEN_KEPT + 10)) == (
        _FORGOTTEN_KEPT
    )
