"""The client's cached view of cluster metadata."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Sequence

from liftbridge_sync._runtime.doorbell import wait_sliced
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync.errors import ConfigurationError, DeadlineExceededError
from liftbridge_sync.models import BrokerInfo, FrozenMap, Metadata, StreamInfo
from liftbridge_sync.options import parse_address

__all__ = ["MetadataCache", "dialable_brokers", "translate_broker"]

#: Fetches some streams' metadata (all: none named), within a budget if one is given.
Fetcher = Callable[[Sequence[str], Budget | None], Metadata]

#: Streams deleted here that :meth:`MetadataCache.deleted_here` remembers at most.
_FORGOTTEN_KEPT = 1024


def translate_broker(broker: BrokerInfo, translator: Callable[[str], str]) -> BrokerInfo:
    """``broker`` with the address ``translator`` maps its advertised one to.

    Raises:
        ConfigurationError: if the translator fails or returns something that is not a
            ``host:port`` str; the message names the advertised address.

    Thread-safe if ``translator`` is.
    """
    advertised = broker.address
    try:
        translated = translator(advertised)
    except Exception as exc:
        raise ConfigurationError(
            f"address_translator failed for {advertised!r}: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        host, port = parse_address(translated)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"address_translator returned {translated!r} for {advertised!r}: {exc}"
        ) from None
    if (host, port) == (broker.host, broker.port):
        return broker
    return dataclasses.replace(broker, host=host, port=port, advertised=advertised)


def dialable_brokers(
    brokers: tuple[BrokerInfo, ...], warn: Callable[[str], object]
) -> tuple[BrokerInfo, ...]:
    """``brokers`` without those whose advertised address cannot be dialled, each of
    which is told to ``warn``.

    The address comes from the server, not from the user: dialled, it failed calls with
    a ``ConfigurationError`` about an address the user never gave, or worse, gRPC cut
    a host at a NUL and dialled the host before it. Left out, the broker is never
    dialled; a partition it leads has no known leader (a retryable
    :class:`~liftbridge_sync.errors.NotLeaderError`) until it advertises a valid
    address, or an ``address_translator`` maps it to one.

    Thread-safe if ``warn`` is.
    """
    kept: list[BrokerInfo] = []
    for broker in brokers:
        try:
            parse_address(broker.address)
        except ConfigurationError as exc:
            warn(
                f"broker {broker.id!r} advertised {broker.address!r}, which cannot be "
                f"dialled ({exc}): left out of the broker list; fix its advertised host "
                "or map it with address_translator"
            )
            continue
        kept.append(broker)
    return brokers if len(kept) == len(brokers) else tuple(kept)


class MetadataCache:
    """Holds the latest :class:`Metadata` snapshot and refreshes it on demand.

    Snapshots are immutable and swapped atomically, so readers never lock. Concurrent
    refreshes collapse into one RPC: a thread that waited for another thread's refresh
    uses its result, provided that refresh *started* after it asked (one that started
    earlier may predate, say, the stream the waiting thread just created) and succeeded
    (else it fetches itself). Folding in a partial answer (:meth:`merge`), a stored
    one or a forgotten stream never waits for a refresh under way, which keeps what
    they changed meanwhile. Each stream's entry has an age, so that a caller can have it
    fetched again when it is old (:meth:`claim_stale`).

    Args:
        fetch: Fetches metadata, within the budget it is given.
        default_budget: The budget of a refresh asked for without one (a call's whole
            retry policy, starting now): its wait for another thread's refresh and its
            own fetch keep to it together.
        clock: The clock of the entries' ages.
        on_brokers: Called after each update that replaced the broker list.

    Thread-safe.
    """

    def __init__(
        self,
        fetch: Fetcher,
        *,
        default_budget: Callable[[], Budget],
        clock: Callable[[], float] = time.monotonic,
        on_brokers: Callable[[], None] | None = None,
    ) -> None:
        self._fetch = fetch
        self._default_budget = default_budget
        #: Called (outside the lock) after each update that replaced the broker list.
        self._on_brokers = on_brokers or (lambda: None)
        self._clock = clock
        self._snapshot: Metadata | None = None
        #: Held across a whole full refresh (its fetch included): one at a time.
        self._refresh_lock = threading.Lock()
        #: Guards the state below and the swap of ``_snapshot``; never held across a
        #: fetch, so that folding in a partial answer (a resubscribe's, kept to its
        #: ``get(timeout)``) does not wait for a full refresh stuck on a stopped broker.
        self._state_lock = threading.Lock()
        #: Full refreshes started so far (each runs entirely under the refresh lock).
        self._started = 0
        #: The number (in ``_started``) of the latest full refresh that succeeded.
        self._succeeded = 0
        #: When each cached stream was last fetched (or its refresh last claimed).
        self._fetched: dict[str, float] = {}
        #: Merges and forgets so far, and the number of the latest one of each stream
        #: made while a full refresh was under way (only those: one began later sees
        #: the earlier ones in the cache), which that refresh keeps.
        self._changes = 0
        self._changed: dict[str, int] = {}
        #: A full refresh is fetching (``_changed`` is recorded meanwhile).
        self._refreshing = False
        #: Streams this client deleted (see :meth:`forget_stream`) and no answer has
        #: listed since, oldest first, at most ``_FORGOTTEN_KEPT``.
        self._forgotten: dict[str, None] = {}
        #: Serializes claims only: the refresh lock is held across whole fetches, and a
        #: publish asking for its count must not wait for one.
        self._claim_lock = threading.Lock()

    @property
    def snapshot(self) -> Metadata | None:
        """The latest snapshot, or ``None`` before the first fetch."""
        return self._snapshot

    def cached_stream(self, name: str) -> StreamInfo | None:
        """``name``'s metadata as the cache has it (``None``: not known there)."""
        snapshot = self._snapshot
        return None if snapshot is None else snapshot.streams.get(name)

    def get(self, budget: Budget | None = None) -> Metadata:
        """The cached snapshot, fetching one first (within ``budget``) if there is none."""
        snapshot = self._snapshot
        return snapshot if snapshot is not None else self.refresh(budget)

    def refresh(self, budget: Budget | None = None) -> Metadata:
        """Fetch all metadata from the server and cache it.

        If another thread is already refreshing, wait for it and return its snapshot
        (provided it began after this call and succeeded).

        Args:
            budget: What is left of the time of the call this refresh is part of: the
                fetch keeps to it, and so does the wait for another thread's refresh
                (which its ``abort`` ends too). ``None``: the default budget (a whole
                retry policy from now), kept by both together; waiting without a bound,
                then fetching under a policy of its own, such a refresh took up to
                twice its policy's time, or forever behind a refresh that hung.

        Raises:
            DeadlineExceededError: ``budget`` ran out while another thread refreshed.
            ClientClosedError: ``budget.abort`` aborted.
        """
        asked = self._started
        if budget is None:
            budget = self._default_budget()
        if not self._lock_refresh(budget):
            raise DeadlineExceededError(
                "metadata refresh: another thread's refresh outlasted the call's retry policy",
                code="DEADLINE_EXCEEDED",
            )
        try:
            snapshot, fetched = self._refresh_locked(asked, budget)
        finally:
            self._refresh_lock.release()
        if fetched:
            self._on_brokers()
        return snapshot

    def _lock_refresh(self, budget: Budget) -> bool:
        """Take the refresh lock within ``budget`` (``False``: it ran out first).

        Raises:
            ClientClosedError: ``budget.abort`` aborted.
        """
        abort = budget.abort
        if abort is None:
            return self._refresh_lock.acquire(timeout=max(0.0, budget.ends - time.monotonic()))

        def taken(step: float) -> bool:
            abort.check()
            return self._refresh_lock.acquire(timeout=step)

        # In slices, looking at the abort before each: nothing can wake a lock's waiter
        # (another thread's refresh holds it for up to its retry policy).
        return wait_sliced(taken, budget.ends - time.monotonic())

    def _refresh_locked(self, asked: int, budget: Budget) -> tuple[Metadata, bool]:
        """:meth:`refresh` with the refresh lock held: the snapshot, and whether this
        call fetched it (not another thread's refresh)."""
        with self._state_lock:
            snapshot = self._snapshot
            if self._succeeded > asked and snapshot is not None:
                return snapshot, False  # a refresh that began after we asked succeeded
            self._started += 1
            number = self._started
            began = self._changes
            self._refreshing = True
        try:
            fetched = self._fetch((), budget)
        except BaseException:
            with self._state_lock:
                self._refreshing = False
                self._changed = {}
            raise
        with self._state_lock:
            snapshot = self._keep_changes(fetched, began)
            self._snapshot = snapshot
            self._succeeded = max(self._succeeded, number)
            self._fetched = dict.fromkeys(snapshot.streams, self._clock())
            self._forgotten = {n: None for n in self._forgotten if n not in snapshot.streams}
            # Refreshes run one at a time: the next one begins after these, and finds
            # them in the cache. (Kept, one entry per stream name ever merged grew
            # without end in a client that never refreshed in full.)
            self._refreshing = False
            self._changed = {}
        return snapshot, True

    def _keep_changes(self, fetched: Metadata, began: int) -> Metadata:
        """``fetched`` with the streams merged or forgotten since change ``began`` as
        they are now (a stream created meanwhile may be missing from ``fetched``).
        Call with the state lock held."""
        later = [name for name, change in self._changed.items() if change > began]
        if not later:
            return fetched
        current = self._snapshot
        streams = dict(fetched.streams)
        for name in later:
            info = None if current is None else current.streams.get(name)
            if info is None:
                streams.pop(name, None)
            else:
                streams[name] = info
        return dataclasses.replace(fetched, streams=FrozenMap(streams))

    def store(self, snapshot: Metadata) -> None:
        """Replace the cache with a snapshot of every stream fetched by someone else."""
        with self._state_lock:
            self._started += 1
            self._succeeded = self._started
            self._snapshot = snapshot
            self._fetched = dict.fromkeys(snapshot.streams, self._clock())
            self._forgotten = {n: None for n in self._forgotten if n not in snapshot.streams}
        self._on_brokers()

    def merge(self, partial: Metadata, *, gone: Collection[str] = ()) -> None:
        """Fold a snapshot of some streams into the cache (brokers are replaced).

        Args:
            partial: The answer for some streams.
            gone: Streams asked for that the cache drops unless ``partial`` has them.
                Only for streams already judged deleted: a broker still rebuilding its
                streams after a restart answers without them too.
        """
        with self._state_lock:
            dropped = [name for name in gone if name not in partial.streams]
            self._changes += 1
            if self._refreshing:
                self._changed.update(dict.fromkeys([*partial.streams, *dropped], self._changes))
            now = self._clock()
            for name in partial.streams:
                self._forgotten.pop(name, None)
            for name in dropped:
                self._fetched.pop(name, None)
            self._fetched.update(dict.fromkeys(partial.streams, now))
            current = self._snapshot
            if current is None:
                self._snapshot = partial
            else:
                streams = dict(current.streams)
                for name in dropped:
                    streams.pop(name, None)
                streams.update(partial.streams)
                self._snapshot = Metadata(
                    brokers=partial.brokers or current.brokers,
                    streams=FrozenMap(streams),
                    fetched_at=time.monotonic(),
                )
        if partial.brokers:
            self._on_brokers()

    def forget_stream(self, name: str) -> None:
        """Drop a stream from the cache (after it was deleted)."""
        with self._state_lock:
            self._forgotten.pop(name, None)
            self._forgotten[name] = None
            if len(self._forgotten) > _FORGOTTEN_KEPT:
                del self._forgotten[next(iter(self._forgotten))]
            self._changes += 1
            if self._refreshing:
                self._changed[name] = self._changes
            self._fetched.pop(name, None)
            current = self._snapshot
            if current is not None and name in current.streams:
                streams = {k: v for k, v in current.streams.items() if k != name}
                self._snapshot = Metadata(
                    brokers=current.brokers,
                    streams=FrozenMap(streams),
                    fetched_at=current.fetched_at,
                )

    def deleted_here(self, name: str) -> bool:
        """Whether this client deleted ``name`` and no answer has listed it since."""
        return name in self._forgotten

    def claim_stale(self, name: str, max_age: float) -> bool:
        """Whether ``name``'s cached entry is older than ``max_age`` seconds; if so, the
        caller is the one to refetch it: the entry counts as fresh for everyone else
        meanwhile (and for ``max_age`` more if that refetch fails), so that threads
        publishing together do not all ask the server at once.
        """
        fetched = self._fetched.get(name)
        now = self._clock()
        if fetched is not None and now - fetched < max_age:
            return False  # the common case, without the lock
        with self._claim_lock:
            fetched = self._fetched.get(name)
            if fetched is not None and now - fetched < max_age:
                return False
            self._fetched[name] = now
            return True
