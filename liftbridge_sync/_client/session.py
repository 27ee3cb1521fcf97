"""One client's state in this process, and its life: first use, fork, close.

A :class:`~liftbridge_sync.Client` is a facade over a :class:`Session`: the session owns
the core (channels, metadata, retries), the publisher and telemetry made on first
publish, and the ``liftbridge-stats`` reporter. It is what the process-level fork and
exit hooks (:mod:`liftbridge_sync._runtime.fork`) see.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from liftbridge_sync._client.telemetry import make_telemetry
from liftbridge_sync._durations import check_seconds
from liftbridge_sync._publishing.publisher import Publisher
from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._runtime import fork as _fork
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.speedups import note_fallback
from liftbridge_sync._wire.validate import check_provider, check_timeout
from liftbridge_sync.errors import ClientClosedError, ConfigurationError, LiftbridgeError
from liftbridge_sync.options import ClientOptions
from liftbridge_sync.stats import ClientStats, StatsReporter, collect

if TYPE_CHECKING:
    from liftbridge_sync.otel import Telemetry

__all__ = ["Session"]


class Session:
    """A client's core, publisher, telemetry and stats reporter, fresh after a fork.

    Args:
        options: The client's options.
        tracer_provider: OpenTelemetry tracer provider (``None``: the global one).
        meter_provider: OpenTelemetry meter provider (``None``: the global one).
        stats_callback: Called with a :class:`ClientStats` every ``stats_interval``
            seconds on the ``liftbridge-stats`` thread, or ``None``.
        stats_interval: Seconds between two ``stats_callback`` calls (finite, at least
            0.001).

    Raises:
        ConfigurationError: on a bad ``stats_callback`` or ``stats_interval``.
        ArgumentTypeError: a provider that is no OpenTelemetry provider.

    Thread-safe: :meth:`check`, :meth:`get_publisher`, :meth:`close` and the stats may be
    called from any thread; the fork hook runs alone in the child.
    """

    __slots__ = (
        "__weakref__",
        "closed",
        "core",
        "lock",
        "options",
        "pid",
        "providers",
        "publisher",
        "reporter",
        "telemetry",
        "telemetry_made",
    )

    def __init__(
        self,
        options: ClientOptions,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        stats_callback: Callable[[ClientStats], object] | None = None,
        stats_interval: float = 60.0,
    ) -> None:
        if stats_callback is not None and not callable(stats_callback):
            raise ConfigurationError("'stats_callback' must be a callable or None")
        check_provider("tracer_provider", tracer_provider, "get_tracer")
        check_provider("meter_provider", meter_provider, "get_meter")
        interval = check_seconds(
            "stats_interval", stats_interval, allow_zero=False, unlimited=False, minimum=0.001
        )
        assert interval is not None  # unlimited=False: None and inf were refused
        #: The ``liftbridge-stats`` thread's, started with the first use of the client.
        self.reporter = (
            StatsReporter(self.stats, stats_callback, interval) if stats_callback else None
        )
        self.options = options
        #: OpenTelemetry providers given to the client (else the global ones).
        self.providers = (tracer_provider, meter_provider)
        #: Made by the first publish (:meth:`get_telemetry`): ``None`` unless an
        #: OpenTelemetry SDK is configured.
        self.telemetry: Telemetry | None = None
        #: Whether :attr:`telemetry` was made (in this process).
        self.telemetry_made = False
        self.core = ClientCore(options)
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.closed = False
        #: Made on first publish (:meth:`get_publisher`); read without the lock.
        self.publisher: Publisher | None = None
        _fork.track(self)
        note_fallback()

    def check(self) -> ClientCore:
        """Guard at every public entry point: not closed; fresh after a fork.

        Raises:
            ClientClosedError: the client is closed.
        """
        if self.closed:
            raise ClientClosedError("client is closed")
        if self.pid != os.getpid():
            # The at-fork hook normally did this already (a fork through os.fork); a
            # child made some other way (a raw clone) lands here.
            self._after_fork_in_child()
        if self.reporter is not None:
            self.reporter.start()  # once; later calls return at once
        return self.core

    def get_publisher(self) -> Publisher:
        """The publisher, made (with the telemetry) on first call."""
        with self.lock:
            if self.publisher is None:
                if self.reporter is not None:
                    self.reporter.start()
                self.get_telemetry()
                publisher = Publisher(self.core)
                self.core.register(publisher)
                self.publisher = publisher
            return self.publisher

    def get_telemetry(self) -> Telemetry | None:
        """The telemetry, made on first call (a publish: with the publisher, or by
        ``publish_to_subject``): once, so a client reports as one."""
        if self.telemetry_made:
            return self.telemetry
        with self.lock:
            if not self.telemetry_made:
                self.telemetry = make_telemetry(
                    self.options, self.providers, self.publisher_stats, self.stats
                )
                self.telemetry_made = True
            return self.telemetry

    def publisher_stats(self) -> PublisherStats:
        """The publisher's counters (all zero before the first publish)."""
        publisher = self.publisher
        return PublisherStats() if publisher is None else publisher.stats()

    def stats(self, timeout: float | None = None) -> ClientStats:
        """One snapshot: the publisher's counters, each reader's lag, the channels
        (within ``timeout`` seconds: see :func:`~liftbridge_sync.stats.collect`)."""
        core = self.check()
        return collect(core, self.publisher_stats(), timeout)

    def flush(self, timeout: float | None) -> None:
        """Wait until every publish made so far has been acknowledged or has failed."""
        self.check()
        seconds = check_timeout("timeout", timeout)
        publisher = self.publisher
        if publisher is not None:
            publisher.flush(seconds)

    def close(self, timeout: float | None) -> None:
        """Close subscriptions and the publisher, then the channels. Idempotent.

        The stats thread starts no callback once this began and is joined before it
        returns: a callback in progress is waited for (at most
        :attr:`StatsReporter.CALLBACK_GRACE` seconds), whatever ``timeout`` is.
        """
        seconds = check_timeout("timeout", timeout)
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if self.telemetry is not None:
            self.telemetry.close()  # a closed client's stats are reported no more
        if self.pid != os.getpid():
            return  # a forked child must not touch its parent's channels
        reporter = self.reporter
        if reporter is not None:
            reporter.stop()  # first: no callback starts while the channels close
        # Closing the channels also ends a snapshot's RPCs at once, so the join below
        # waits only for a callback already under way.
        self.core.close(seconds)
        if reporter is not None:
            reporter.join()

    # The names the fork and exit hooks call (``_runtime.fork.ForkAware``).

    def _after_fork_in_child(self) -> None:
        # Runs in the child right after fork: locks may have been held by parent threads
        # that do not exist here, so replace them, and start over with a fresh core. The
        # parent's gRPC objects are left untouched (and unused) in the child.
        self.lock = threading.RLock()
        self.core.abandon_after_fork()
        self.core = ClientCore(self.options)
        if self.publisher is not None:  # its futures carried across would never resolve
            self.publisher.fail_in_forked_child()
        self.publisher = None
        # The parent's reports the parent's pid; the child's is made by its first publish.
        self.telemetry = None
        self.telemetry_made = False
        if self.reporter is not None:  # its thread is the parent's
            self.reporter = self.reporter.for_child()
        self.pid = os.getpid()

    def left_open(self) -> bool:
        """Whether the client was dropped holding what only :meth:`close` releases."""
        return (
            not self.closed
            and self.pid == os.getpid()
            and (self.publisher is not None or self.core.holds_resources())
        )

    def _flush_at_exit(self, timeout: float) -> None:
        # Only a client with telemetry: its spans must end before the SDK shuts down.
        publisher = self.publisher
        if self.telemetry is None or publisher is None or self.closed:
            return
        if self.pid != os.getpid():
            return
        deadline = time.monotonic() + timeout
        try:
            publisher.flush(timeout)
        except (TimeoutError, LiftbridgeError):
            pass  # those still pending fail at the close at exit; nobody is left to tell
        # The last publishes' spans end in their futures' done-callbacks, which run on
        # the liftbridge-publisher thread after flush() has woken.
        publisher.barrier(max(0.0, deadline - time.monotonic()))

    def _close_at_exit(self) -> None:
        if self.pid == os.getpid() and not self.closed:
            # What an earlier flush at exit left of the grace (5 s for both together).
            self.close(timeout=_fork.exit_time_left())
