"""The observable instruments: in flight, re-sends, reconnects and consumer lag.

Made once per meter provider, they read the stats of every client of the process that
reports through it (each a :class:`_Source`, told apart by ``messaging.client.id``).

Thread-safe: the sources change under a lock, renewed in a forked child.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

from liftbridge_sync.errors import LiftbridgeError
from liftbridge_sync.otel._conventions import SCOPE, SYSTEM

if TYPE_CHECKING:
    from liftbridge_sync._publishing.stats import PublisherStats
    from liftbridge_sync.stats import ClientStats

__all__ = ["observe"]


class _Source:
    """One client's readers of its stats, held weakly when they are bound methods (a
    client dropped without ``close()`` is not kept alive by the metrics SDK, and stops
    reporting once collected).

    Thread-safe: immutable after construction.
    """

    __slots__ = ("attributes", "pid", "_publisher", "_client")

    def __init__(
        self,
        publisher_stats: Callable[[], PublisherStats] | None,
        client_stats: Callable[[float], ClientStats] | None,
    ) -> None:
        self.pid = os.getpid()
        self.attributes = {
            "messaging.system": SYSTEM,
            "messaging.client.id": f"{self.pid}-{next(_CLIENT_IDS)}",
        }
        self._publisher = _reference(publisher_stats)
        self._client = _reference(client_stats)

    @property
    def alive(self) -> bool:
        """Whether its client still exists in this process (not inherited by a fork)."""
        refs = [ref for ref in (self._publisher, self._client) if ref is not None]
        return self.pid == os.getpid() and all(ref() is not None for ref in refs)

    def publisher(self) -> PublisherStats | None:
        """The publisher's counters (``None``: its client is gone)."""
        stats: PublisherStats | None = _read(self._publisher)
        return stats

    def client(self, timeout: float) -> ClientStats | None:
        """A client snapshot taken within ``timeout`` seconds (``None``: its client is
        gone, closed or unanswered)."""
        stats: ClientStats | None = _read(self._client, timeout)
        return stats


def _reference(read: Callable[..., Any] | None) -> Callable[[], Callable[..., Any] | None] | None:
    if read is None:
        return None
    if inspect.ismethod(read):
        return weakref.WeakMethod(read)
    return lambda: read  # a plain function: nothing to watch, held as given


def _read(reference: Callable[[], Callable[..., Any] | None] | None, *args: Any) -> Any:
    read = None if reference is None else reference()
    if read is None:
        return None
    try:
        return read(*args)
    except LiftbridgeError:  # closed client, cluster away: nothing to report now
        return None


