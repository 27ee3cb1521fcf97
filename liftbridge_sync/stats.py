"""One snapshot of what a client is doing: its publisher, its readers' lag, its brokers.

:meth:`Client.stats <liftbridge_sync.Client.stats>` builds a :class:`ClientStats`; with
``stats_callback=`` and ``stats_interval=`` a client hands one to the callback at that
interval on its ``liftbridge-stats`` thread (as confluent-kafka's ``stats_cb`` does).

Consumer lag is the partition's high watermark (its last committed offset, asked of its
leader) minus the last offset the reader took: how many committed messages it has not
read yet.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._transport import leader
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.errors import LiftbridgeError

__all__ = ["ClientStats", "PartitionLag"]

_log = logging.getLogger("liftbridge_sync.client")

#: ``(stream, partition, last offset taken or None, reader kind)``.
Position = tuple[str, int, "int | None", str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLag:
    """How far one reader of a partition is behind its high watermark.

    Immutable; safe to share between threads.
    """

    stream: str
    partition: int
    #: ``"subscription"``, ``"stream_subscription"`` or ``"consumer"``.
    reader: str
    #: The last offset the reader took (``None``: none yet).
    last_offset: int | None
    #: The partition's high watermark from its leader (``None``: it did not answer).
    high_watermark: int | None
    #: ``high_watermark - last_offset`` (from ``-1`` when nothing was read), never below
    #: 0; ``None`` when the high watermark is unknown.
    lag: int | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientStats:
    """A snapshot of a client (see :meth:`Client.stats <liftbridge_sync.Client.stats>`).

    Immutable; safe to share between threads.
    """

    #: ``time.time()`` when it was taken.
    taken_at: float
    publisher: PublisherStats
    #: One entry per partition being read, by each open reader.
    lag: tuple[PartitionLag, ...]
    #: Brokers the client has a gRPC channel to.
    connections: tuple[str, ...]

    @property
    def total_lag(self) -> int:
        """The sum of the known lags."""
        return sum(item.lag for item in self.lag if item.lag is not None)


def positions_of(readers: Iterable[object]) -> list[Position]:
    """The partitions the open readers among ``readers`` read, and how far they got.

    A reader reports through a ``read_positions()`` method; other objects are skipped.

    Thread-safe: each reader's method is.
    """
    found: list[Position] = []
    for reader in readers:
        report = getattr(reader, "read_positions", None)
        if callable(report):
            found.extend(report())
    return found


def collect(
    core: ClientCore, publisher: PublisherStats, timeout: float | None = None
) -> ClientStats:
    """Build a snapshot, asking each read partition's leader for its high watermark.

    Leaders are asked within the client's retry policy until one does not answer; the
    partitions after it are asked once each, within what is left of the policy's
    ``max_delay`` from the start, and not at all once that has passed. A partition whose
    leader did not answer has an unknown lag; the snapshot does not fail, and however
    many partitions are read, it takes about ``max_delay`` (plus one ``rpc_timeout``)
    at most.

    Args:
        timeout: Seconds the snapshot may take at most (``None``: as above), for a
            caller with a deadline of its own (a metric reader's collection). Within
            it, a leader is asked within the retry policy only if the whole policy
            fits in what is left; otherwise once, within what is left (a stale
            cached leader then leaves the lag unknown). None is asked once it is spent.

    Thread-safe.
    """
    positions = positions_of(core.registered())
    watermarks: dict[tuple[str, int], int | None] = {}
    # One budget for the snapshot: a retry policy's worth per partition held stats()
    # (and the liftbridge-stats thread) for partitions x max_delay with a broker gone.
    options = core.options
    started = time.monotonic()
    deadline = started + options.retry.max_delay
    end = math.inf if timeout is None else started + timeout
    # What one call under the retry policy may take (its last attempt starts by then).
    whole_policy = options.retry.max_delay + options.rpc_timeout
    failed = False
    for stream, partition, _, _ in positions:
        key = (stream, partition)
        if key in watermarks:
            continue
        watermarks[key] = None
        now = time.monotonic()
        left, bound = deadline - now, end - now
        if bound <= 0 or (failed and left <= 0):
            continue
        try:
            if failed or whole_policy > bound:
                limit = min(options.rpc_timeout, bound, left if failed else math.inf)
                found = leader.fetch_partition_metadata_once(core, stream, partition, limit)
            else:
                found = leader.fetch_partition_metadata(core, stream, partition)
        except LiftbridgeError as exc:
            _log.debug("stats: no high watermark of %s/%d: %s", stream, partition, exc)
            failed = True
            continue
        watermarks[key] = found.high_watermark
    lags = []
    for stream, partition, last, kind in positions:
        hw = watermarks[(stream, partition)]
        lag = None if hw is None else max(0, hw - (-1 if last is None else last))
        lags.append(
            PartitionLag(
                stream=stream,
                partition=partition,
                reader=kind,
                last_offset=last,
                high_watermark=hw,
                lag=lag,
            )
        )
    return ClientStats(
        taken_at=time.time(),
        publisher=publisher,
        lag=tuple(lags),
        connections=core.pool.addresses(),
    )


class StatsReporter:
    """The ``liftbridge-stats`` thread: a snapshot to a callback at an interval.

    Closing is two steps so the client can close its channels in between: :meth:`stop`
    (no callback starts after it) and :meth:`join` (wait for a callback in progress).

    Thread-safe: :meth:`start`, :meth:`stop` and :meth:`join` may be called from any
    thread, the callback included.
    """

    #: How long :meth:`join` waits at most for a callback in progress: the user's code,
    #: which the library cannot interrupt (only a callback stuck longer outlives close).
    CALLBACK_GRACE = 30.0

    def __init__(
        self,
        take: Callable[[], ClientStats],
        callback: Callable[[ClientStats], object],
        interval: float,
    ) -> None:
        self._take = take
        self._callback = callback
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def for_child(self) -> StatsReporter:
        """A reporter for a forked child: same callback, no thread yet."""
        return StatsReporter(self._take, self._callback, self._interval)

    def start(self) -> None:
        """Start the thread (once; later calls and calls after :meth:`stop` do nothing)."""
        if self._thread is not None:  # the common case, without the lock
            return
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="liftbridge-stats", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Start no callback from now on; a snapshot being taken is dropped."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Stop, then wait for the thread to end: for a callback in progress to return.

        Args:
            timeout: Seconds to wait at most (``None``: :attr:`CALLBACK_GRACE`). A thread
                still running after it is logged, not waited for.
        """
        self.stop()
        with self._lock:
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return  # never started, or the callback itself closes the client
        thread.join(self.CALLBACK_GRACE if timeout is None else timeout)
        if thread.is_alive():
            _log.warning(
                "stats_callback still running after %.1fs; close() returns without it",
                self.CALLBACK_GRACE if timeout is None else timeout,
            )

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                stats = self._take()
            except Exception:
                if self._stop.is_set():
                    return  # the client closed under the snapshot: nothing to report
                _log.exception("stats: no snapshot")
                continue
            # Checked again: close() may have begun while the snapshot was taken, and a
            # callback must not start once it has (close() waits only for one under way).
            if self._stop.is_set():
                return
            try:
                self._callback(stats)
            except Exception:  # the user's callback: log it, keep reporting
                _log.exception("stats_callback failed")
