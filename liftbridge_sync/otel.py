"""OpenTelemetry traces and metrics (extra ``otel``: ``opentelemetry-api`` only).

A :class:`~liftbridge_sync.Client` traces its publishes and records messaging metrics by
itself once an OpenTelemetry SDK is configured (the global providers, or the
``tracer_provider=``/``meter_provider=`` given to the client). Without the API
installed, or with no SDK configured when the client first publishes, nothing here runs
and publishing costs what it did. It follows the OpenTelemetry messaging semantic
conventions:

* a ``send <stream>`` PRODUCER span per publish, with ``messaging.system="liftbridge"``,
  ``messaging.destination.name``, ``messaging.destination.partition.id``,
  ``messaging.operation.type="send"`` and the correlation id as
  ``messaging.message.id``; a failed publish records its error on the span (a
  ``publish_to_subject`` is a ``send <subject>`` span, named after its subject);
* that span's context injected into the message's headers by the configured
  propagator (W3C ``traceparent``/``tracestate`` and ``baggage`` by default), never
  over a header the caller set, and not at all when the caller set a trace context
  (or built the client with ``trace_propagation=False``);
* per ``publish_batch``, as the conventions advise for batch APIs: a ``create <stream>``
  PRODUCER span per message, whose context its headers carry (a message whose caller
  set a trace context keeps it, and gets none), and one ``send <stream>`` CLIENT span
  with ``messaging.batch.message_count``, linked to each message's creation context.
  ``ClientOptions(batch_create_spans=False)`` makes no ``create`` spans: the batch's
  ``send`` span is then a PRODUCER span whose context the messages carry, linked to
  the contexts callers set. (An SDK keeps 128 links per span unless
  ``OTEL_SPAN_LINK_COUNT_LIMIT`` says otherwise; it drops the rest);
* metrics ``messaging.client.operation.duration`` (seconds, from the call to the ack),
  ``messaging.client.sent.messages`` and ``messaging.client.consumed.messages``; and
  observable ones per client, told apart by ``messaging.client.id`` (``<pid>-<n>``):
  ``messaging.liftbridge.publish.in_flight``, ``.publish.resent``, ``.publish.connects``
  and ``messaging.liftbridge.consumer.lag``. A client reports them from its first
  publish in a process until it is closed (or garbage collected).

On the consuming side, wrap the handling of each message::

    for msg in client.subscribe("orders"):
        with liftbridge_sync.otel.process(msg):
            handle(msg)  # spans made here belong to the producer's trace

:func:`process` opens a CONSUMER ``process <stream>`` span, a child of the producer's
span and linked to it, so each message gets its own correct trace even though the loop
itself runs in one context (the trap aiokafka users fall into). :func:`extract` gives a
message's producer context for your own spans, and :func:`extract_headers` the same
from bare headers, such as the Spark source's ``headers`` column.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import inspect
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.propagate import extract as _extract
from opentelemetry.propagate import get_global_textmap
from opentelemetry.propagate import inject as _inject
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from liftbridge_sync._publishing.futures import peek
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError, LiftbridgeError
from liftbridge_sync.models import Ack, Message

if TYPE_CHECKING:
    from liftbridge_sync._publishing.stats import PublisherStats
    from liftbridge_sync.stats import ClientStats

__all__ = ["Telemetry", "extract", "extract_headers", "process", "telemetry_for"]

#: What a ``publish_batch`` sends: the outcome of each message, in order.
Outcomes = list[Ack | None | LiftbridgeError]
#: Sends one publish given its headers: its future, correlation id and partition.
Sender = Callable[
    [Mapping[str, bytes] | None], tuple[concurrent.futures.Future[Ack | None], str, int]
]

_SYSTEM = "liftbridge"
_SCOPE = "liftbridge_sync"
#: Headers the W3C trace context propagator writes.
_TRACE_HEADERS = ("traceparent", "tracestate")


class _TextGetter(Getter[Mapping[str, Any]]):
    """Message headers for a propagator: values read as text when it asks for them.

    Args:
        strings: Whether str values count (bare headers); a publish's headers are bytes,
            and a str there is refused by the publish, so it carries no context.

    Thread-safe: immutable.
    """

    def __init__(self, *, strings: bool) -> None:
        self._strings = strings

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        """The header ``key`` as text (``None``: absent or not a header value)."""
        value = carrier.get(key)
        if isinstance(value, bytes | bytearray | memoryview):
            return [bytes(value).decode("ascii", "replace")]
        if self._strings and isinstance(value, str):
            return [value]
        return None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        """Every header name."""
        return [name for name in carrier if isinstance(name, str)]


#: A publish's headers (bytes values), and bare ones (bytes or str values).
_PUBLISHED = _TextGetter(strings=False)
_BARE = _TextGetter(strings=True)
#: Bucket boundaries the semantic conventions advise for operation durations (seconds).
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)


def _tracing_configured(provider: trace.TracerProvider) -> bool:
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _metrics_configured(provider: metrics.MeterProvider) -> bool:
    # Before an SDK is set, the global provider is the API's private proxy class.
    return not isinstance(provider, metrics.NoOpMeterProvider) and (
        type(provider).__name__ != "_ProxyMeterProvider"
    )


def telemetry_for(
    tracer_provider: trace.TracerProvider | None,
    meter_provider: metrics.MeterProvider | None,
    propagate: bool,
    *,
    publisher_stats: Callable[[], PublisherStats] | None = None,
    client_stats: Callable[[], ClientStats] | None = None,
    batch_create_spans: bool = True,
) -> Telemetry | None:
    """The client's telemetry, or ``None`` when no SDK is configured (nothing to do).

    ``publisher_stats`` and ``client_stats`` feed the observable instruments (in flight,
    re-sends, reconnects, consumer lag) when metrics are on, until the telemetry's
    :meth:`Telemetry.close`; bound methods are held weakly, plain functions as given.
    ``batch_create_spans``: a ``create`` span per message of a ``publish_batch`` (see
    the module's docstring).

    Thread-safe: reads the global providers; the instruments are made once per provider.
    """
    tracer_provider = tracer_provider or trace.get_tracer_provider()
    meter_provider = meter_provider or metrics.get_meter_provider()
    tracing = _tracing_configured(tracer_provider)
    metering = _metrics_configured(meter_provider)
    if not tracing and not metering:
        return None
    telemetry = Telemetry(
        tracer_provider if tracing else None,
        meter_provider if metering else None,
        propagate,
        batch_create_spans=batch_create_spans,
    )
    if metering:
        telemetry._unobserve = _observe(meter_provider, publisher_stats, client_stats)
    return telemetry


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
        client_stats: Callable[[], ClientStats] | None,
    ) -> None:
        self.pid = os.getpid()
        self.attributes = {
            "messaging.system": _SYSTEM,
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

    def client(self) -> ClientStats | None:
        """A client snapshot (``None``: its client is gone, closed or unanswered)."""
        stats: ClientStats | None = _read(self._client)
        return stats


def _reference(read: Callable[[], Any] | None) -> Callable[[], Callable[[], Any] | None] | None:
    if read is None:
        return None
    if inspect.ismethod(read):
        return weakref.WeakMethod(read)
    return lambda: read  # a plain function: nothing to watch, held as given


def _read(reference: Callable[[], Callable[[], Any] | None] | None) -> Any:
    read = None if reference is None else reference()
    if read is None:
        return None
    try:
        return read()
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

    def _lag(self, _: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        found: list[metrics.Observation] = []
        for source in self._live():
            stats = source.client()
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
            found = _Observed(provider.get_meter(_SCOPE))
            try:
                _OBSERVED[provider] = found
            except TypeError:
                _OBSERVED_STRONGLY[id(provider)] = (provider, found)
        return found


def _observe(
    provider: metrics.MeterProvider,
    publisher_stats: Callable[[], PublisherStats] | None,
    client_stats: Callable[[], ClientStats] | None,
) -> Callable[[], None] | None:
    """Report the client's stats through ``provider``'s observable instruments.

    Returns:
        What stops it (the client closes), or ``None`` if there is nothing to report.
    """
    if publisher_stats is None and client_stats is None:
        return None
    observed = _observed(provider)
    source = _Source(publisher_stats, client_stats)
    observed.add(source)
    return functools.partial(observed.discard, source)


@functools.lru_cache(maxsize=8)
def _consumed_counter(provider: metrics.MeterProvider) -> metrics.Counter:
    return provider.get_meter(_SCOPE).create_counter(
        "messaging.client.consumed.messages",
        unit="{message}",
        description="Number of messages that were delivered to the application.",
    )


class Telemetry:
    """The spans and instruments of one client.

    Thread-safe: OpenTelemetry tracers and instruments are; nothing here is mutable but
    the client's registration with the observable instruments, which :meth:`close` ends.
    """

    #: Stops the client's observable stats (``None``: it reports none).
    _unobserve: Callable[[], None] | None = None

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
        propagate: bool,
        *,
        batch_create_spans: bool = True,
    ) -> None:
        self._tracer = tracer_provider.get_tracer(_SCOPE) if tracer_provider else None
        self._propagate = propagate and self._tracer is not None
        # A create span is a message's creation context only if its headers carry it.
        self._create_spans = batch_create_spans and self._propagate
        meter = meter_provider.get_meter(_SCOPE) if meter_provider else None
        self._duration = (
            meter.create_histogram(
                "messaging.client.operation.duration",
                unit="s",
                description="Duration of messaging operations initiated by this client.",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
            )
            if meter
            else None
        )
        self._sent = (
            meter.create_counter(
                "messaging.client.sent.messages",
                unit="{message}",
                description="Number of messages producer attempted to send to the broker.",
            )
            if meter
            else None
        )

    def close(self) -> None:
        """The client closed: its observable stats are reported no more. Idempotent."""
        unobserve, self._unobserve = self._unobserve, None
        if unobserve is not None:
            unobserve()

    # ------------------------------------------------------------------ producing

    def start_send(
        self,
        stream: str,
        partition: int | None,
        count: int = 1,
        links: Sequence[Link] = (),
        kind: SpanKind = SpanKind.PRODUCER,
        operation: str = "send",
    ) -> trace.Span | None:
        """Start the span of a publish (``None`` without tracing).

        A PRODUCER ``send`` span by default; ``operation="create"`` for the ``create``
        span of one message of a batch; ``kind=SpanKind.CLIENT`` for a batch's ``send``
        span whose context no message carries.
        """
        if self._tracer is None:
            return None
        attributes: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": stream,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
        }
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        return self._tracer.start_span(
            f"{operation} {stream}", kind=kind, attributes=attributes, links=links
        )

    def headers_with_context(
        self, span: trace.Span | None, headers: Mapping[str, bytes] | None
    ) -> Mapping[str, bytes] | None:
        """``headers`` plus what the propagator writes for the span, where it is absent.

        Unchanged when propagation is off or the caller set a trace context. A header the
        caller set (``baggage``, say) is never replaced. Headers that are no mapping are
        left for the publish to refuse, as it does without telemetry.
        """
        if span is None or not self._propagate:
            return headers
        if headers is not None and not isinstance(headers, Mapping):
            return headers
        if headers and _caller_context(headers) is not None:
            return headers
        carrier: dict[str, str] = {}
        _inject(carrier, context=trace.set_span_in_context(span))
        if not carrier:
            return headers
        merged = dict(headers) if headers else {}
        for name, value in carrier.items():
            if name not in merged:
                merged[name] = value.encode("utf-8")
        return merged

    def finish_send(
        self,
        span: trace.Span | None,
        stream: str,
        started: float,
        outcome: Ack | None | BaseException,
        correlation_id: str | None = None,
        count: int = 1,
        partition: int | None = None,
        sent: bool = True,
    ) -> None:
        """End a publish's span and record its metrics, from its outcome.

        ``correlation_id`` and ``partition``: what the publish was sent with, for an
        outcome that does not say (a failure, an ``AckPolicy.NONE`` publish).
        ``sent=False``: refused before anything was sent (a bad argument, a full queue):
        its span and duration point say so, but ``messaging.client.sent.messages``,
        the messages attempted to send to the broker, does not count it.
        """
        error = outcome if isinstance(outcome, BaseException) else None
        attributes: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": stream,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if isinstance(outcome, Ack) and outcome.partition >= 0:
            partition = outcome.partition
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        if error is not None:
            attributes["error.type"] = _error_type(error)
        if self._duration is not None:
            self._duration.record(time.monotonic() - started, attributes)
        if self._sent is not None and sent:
            self._sent.add(count, attributes)
        if span is None:
            return
        if partition is not None:
            span.set_attribute("messaging.destination.partition.id", str(partition))
        if isinstance(outcome, Ack):
            if outcome.correlation_id:
                span.set_attribute("messaging.message.id", outcome.correlation_id)
            span.set_attribute("messaging.liftbridge.offset", outcome.offset)
        elif correlation_id:
            span.set_attribute("messaging.message.id", correlation_id)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
            span.set_attribute("error.type", _error_type(error))
        span.end()

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
        send: Callable[[list[Any]], Outcomes],
    ) -> Outcomes:
        """A ``publish_batch`` in one ``send`` span: ``send`` gets the traced items.

        Each item becomes a ``(key, value, headers)`` triple whose headers carry its
        creation context: its own ``create`` span's, or (without create spans) the
        ``send`` span's; the ``send`` span links to the contexts it did not make.
        """
        started = time.monotonic()
        count = len(items)
        if self._tracer is None or any(_malformed(item) for item in items):
            # Metrics only; or a batch publish_batch refuses (TypeError) as it is.
            span = self.start_send(stream, partition, count)
            traced = items
        elif self._create_spans:
            traced, links = self._with_creation_contexts(stream, partition, items)
            span = self.start_send(stream, partition, count, links, SpanKind.CLIENT)
        else:
            triples = [_triple(item) for item in items]
            links = [link for _, _, headers in triples for link in _caller_context(headers) or ()]
            span = self.start_send(stream, partition, count, links)
            # One injection for the batch: messages without headers share its result.
            bare = self.headers_with_context(span, None)
            traced = [
                (k, v, bare if h is None else self.headers_with_context(span, h))
                for k, v, h in triples
            ]
        try:
            outcomes = send(traced)
        except BaseException as exc:
            # publish_batch refuses bad items and arguments before anything is sent.
            refused = isinstance(exc, TypeError | ConfigurationError)
            self.finish_send(span, stream, started, exc, count=count, sent=not refused)
            raise
        failed = next((o for o in outcomes if isinstance(o, LiftbridgeError)), None)
        self.finish_send(span, stream, started, failed, count=count)
        return outcomes

    def _with_creation_contexts(
        self, stream: str, partition: int | None, items: list[Any]
    ) -> tuple[list[Any], list[Link]]:
        """Each item with a ``create`` span's context in its headers (unless its caller
        set one), and the links of the batch's ``send`` span to each creation context."""
        traced: list[Any] = []
        links: list[Link] = []
        for item in items:
            key, value, headers = _triple(item)
            caller = _caller_context(headers)
            if caller is not None:
                links.extend(caller)
                traced.append((key, value, headers))
                continue
            create = self.start_send(stream, partition, operation="create")
            assert create is not None  # create spans need a tracer
            traced.append((key, value, self.headers_with_context(create, headers)))
            create.end()
            links.append(Link(create.get_span_context()))
        return traced, links

    def finish_on(
        self,
        future: concurrent.futures.Future[Ack | None],
        span: trace.Span | None,
        stream: str,
        started: float,
        correlation_id: str | None = None,
        partition: int | None = None,
    ) -> Callable[[], None]:
        """End the span and record metrics when ``future`` resolves (``correlation_id``
        and ``partition``: what the publish was sent with).

        Returns:
            What ends them now, once ``future`` is done: whichever of it and the
            done-callback comes first does, the other nothing.
        """
        unfinished = [True]  # popped once: list.pop is atomic

        def finish() -> None:
            try:
                unfinished.pop()
            except IndexError:
                return  # ended already
            # Peeked, not retrieved: telemetry must not hide a failure from flush().
            result, error = peek(future)  # type: ignore[arg-type]
            outcome = error if error is not None else result
            self.finish_send(span, stream, started, outcome, correlation_id, partition=partition)

        future.add_done_callback(lambda _: finish())
        return finish