class _Observed:
    """A meter provider's observable instruments, each made once, reading every client.

    The SDK answers a second creation of an instrument of the same name with the first
    one and drops the new callbacks: instruments made per client would report the first
    client of the process forever (the master's zeros in every gunicorn ``--preload``
    worker). So each provider gets one set, and every client is a :class:`_Source`.

    Thread-safe: the sources change under ``_LOCK``.
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self._sources: list[_Source] = []
        meter.create_observable_up_down_counter(
            "messaging.liftbridge.publish.in_flight",
            [self._in_flight],
            unit="{message}",
            description="Publishes awaiting their ack.",
        )
        meter.create_observable_counter(
            "messaging.liftbridge.publish.resent",
            [self._resends],
            unit="{message}",
            description="Publishes sent again, by cause (each may have stored a duplicate).",
        )
        meter.create_observable_counter(
            "messaging.liftbridge.publish.connects",
            [self._connects],
            unit="{connection}",
            description="Times the publish stream was opened (the first included).",
        )
        meter.create_observable_gauge(
            "messaging.liftbridge.consumer.lag",
            [self._lag],
            unit="{message}",
            description="High watermark minus the last offset read, per reader and partition.",
        )

    def add(self, source: _Source) -> None:
        """Report ``source`` from now on."""
        with _LOCK:
            self._sources.append(source)

    def discard(self, source: _Source) -> None:
        """Stop reporting ``source`` (its client closed)."""
        with _LOCK:
            self._sources = [s for s in self._sources if s is not source]

    def _live(self) -> list[_Source]:
        with _LOCK:
            self._sources = [s for s in self._sources if s.alive]
            return list(self._sources)

    def _publishers(self) -> Iterator[tuple[dict[str, Any], PublisherStats]]:
        for source in self._live():
            stats = source.publisher()
            if stats is not None:
                yield source.attributes, stats

    def _in_flight(self, _: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return [metrics.Observation(s.in_flight, a) for a, s in self._publishers()]

    def _connects(self, _: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return [metrics.Observation(s.connects, a) for a, s in self._publishers()]

    def _resends(self, _: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        found: list[metrics.Observation] = []
        for attributes, stats in self._publishers():
            causes = {
                "reconnect": stats.resent_after_reconnect,
                "stall": stats.resent_after_stall,
                "refusal": stats.resent_after_refusal,
            }
            found.extend(
                metrics.Observation(
                    count, {**attributes, "messaging.liftbridge.resend.cause": cause}
                )
                for cause, count in causes.items()
            )
        return found

    def _lag(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        # The leaders are asked for their high watermarks: the SDK holds the collection
        # (every instrument of the provider) until this returns, and drops it whole once
        # past its timeout. So the clients get half of what is left of it, together, the
        # rest left to the instruments after this one.
        found: list[metrics.Observation] = []
        budget = _LAG_SHARE * options.timeout_millis / 1000
        deadline = time.monotonic() + (budget if budget >= 0 else 0.0)  # NaN: none
        for source in self._live():
            stats = source.client(max(0.0, deadline - time.monotonic()))
            if stats is None:
                continue
            found.extend(
                metrics.Observation(
                    item.lag,
                    {
                        **source.attributes,
                        "messaging.destination.name": item.stream,
                        "messaging.destination.partition.id": str(item.partition),
                        "messaging.liftbridge.reader": item.reader,
                    },
                )
                for item in stats.lag
                if item.lag is not None
            )
        return found


#: Guards each :class:`_Observed`'s sources (a new lock in a forked child: a parent's
#: thread may have held it at the fork; so for :data:`_MAKING`).
_LOCK = threading.Lock()
#: Serialises the making of a provider's instruments: made twice, the second set would
#: be dropped by the SDK while its sources were the ones kept.
_MAKING = threading.Lock()
#: The instruments of each meter provider, made once (weakly keyed: a provider the
#: application dropped goes with them; one that cannot be weakly referenced is kept).
_OBSERVED: weakref.WeakKeyDictionary[Any, _Observed] = weakref.WeakKeyDictionary()
_OBSERVED_STRONGLY: dict[int, tuple[Any, _Observed]] = {}
_CLIENT_IDS = itertools.count(1)
#: The share of a collection's time the lag callback takes.
_LAG_SHARE = 0.5


def _new_locks_in_child() -> None:
    global _LOCK, _MAKING
    _LOCK = threading.Lock()
    _MAKING = threading.Lock()


os.register_at_fork(after_in_child=_new_locks_in_child)


def _observed(provider: metrics.MeterProvider) -> _Observed:
    """``provider``'s observable instruments, made on first call."""
    # Not under _LOCK, which the SDK's collection takes in the callbacks: the SDK may
    # hold its own locks then, and take them again to make instruments.
    with _MAKING:
        try:
            found = _OBSERVED.get(provider)
        except TypeError:  # not weakly referenceable
            kept = _OBSERVED_STRONGLY.get(id(provider))
            found = kept[1] if kept is not None else None
        if found is None:
            found = _Observed(provider.get_meter(SCOPE))
            try:
                _OBSERVED[provider] = found
            except TypeError:
                _OBSERVED_STRONGLY[id(provider)] = (provider, found)
        return found


def observe(
    provider: metrics.MeterProvider,
    publisher_stats: Callable[[], PublisherStats] | None,
    client_stats: Callable[[float], ClientStats] | None,
) -> Callable[[], None] | None:
    """Report the client's stats through ``provider``'s observable instruments.

    ``client_stats`` is given the seconds its snapshot may take (a share of the metric
    reader's collection timeout).

    Returns:
        What stops it (the client closes), or ``None`` if there is nothing to report.
    """
    if publisher_stats is None and client_stats is None:
        return None
    observed = _observed(provider)
    source = _Source(publisher_stats, client_stats)
    observed.add(source)
    return functools.partial(observed.discard, source)
