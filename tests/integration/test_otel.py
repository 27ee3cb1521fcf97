"""OpenTelemetry traces and metrics with the real SDK's in-memory exporter and reader."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from liftbridge_sync import Client, Message, NoSuchPartitionError, StartAt, StopAt, otel

from .conftest import unique

pytestmark = pytest.mark.integration


class Telemetry:
    """A tracer provider and meter provider that keep what they record in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[object]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    recorded = Telemetry()
    yield recorded
    recorded.tracer_provider.shutdown()
    recorded.meter_provider.shutdown()


def _read(client: Client, stream: str, partition: int = 0) -> list[Message]:
    with client.subscribe(
        stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        return list(sub)


def test_publishes_are_producer_spans_whose_context_travels_in_the_headers(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    name = unique("otel")
    with Client(
        [liftbridge_address],
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    ) as client:
        client.create_stream(name, name, partitions=2)
        sync_ack = client.publish(name, b"one", partition=1)
        async_ack = client.publish_async(name, b"two", key=b"k", partition=1).result(30)
        custom = client.publish(
            name,
            b"three",
            partition=1,
            headers={"traceparent": b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"},
        )
        outcomes = client.publish_batch(name, [b"a", (b"k", b"b"), (None, b"c", {"x": b"y"})])
        assert sync_ack and async_ack and custom and all(o is not None for o in outcomes)
        messages = _read(client, name, 1) + _read(client, name, 0)

    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 4  # three single publishes and one batch
    for span in sends:
        assert span.kind is SpanKind.PRODUCER
        attributes = dict(span.attributes or {})
        assert attributes["messaging.system"] == "liftbridge"
        assert attributes["messaging.destination.name"] == name
        assert attributes["messaging.operation.type"] == "send"
    singles = [s for s in sends if "messaging.batch.message_count" not in (s.attributes or {})]
    (batch,) = [s for s in sends if s not in singles]
    assert batch.attributes["messaging.batch.message_count"] == 3  # type: ignore[index]
    ids = {s.attributes["messaging.message.id"] for s in singles}  # type: ignore[index]
    assert sync_ack.correlation_id in ids and async_ack.correlation_id in ids  # type: ignore[union-attr]
    assert {s.attributes["messaging.destination.partition.id"] for s in singles} == {"1"}  # type: ignore[index]

    # Each message carries the traceparent of its own send span (the batch's for the
    # batch), except the one whose caller set its own.
    by_value = {m.value: m for m in messages}
    span_of = {s.context.span_id: s for s in sends}
    for value in (b"one", b"two", b"a", b"b", b"c"):
        parent = otel.extract(by_value[value])
        carried = trace.get_current_span(parent).get_span_context()
        assert carried.is_valid and carried.span_id in span_of, value
    assert by_value[b"three"].headers["traceparent"].startswith(b"00-1111")
    assert by_value[b"c"].headers["x"] == b"y"

    duration = telemetry.points("messaging.client.operation.duration")
    sent = telemetry.points("messaging.client.sent.messages")
    assert sum(p.count for p in duration) == 4  # type: ignore[attr-defined]
    assert sum(p.value for p in sent) == 6  # type: ignore[attr-defined]


def test_process_spans_join_the_producers_trace_and_errors_are_recorded(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    name = unique("otel")
    with Client(
        [liftbridge_address],
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    ) as client:
        client.create_stream(name, name)
        client.publish(name, b"hello")
        (message,) = _read(client, name)
        with pytest.raises(RuntimeError):
            with otel.process(
                message,
                tracer_provider=telemetry.tracer_provider,
                meter_provider=telemetry.meter_provider,
            ):
                raise RuntimeError("handler failed")
        with pytest.raises(NoSuchPartitionError):
            client.publish(name, b"x", partition=7)

    (send,) = [s for s in telemetry.finished(f"send {name}") if s.status.is_ok]
    (process,) = telemetry.finished(f"process {name}")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.status.status_code is StatusCode.ERROR
    assert telemetry.points("messaging.client.consumed.messages")

    (failed,) = [s for s in telemetry.finished(f"send {name}") if not s.status.is_ok]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "NoSuchPartitionError"  # type: ignore[index]


def test_without_an_sdk_nothing_is_traced_or_injected(liftbridge_address: str) -> None:
    # A fresh process: the API is installed, no SDK configured, so no telemetry object
    # exists and messages carry no trace headers; then the global SDK provider is used.
    script = textwrap.dedent(
        f"""
        from liftbridge_sync import Client, StartAt, StopAt
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        name = "otel-global-" + __import__("secrets").token_hex(4)
        with Client(["{liftbridge_address}"]) as client:
            client.create_stream(name, name)
            client.publish(name, b"plain")
            assert client._telemetry is None
        trace.set_tracer_provider(TracerProvider())
        with Client(["{liftbridge_address}"]) as client:
            client.publish(name, b"traced")
            assert client._telemetry is not None
            with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
                print(sorted(bool(dict(m.headers).get("traceparent")) for m in sub))
            client.delete_stream(name)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[False, True]"
