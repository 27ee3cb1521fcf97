"""The consuming side: a CONSUMER ``process`` span around the handling of a message.

Thread-safe: the counters are made once per provider; a span is the caller's thread's;
the deliveries counted are remembered under a lock.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from liftbridge_sync._wire.validate import check_provider
from liftbridge_sync.errors import ArgumentTypeError
from liftbridge_sync.models import Message
from liftbridge_sync.otel._conventions import (
    DURATION_BUCKETS,
    SCOPE,
    SYSTEM,
    error_type,
    metrics_configured,
)
from liftbridge_sync.otel._forking import measuring
from liftbridge_sync.otel._propagation import extract

__all__ = ["process"]


class _Instruments(NamedTuple):
    consumed: metrics.Counter
    duration: metrics.Histogram


@functools.lru_cache(maxsize=8)
def _instruments(provider: metrics.MeterProvider) -> _Instruments:
    # Made once per provider, both together: a process() that counts a message also
    # records how long its handling took.
    meter = provider.get_meter(SCOPE)
    return _Instruments(
        consumed=meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        ),
        duration=meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        ),
    )


#: The deliveries :func:`process` counted, by identity (a message read again is another
#: delivery, equal to the first), each forgotten once the application drops it.
_COUNTED: weakref.WeakValueDictionary[int, Message] = weakref.WeakValueDictionary()
#: Makes the look-up and the entry one step (a new lock in a forked child: a parent's
#: thread may have held it at the fork).
_COUNTING = threading.Lock()


def _new_lock_in_child() -> None:
    global _COUNTING
    _COUNTING = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def _first_processing(message: Message) -> bool:
    """Whether this is the first :func:`process` of this delivery of ``message``."""
    key = id(message)
    with _COUNTING:
        if _COUNTED.get(key) is message:
            return False
        try:
            _COUNTED[key] = message
        except TypeError:  # not weakly referenceable (no Message): counted every time
            pass
        return True


@contextlib.contextmanager
def process(
    message: Message,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    as_child: bool = True,
) -> Iterator[trace.Span]:
    """A CONSUMER ``process <stream>`` span around the handling of one message.

    The span is linked to the producer's span carried in the message's headers and,
    with ``as_child`` (the default), also its child, so the handling joins the
    producer's context: its trace, and its baggage, current in the block; otherwise it
    continues the current trace, in the current context. Errors raised in the
    block are recorded on the span, with their ``error.type``, and re-raised; so is a
    ``KeyboardInterrupt`` or ``SystemExit`` (the handling did not finish), but not the
    ``GeneratorExit`` of a generator closed in the block.
    ``messaging.client.consumed.messages`` counts the message, once per delivery
    (handling it again, as a retry does, is another span and duration but no other
    message consumed; the same message read again is another delivery), and
    ``messaging.process.duration`` records how long the block took (with the
    ``error.type`` of a failure).

    Raises:
        ArgumentTypeError: ``message`` is no :class:`~liftbridge_sync.Message`, a
            provider is no OpenTelemetry provider, or ``as_child`` no bool.

    Thread-safe: use it on the thread that handles the message.
    """
    if not isinstance(as_child, bool):  # as_child="no" would have joined as a child
        raise ArgumentTypeError(f"'as_child' must be a bool, got {type(as_child).__name__}")
    check_provider("tracer_provider", tracer_provider, "get_tracer")
    check_provider("meter_provider", meter_provider, "get_meter")
    producer = extract(message)  # checks it is a Message
    producer_span = trace.get_current_span(producer).get_span_context()
    links = [Link(producer_span)] if producer_span.is_valid else []
    tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE)
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": message.stream,
        "messaging.destination.partition.id": str(message.partition),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.liftbridge.offset": message.offset,
    }
    if message.key is not None:
        attributes["messaging.liftbridge.message.key"] = message.key.decode("utf-8", "replace")
    meters = meter_provider or metrics.get_meter_provider()
    points: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": message.stream,
        "messaging.destination.partition.id": str(message.partition),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
    }
    instruments = _instruments(meters) if metrics_configured(meters) else None
    if instruments is not None and _first_processing(message):
        with measuring():
            instruments.consumed.add(1, points)
    joined = producer if as_child and producer_span.is_valid else None
    started = time.monotonic()
    span = tracer.start_span(
        f"process {message.stream}",
        context=joined,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    )
    # Joined, the handling runs in the producer's context: its baggage too, not only its
    # trace (use_span alone would put the span in the consumer's context).
    token = None if joined is None else otel_context.attach(trace.set_span_in_context(span, joined))
    try:
        with trace.use_span(span, end_on_exit=True):
            try:
                yield span
            except Exception as exc:
                # The conventions' error.type of a failed operation, as a send span has
                # it; use_span records the exception and the status (for an Exception).
                span.set_attribute("error.type", error_type(exc))
                points["error.type"] = error_type(exc)
                raise
            except GeneratorExit:
                raise  # a generator handling the message was closed: no failure
            except BaseException as exc:
                # A KeyboardInterrupt or SystemExit left the handling unfinished too, but
                # use_span records only an Exception: the span says so itself.
                span.record_exception(exc, escaped=True)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.set_attribute("error.type", error_type(exc))
                points["error.type"] = error_type(exc)
                raise
            finally:
                if instruments is not None:  # the conventions' processing duration, the span's own
                    with measuring():
                        instruments.duration.record(time.monotonic() - started, points)
    finally:
        if token is not None:
            otel_context.detach(token)
