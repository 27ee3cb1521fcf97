"""A client's OpenTelemetry wiring: the optional API imported and set up on first publish.

Thread-safe: a function of its arguments (the caller builds it under its lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._runtime import fork as _fork
from liftbridge_sync.options import ClientOptions
from liftbridge_sync.stats import ClientStats

if TYPE_CHECKING:  # the optional OpenTelemetry API is imported on first publish only
    from liftbridge_sync.otel import Telemetry

__all__ = ["make_telemetry"]

#: The client's logger (the README lists it): telemetry is part of what a client does.
_log = logging.getLogger("liftbridge_sync.client")


def make_telemetry(
    options: ClientOptions,
    providers: tuple[Any, Any],
    publisher_stats: Callable[[], PublisherStats],
    client_stats: Callable[[float], ClientStats],
) -> Telemetry | None:
    """The client's telemetry, or ``None``: turned off, API absent, or no SDK configured.

    Args:
        options: The client's options (``telemetry``, ``trace_propagation``,
            ``batch_create_spans``).
        providers: The ``(tracer_provider, meter_provider)`` given to the client
            (``None`` each: the global ones).
        publisher_stats: Feeds the publisher's observable instruments.
        client_stats: Feeds the consumer-lag instrument, given the seconds its
            snapshot may take.
    """
    if not options.telemetry:
        return None
    try:
        from liftbridge_sync.otel import telemetry_for
    except ImportError:  # the optional opentelemetry-api is not installed
        _log.debug("OpenTelemetry API not installed: no traces or metrics")
        return None
    telemetry = telemetry_for(
        *providers,
        options.trace_propagation,
        publisher_stats=publisher_stats,
        client_stats=client_stats,
        batch_create_spans=options.batch_create_spans,
    )
    if telemetry is not None:
        # The SDK's providers exist now, and with them their exit hooks: flush first.
        _fork.flush_first_at_exit()
    return telemetry