def _error_type(error: BaseException) -> str:
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


def _malformed(item: Any) -> bool:
    """A ``publish_batch`` item it refuses with a TypeError: a tuple of another length."""
    return isinstance(item, tuple) and len(item) not in (2, 3)


def _triple(item: Any) -> tuple[Any, Any, Any]:
    """A well-formed ``publish_batch`` item as ``(key, value, headers)``."""
    if isinstance(item, tuple):
        return item if len(item) == 3 else (*item, None)
    return (None, item, None)


def _caller_context(headers: Any) -> list[Link] | None:
    """``None`` when ``headers`` carry no trace context; else a link to the one the
    caller set (none if a ``traceparent`` or ``tracestate`` is not a valid one: it is
    still left as it is).

    Any propagator's context counts (B3, say), read from every header."""
    if not isinstance(headers, Mapping) or not headers:
        return None
    w3c = any(name in headers for name in _TRACE_HEADERS)
    if not w3c and not any(name in headers for name in get_global_textmap().fields):
        return None  # the common case: nothing a propagator writes
    caller = trace.get_current_span(_extract(headers, getter=_PUBLISHED)).get_span_context()
    if caller.is_valid:
        return [Link(caller)]
    return [] if w3c else None


def extract(message: Message) -> otel_context.Context:
    """The producer's trace context carried in ``message``'s headers.

    An empty context when the message carries none.

    Thread-safe: a pure function of the message.
    """
    return extract_headers(message.headers)


