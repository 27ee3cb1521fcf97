"""Traces, metrics, lag and health: what a client tells an operator (extra ``otel``).

A producer's ``send`` span travels in the message headers; the consumer's ``process``
span joins the same trace. Spans go to a console exporter here (any OpenTelemetry
exporter works the same way), metrics to an in-memory reader printed at the end.

Run against a local server: ``python -m liftbridge_sync.testing serve --port 9292`` in
one terminal, then ``python examples/observability.py``.
"""

from __future__ import annotations

import uuid

from _address import server_address
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from liftbridge_sync import Client, StartAt, StopAt, otel


class OneLinePerSpan(SpanExporter):
    """A console exporter that prints one line per span: name, kind, trace and parent."""

    def export(self, spans: object) -> SpanExportResult:
        for span in spans:  # type: ignore[attr-defined]
            assert isinstance(span, ReadableSpan) and span.context is not None
            parent = f"{span.parent.span_id:016x}" if span.parent else "-"
            print(
                f"span {span.name!r} kind={span.kind.name} trace={span.context.trace_id:032x} "
                f"id={span.context.span_id:016x} parent={parent}"
            )
        return SpanExportResult.SUCCESS


def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(OneLinePerSpan()))
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    stream = f"observability-{uuid.uuid4().hex[:8]}"
    with Client(server_address(), meter_provider=meter_provider) as client:
        health = client.check_health(timeout=2.0)
        print(f"healthy: {health.answered_by} answered in {health.latency * 1000:.1f} ms")
        client.create_stream(subject=stream, name=stream)
        for i in range(3):
            client.publish(stream, f"order {i}".encode())

        with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            first = next(iter(sub))
            print(f"lag after one message: {client.stats().total_lag}")
            data = reader.get_metrics_data()  # the lag gauge reads open subscriptions
            for message in [first, *sub]:
                with otel.process(message, meter_provider=meter_provider):
                    pass  # handle(message): spans made here join the producer's trace
        client.delete_stream(stream)

    assert data is not None
    names = sorted(
        {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    )
    print("metrics:", ", ".join(names))
    tracer_provider.shutdown()
    meter_provider.shutdown()


if __name__ == "__main__":
    main()
