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
import threading
import time
from collections.abc import Callable, Iterable

from liftbridge_sync._publishing.stats import PublisherStats
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


def collect(core: ClientCore, publisher: PublisherStats) -> ClientStats:
    """Build a snapshot, asking each read partition's leader for its high watermark.

    Each leader is asked within the client's retry policy; one that does not answer
    leaves that partition's lag unknown rather than failing the snapshot.

    Thread-safe.
    """
    positions = positions_of(core.registered())
    watermarks: dict[tuple[str, int], int | None] = {}
    for stream, partition, _, _ in positions:
        key = (stream, partition)
        if key in watermarks:
            continue
        try:
            watermarks[key] = core.fetch_partition_metadata(stream, partition).high_watermark
        except LiftbridgeError as exc:
            _log.debug("stats: no high watermark of %s/%d: %s", stream, partition, exc)
            watermarks[key] = None
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

    Thread-safe: :meth:`start` and :meth:`close` may be called from any thread.
    """

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
        """Start the thread (once; later calls do nothing)."""
        if self._thread is not None:  # the common case, without the lock
            return
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="liftbridge-stats", daemon=True)
            self._thread.start()

    def close(self, timeout: float) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it to end."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._callback(self._take())
            except Exception:  # the user's callback: log it, keep reporting
                _log.exception("stats_callback failed")