def extract_headers(
    headers: Mapping[str, bytes | str] | Iterable[Any] | None,
) -> otel_context.Context:
    """The producer's trace context carried in headers outside a :class:`Message`.

    ``headers`` is a mapping of name to value, or a sequence of ``(key, value)`` pairs
    such as the Spark source's ``headers array<struct<key, value>>`` column
    (``includeHeaders=true``) of a collected row; values are bytes or strings. The
    configured propagator reads what it needs (W3C ``traceparent``/``tracestate`` and
    ``baggage`` by default, B3 headers with a B3 propagator); the last of a repeated
    name wins. An empty context when there are none::

        for row in df.select("value", "headers").toLocalIterator():
            with tracer.start_as_current_span("handle", context=otel.extract_headers(row.headers)):
                handle(row.value)

    Thread-safe: a pure function of its argument.
    """
    pairs: list[Any]
    if headers is None:
        pairs = []
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    elif isinstance(headers, str | bytes):
        raise ArgumentTypeError(
            f"headers must be a mapping or (key, value) pairs, got {type(headers).__name__}"
        )
    else:
        pairs = list(headers)
    carrier: dict[str, Any] = {}
    for pair in pairs:
        try:
            name, value = pair
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"headers must be a mapping or (key, value) pairs, got an entry {pair!r:.60}"
            ) from None
        if isinstance(name, str) and value is not None:
            text = isinstance(value, str | bytes | bytearray | memoryview)
            carrier[name] = value if text else str(value)
    return _extract(carrier, getter=_BARE)


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
    producer's trace; otherwise it continues the current trace. Errors raised in the
    block are recorded on the span and re-raised. ``messaging.client.consumed.messages``
    counts the message.

    Thread-safe: use it on the thread that handles the message.
    """
    producer = extract(message)
    producer_span = trace.get_current_span(producer).get_span_context()
    links = [Link(producer_span)] if producer_span.is_valid else []
    tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(_SCOPE)
    attributes: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.destination.name": message.stream,
        "messaging.destination.partition.id": str(message.partition),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.liftbridge.offset": message.offset,
    }
    if message.key is not None:
        attributes["messaging.liftbridge.message.key"] = message.key.decode("utf-8", "replace")
    meters = meter_provider or metrics.get_meter_provider()
    if _metrics_configured(meters):
        _consumed_counter(meters).add(
            1,
            {
                "messaging.system": _SYSTEM,
                "messaging.destination.name": message.stream,
                "messaging.destination.partition.id": str(message.partition),
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
            },
        )
    with tracer.start_as_current_span(
        f"process {message.stream}",
        context=producer if as_child and producer_span.is_valid else None,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    ) as span:
        yield span
