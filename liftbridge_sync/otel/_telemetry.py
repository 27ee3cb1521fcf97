"""A client's telemetry: each publishing call in its spans, and what makes it.

:func:`telemetry_for` builds a client's :class:`Telemetry` when an SDK is configured;
its ``trace_*`` methods wrap ``publish``, ``publish_async``, ``publish_batch`` and
``publish_to_subject``, each as the semantic conventions describe (see
:mod:`liftbridge_sync.otel`).

Thread-safe: see :class:`Telemetry`.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind

from liftbridge_sync.errors import ConfigurationError, LiftbridgeError
from liftbridge_sync.models import Ack
from liftbridge_sync.otel._conventions import metrics_configured, tracing_configured
from liftbridge_sync.otel._observed import observe
from liftbridge_sync.otel._propagation import caller_context
from liftbridge_sync.otel._spans import Creations, SendSpans

if TYPE_CHECKING:
    from liftbridge_sync._publishing.stats import PublisherStats
    from liftbridge_sync.stats import ClientStats

__all__ = ["BatchSender", "Outcomes", "Sender", "Telemetry", "telemetry_for"]

#: What a ``publish_batch`` sends: the outcome of each message, in order.
Outcomes = list[Ack | None | LiftbridgeError]
#: Sends a ``publish_batch``'s traced items, calling its second argument once all of
#: them are checked and framed, before any is submitted (never when one is refused).
BatchSender = Callable[[list[Any], Callable[[], None]], Outcomes]
#: Sends one publish given its headers: its future, correlation id and partition.
Sender = Callable[
    [Mapping[str, bytes] | None], tuple[concurrent.futures.Future[Ack | None], str, int]
]


def telemetry_for(
    tracer_provider: trace.TracerProvider | None,
    meter_provider: metrics.MeterProvider | None,
    propagate: bool,
    *,
    publisher_stats: Callable[[], PublisherStats] | None = None,
    client_stats: Callable[[float], ClientStats] | None = None,
    batch_create_spans: bool = True,
) -> Telemetry | None:
    """The client's telemetry, or ``None`` when no SDK is configured (nothing to do).

    ``publisher_stats`` and ``client_stats`` feed the observable instruments (in flight,
    re-sends, reconnects, consumer lag; ``client_stats`` is given the seconds its
    snapshot may take) when metrics are on, until the telemetry's
    :meth:`Telemetry.close`; bound methods are held weakly, plain functions as given.
    ``batch_create_spans``: a ``create`` span per message of a ``publish_batch`` (see
    :mod:`liftbridge_sync.otel`).

    Thread-safe: reads the global providers; the instruments are made once per provider.
    """
    tracer_provider = tracer_provider or trace.get_tracer_provider()
    meter_provider = meter_provider or metrics.get_meter_provider()
    tracing = tracing_configured(tracer_provider)
    metering = metrics_configured(meter_provider)
    if not tracing and not metering:
        return None
    telemetry = Telemetry(
        tracer_provider if tracing else None,
        meter_provider if metering else None,
        propagate,
        batch_create_spans=batch_create_spans,
    )
    if metering:
        telemetry._unobserve = observe(meter_provider, publisher_stats, client_stats)
    return telemetry


class Telemetry(SendSpans):
    """The spans and instruments of one client: :class:`SendSpans`, wrapped around each
    publishing call.

    Thread-safe: OpenTelemetry tracers and instruments are; nothing here is mutable but
    the client's registration with the observable instruments, which :meth:`close` ends.
    """

    def trace_send(
        self,
        stream: str,
        partition: int | None,
        headers: Mapping[str, bytes] | None,
        send: Sender,
    ) -> concurrent.futures.Future[Ack | None]:
        """One publish in its ``send`` span: ``send`` gets ``headers`` with the context,
        and returns its future, the correlation id and the partition it was sent with.

        The span ends when the future resolves, or at once if ``send`` raises.
        """
        return self._sent_in_span(stream, partition, headers, send)[0]

    def _sent_in_span(
        self,
        stream: str,
        partition: int | None,
        headers: Mapping[str, bytes] | None,
        send: Sender,
    ) -> tuple[concurrent.futures.Future[Ack | None], Callable[[], None]]:
        """``send`` in a new ``send`` span; its future and what ends the span (run by
        the future's resolution too, whichever comes first)."""
        started = time.monotonic()
        span = self.start_send(stream, partition)
        try:
            future, correlation_id, chosen = send(self.headers_with_context(span, headers))
        except BaseException as exc:  # refused before it was sent
            self.finish_send(span, stream, started, exc, partition=partition, sent=False)
            raise
        return future, self.finish_on(future, span, stream, started, correlation_id, chosen)

    def trace_publish(
        self,
        stream: str,
        partition: int | None,
        headers: Mapping[str, bytes] | None,
        send: Sender,
        wait: Callable[[concurrent.futures.Future[Ack | None]], Ack | None],
    ) -> Ack | None:
        """A synchronous publish in its ``send`` span: :meth:`trace_send`, then ``wait``.

        When ``wait`` returns (or raises) with the future resolved, the span has ended
        and the metrics are recorded: the future's done-callbacks run after its waiters
        are woken, on the thread that resolved it, so without this a ``publish()`` could
        return before its span ended. A wait interrupted before the outcome (a
        ``KeyboardInterrupt``) leaves the span to the future's resolution.
        """
        future, finish = self._sent_in_span(stream, partition, headers, send)
        try:
            return wait(future)
        finally:
            if future.done():
                finish()

    def trace_call(
        self,
        destination: str,
        headers: Mapping[str, bytes] | None,
        prepare: Callable[[Mapping[str, bytes] | None], Callable[[], Ack | None]],
        correlation_id: str | None = None,
    ) -> Ack | None:
        """A blocking publish (``publish_to_subject``) in its ``send`` span, named after
        its ``destination``: ``prepare`` gets ``headers`` with the context, checks the
        publish and returns what sends it and returns its ack. The span ends before
        this returns or raises."""
        started = time.monotonic()
        span = self.start_send(destination, None)
        try:
            call = prepare(self.headers_with_context(span, headers))
        except BaseException as exc:  # refused before it was sent
            self.finish_send(span, destination, started, exc, correlation_id, sent=False)
            raise
        try:
            ack = call()
        except BaseException as exc:
            self.finish_send(span, destination, started, exc, correlation_id)
            raise
        self.finish_send(span, destination, started, ack, correlation_id)
        return ack

    def trace_batch(
        self,
        stream: str,
        partition: int | None,
        items: list[Any],
        send: BatchSender,
    ) -> Outcomes:
        """A ``publish_batch`` in one ``send`` span: ``send`` gets the traced items.

        Each item becomes a ``(key, value, headers)`` triple whose headers carry its
        creation context: its own ``create`` span's, or (without create spans) the
        ``send`` span's; the ``send`` span links to the contexts it did not make. The
        ``create`` spans end once every item is framed; a batch refused before that was
        never sent, and its ``create`` spans end as errors, as its ``send`` span does.
        """
        started = time.monotonic()
        count = len(items)
        creates = Creations()
        if self._tracer is None or any(_malformed(item) for item in items):
            # Metrics only; or a batch publish_batch refuses (TypeError) as it is.
            span = self.start_send(stream, partition, count)
            traced = items
        elif self._create_spans:
            traced, links = self._with_creation_contexts(stream, partition, items, creates)
            span = self.start_send(stream, partition, count, links, SpanKind.CLIENT)
        else:
            triples = [_triple(item) for item in items]
            links = [link for _, _, headers in triples for link in caller_context(headers) or ()]
            span = self.start_send(stream, partition, count, links)
            # One injection for the batch: messages without headers share its result.
            bare = self.headers_with_context(span, None)
            traced = [
                (k, v, bare if h is None else self.headers_with_context(span, h))
                for k, v, h in triples
            ]
        try:
            outcomes = send(traced, creates.framed)
        except BaseException as exc:
            creates.refused(exc)
            # publish_batch refuses bad items and arguments before anything is sent.
            refused = not creates.done or isinstance(exc, TypeError | ConfigurationError)
            self.finish_send(span, stream, started, exc, count=count, sent=not refused)
            raise
        failed = next((o for o in outcomes if isinstance(o, LiftbridgeError)), None)
        self.finish_send(span, stream, started, failed, count=count)
        return outcomes

    def _with_creation_contexts(
        self, stream: str, partition: int | None, items: list[Any], creates: Creations
    ) -> tuple[list[Any], list[Link]]:
        """Each item with a ``create`` span's context in its headers (unless its caller
        set one), and the links of the batch's ``send`` span to each creation context.
        The ``create`` spans are left to ``creates`` to end."""
        traced: list[Any] = []
        links: list[Link] = []
        for item in items:
            key, value, headers = _triple(item)
            caller = caller_context(headers)
            if caller is not None:
                links.extend(caller)
                traced.append((key, value, headers))
                continue
            create = self.start_send(stream, partition, operation="create")
            assert create is not None  # create spans need a tracer
            traced.append((key, value, self.headers_with_context(create, headers)))
            creates.add(create)
            links.append(Link(create.get_span_context()))
        return traced, links


def _malformed(item: Any) -> bool:
    """A ``publish_batch`` item it refuses with a TypeError: a tuple of another length."""
    return isinstance(item, tuple) and len(item) not in (2, 3)


def _triple(item: Any) -> tuple[Any, Any, Any]:
    """A well-formed ``publish_batch`` item as ``(key, value, headers)``."""
    if isinstance(item, tuple):
        return item if len(item) == 3 else (*item, None)
    return (None, item, None)
