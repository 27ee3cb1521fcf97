"""Propagation with the configured propagator: a caller's headers are never replaced,
and every header the propagator reads is given to it (baggage, B3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import baggage, propagate, trace  # noqa: E402
from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry.baggage.propagation import W3CBaggagePropagator  # noqa: E402
from opentelemetry.context import Context  # noqa: E402
from opentelemetry.propagators.composite import CompositePropagator  # noqa: E402
from opentelemetry.propagators.textmap import (  # noqa: E402
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import (  # noqa: E402
    TraceContextTextMapPropagator,
)

from liftbridge_sync import ArgumentTypeError, otel  # noqa: E402
from tests.messages import make_message  # noqa: E402

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class B3Single(TextMapPropagator):
    """B3's single header, ``{trace id}-{span id}-{sampled}``: enough for a round trip."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        values = getter.get(carrier, "b3")
        if not values:
            return context or Context()
        trace_id, span_id, sampled = values[0].split("-")[:3]
        found = SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(sampled == "1"),
        )
        return trace.set_span_in_context(NonRecordingSpan(found), context)

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        span = trace.get_current_span(context).get_span_context()
        if span.is_valid:
            value = f"{span.trace_id:032x}-{span.span_id:016x}-{int(span.trace_flags.sampled)}"
            setter.set(carrier, "b3", value)

    @property
    def fields(self) -> set[str]:
        return {"b3"}


W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
CALLERS_B3 = b"0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1"


@pytest.fixture
def use_propagator() -> Iterator[Callable[[TextMapPropagator], None]]:
    before = propagate.get_global_textmap()
    yield propagate.set_global_textmap
    propagate.set_global_textmap(before)


@pytest.fixture
def tracing() -> Iterator[tuple[otel.Telemetry, trace.Tracer]]:
    provider = TracerProvider()
    yield otel.Telemetry(provider, None, True), provider.get_tracer("test")
    provider.shutdown()


def test_the_callers_baggage_header_is_kept(
    use_propagator: Callable[[TextMapPropagator], None],
    tracing: tuple[otel.Telemetry, trace.Tracer],
) -> None:
    use_propagator(W3C)
    telemetry, tracer = tracing
    token = otel_context.attach(baggage.set_baggage("user", "ours"))
    try:
        span = tracer.start_span("send")
        headers = telemetry.headers_with_context(span, {"baggage": b"user=mine"})
        span.end()
    finally:
        otel_context.detach(token)
    assert headers is not None
    assert headers["baggage"] == b"user=mine"
    assert (
        headers["traceparent"].decode().split("-")[2] == f"{span.get_span_context().span_id:016x}"
    )


def test_baggage_is_extracted_with_the_trace_context(
    use_propagator: Callable[[TextMapPropagator], None],
) -> None:
    use_propagator(W3C)
    context = otel.extract_headers({"traceparent": PARENT.encode(), "baggage": b"user=mine"})
    assert baggage.get_baggage("user", context) == "mine"
    assert trace.get_current_span(context).get_span_context().span_id == 0xB7AD6B7169203331


def test_a_b3_context_round_trips(
    use_propagator: Callable[[TextMapPropagator], None],
    tracing: tuple[otel.Telemetry, trace.Tracer],
) -> None:
    use_propagator(B3Single())
    telemetry, tracer = tracing
    span = tracer.start_span("send")
    headers = telemetry.headers_with_context(span, {"n": b"1"})
    span.end()
    assert headers is not None and set(headers) == {"n", "b3"}
    found = trace.get_current_span(otel.extract_headers(headers)).get_span_context()
    assert found.is_valid
    assert (found.trace_id, found.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )


def test_a_callers_b3_context_is_kept_and_linked(
    use_propagator: Callable[[TextMapPropagator], None],
) -> None:
    use_propagator(B3Single())
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = otel.Telemetry(provider, None, True)
    mine = {"b3": CALLERS_B3}
    span = provider.get_tracer("test").start_span("send")
    assert telemetry.headers_with_context(span, mine) == {"b3": CALLERS_B3}
    span.end()

    sent: list[Any] = []

    def send(items: list[Any], framed: Callable[[], None]) -> list[Any]:
        framed()
        sent.extend(items)
        return [None] * len(items)

    telemetry.trace_batch("s", 0, [(None, b"v", mine)], send)
    assert sent == [(None, b"v", {"b3": CALLERS_B3})]  # no create span's context over it
    (batch,) = [s for s in spans.get_finished_spans() if s.name == "send s"]
    assert [link.context.span_id for link in batch.links] == [0xB7AD6B7169203331]
    provider.shutdown()


def test_the_producers_baggage_is_current_while_its_message_is_processed(
    use_propagator: Callable[[TextMapPropagator], None],
) -> None:
    # The handling joins the producer's context, its baggage with its trace (as the
    # OpenTelemetry Kafka instrumentations do); the block's own context is restored after.
    use_propagator(W3C)
    provider = TracerProvider()
    message = make_message(
        3,
        b"v",
        stream="orders",
        headers={"traceparent": PARENT.encode(), "baggage": b"tenant=acme"},
    )
    token = otel_context.attach(baggage.set_baggage("tenant", "consumer's"))
    try:
        with otel.process(message, tracer_provider=provider) as span:
            seen = baggage.get_baggage("tenant")
            current = trace.get_current_span()
        after = baggage.get_baggage("tenant")
        with otel.process(message, tracer_provider=provider, as_child=False):
            unjoined = baggage.get_baggage("tenant")
    finally:
        otel_context.detach(token)
    provider.shutdown()
    assert seen == "acme"
    assert current is span and span.get_span_context().trace_id == int(PARENT[3:35], 16)
    assert after == "consumer's"
    assert unjoined == "consumer's"  # as_child=False: the current context, as it was
    # as_child="no" is truthy: it joined the producer's context, the opposite of what
    # it says.
    with pytest.raises(ArgumentTypeError, match="'as_child' must be a bool"):
        with otel.process(message, as_child="no"):  # type: ignore[arg-type]
            pass
