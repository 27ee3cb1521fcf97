"""One publish's span and metric points: started, given its context, ended from its
outcome.

Thread-safe: OpenTelemetry tracers and instruments are.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from liftbridge_sync._publishing.futures import peek
from liftbridge_sync._wire.validate import INT32_MAX
from liftbridge_sync.models import Ack
from liftbridge_sync.otel._conventions import DURATION_BUCKETS, SCOPE, SYSTEM, error_type
from liftbridge_sync.otel._forking import measuring
from liftbridge_sync.otel._propagation import with_context

__all__ = ["Creations", "SendSpans"]

_log = logging.getLogger("liftbridge_sync.otel")

#: Seconds a ``publish()`` caller waits for the thread that resolved its future to end
#: its span (a bound: a span processor that hangs there must not hold the caller).
_END_WAIT = 10.0


class SendSpans:
    """The spans and instruments of a client's publishes, one publish at a time (the
    calls that make publishes are :class:`~liftbridge_sync.otel.Telemetry`'s).

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
        self._tracer = tracer_provider.get_tracer(SCOPE) if tracer_provider else None
        self._propagate = propagate and self._tracer is not None
        # A create span is a message's creation context only if its headers carry it.
        self._create_spans = batch_create_spans and self._propagate
        meter = meter_provider.get_meter(SCOPE) if meter_provider else None
        self._duration = (
            meter.create_histogram(
                "messaging.client.operation.duration",
                unit="s",
                description="Duration of messaging operations initiated by this client.",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
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
        stream = _destination(stream)
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": stream,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
        }
        if _is_partition(partition):
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
        return with_context(span, headers)

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
            "messaging.system": SYSTEM,
            "messaging.destination.name": _destination(stream),
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if isinstance(outcome, Ack) and outcome.partition >= 0:
            partition = outcome.partition
        if not _is_partition(partition):
            partition = None
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        if error is not None:
            attributes["error.type"] = error_type(error)
        with measuring():
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
            span.set_attribute("error.type", error_type(error))
        span.end()

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
            done-callback comes first does, the other nothing; it returns once they
            have ended, also by the done-callback on another thread (up to 10 s).
        """
        unfinished = [True]  # popped once: list.pop is atomic
        ended = threading.Event()

        def end() -> None:
            try:
                unfinished.pop()
            except IndexError:
                return  # ended already, or being ended
            try:
                # Peeked, not retrieved: telemetry must not hide a failure from flush().
                result, error = peek(future)  # type: ignore[arg-type]
                outcome = error if error is not None else result
                self.finish_send(
                    span, stream, started, outcome, correlation_id, partition=partition
                )
            finally:
                ended.set()

        def finish() -> None:
            end()
            # The thread that resolved the future may be ending them this moment (its
            # done-callback took them first): the caller returns once that is over.
            if not ended.wait(_END_WAIT):
                _log.warning(
                    "a publish's span was still being ended by another thread %.0f s "
                    "after its outcome (a span processor or metric reader that blocks?)",
                    _END_WAIT,
                )

        future.add_done_callback(lambda _: end())
        return finish


class Creations:
    """The ``create`` spans of one ``publish_batch``'s messages, ended together: when
    the batch is framed (:meth:`framed`), or as errors when it is refused before
    (:meth:`refused`): its messages were never sent, and the conventions make a failed
    operation's span an error with its ``error.type``.

    Thread-safe: not shared; used by the thread making the batch.
    """

    __slots__ = ("_spans", "done")

    def __init__(self) -> None:
        self._spans: list[trace.Span] = []
        #: Whether the batch was framed (its messages created).
        self.done = False

    def add(self, span: trace.Span) -> None:
        """One more message's ``create`` span, ended with the others."""
        self._spans.append(span)

    def framed(self) -> None:
        """Every message was checked and framed: end their spans."""
        self.done = True
        spans, self._spans = self._spans, []
        for span in spans:
            span.end()

    def refused(self, error: BaseException) -> None:
        """The batch raised ``error``: end as errors the spans not ended yet (nothing
        once :meth:`framed` ran: those messages were created)."""
        spans, self._spans = self._spans, []
        kind = error_type(error)
        for span in spans:
            span.set_status(Status(StatusCode.ERROR, str(error)))
            span.set_attribute("error.type", kind)
            span.end()


def _destination(stream: object) -> str:
    """The stream as a span name and attribute may hold it, even when the publish is
    refused for it: valid UTF-8 text (an exporter fails the whole batch of spans on a
    lone surrogate), ``<int>`` for a value that is no str."""
    if not isinstance(stream, str):
        return f"<{type(stream).__name__}>"
    return stream.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_partition(partition: object) -> bool:
    """Whether ``partition`` may be a partition id, as the publish checks it: a value it
    refuses (``-1``, a str, a hash) is no destination, and recorded as one would make a
    metric series of each bad value."""
    return type(partition) is int and 0 <= partition <= INT32_MAX
