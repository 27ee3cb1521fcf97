"""What the OpenTelemetry messaging semantic conventions fix for every span and point.

The ``messaging.system`` value, the instrumentation scope, whether a provider is an
SDK's (anything else records nothing), and the ``error.type`` of a failure.

Thread-safe: constants and pure functions.
"""

from __future__ import annotations

from opentelemetry import metrics, trace

__all__ = [
    "DURATION_BUCKETS",
    "SCOPE",
    "SYSTEM",
    "error_type",
    "metrics_configured",
    "tracing_configured",
]

SYSTEM = "liftbridge"
SCOPE = "liftbridge_sync"
#: Bucket boundaries the conventions advise for operation and processing durations (s).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)


def tracing_configured(provider: trace.TracerProvider) -> bool:
    """Whether ``provider`` is an SDK's (the API's proxy and no-op ones record nothing)."""
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def metrics_configured(provider: metrics.MeterProvider) -> bool:
    """Whether ``provider`` is an SDK's (the API's proxy and no-op ones record nothing)."""
    # Before an SDK is set, the global provider is the API's private proxy class.
    return not isinstance(provider, metrics.NoOpMeterProvider) and (
        type(provider).__name__ != "_ProxyMeterProvider"
    )


def error_type(error: BaseException) -> str:
    """``error.type`` of a failed operation: the exception's fully qualified class name
    (``liftbridge_sync.errors.AckTimeoutError``), as the semantic conventions ask for an
    exception type and as the SDK records ``exception.type`` (a builtin's name alone).

    Thread-safe: a pure function.
    """
    cls = type(error)
    module = cls.__module__
    if not module or module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"
