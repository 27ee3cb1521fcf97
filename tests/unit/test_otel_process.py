"""``otel.process``: one delivery is counted once, however many times it is processed.

The real SDK with an in-memory exporter and reader; messages built as a subscription
delivers them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402

from liftbridge_sync import ArgumentTypeError, otel  # noqa: E402
from liftbridge_sync.models import Message  # noqa: E402
from tests.messages import make_message  # noqa: E402


class _Recorded:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def process(self, message: Message) -> contextlib.AbstractContextManager[trace.Span]:
        return otel.process(
            message, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def points(self, name: str) -> list[object]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def recorded() -> Iterator[_Recorded]:
    found = _Recorded()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


def test_a_message_processed_again_is_one_message_consumed(recorded: _Recorded) -> None:
    # messaging.client.consumed.messages counts the messages delivered to the
    # application: a handler retried on the same delivery (a second process() of the
    # message) counted it twice. Each processing is still a span and a duration.
    message = make_message(3, b"v")
    with pytest.raises(ValueError):
        with recorded.process(message):
            raise ValueError("first attempt fails")
    with recorded.process(message):
        pass
    redelivered = make_message(3, b"v")  # equal, but another delivery (a re-read)
    assert redelivered == message
    with recorded.process(redelivered):
        pass

    consumed = recorded.points("messaging.client.consumed.messages")
    assert sum(p.value for p in consumed) == 2  # type: ignore[attr-defined]
    durations = recorded.points("messaging.process.duration")
    assert sum(p.count for p in durations) == 3  # type: ignore[attr-defined]
    spans = recorded.spans.get_finished_spans()
    assert [s.status.status_code for s in spans] == [
        StatusCode.ERROR,
        StatusCode.UNSET,
        StatusCode.UNSET,
    ]


@pytest.mark.parametrize("given", ["a message", None, {"traceparent": b"x"}])
def test_what_is_no_message_is_refused_with_a_typed_error(
    recorded: _Recorded, given: object
) -> None:
    # A bare AttributeError ('str' object has no attribute 'headers') came out of both,
    # and process() had counted nothing and made no span by then: nothing changes.
    with pytest.raises(ArgumentTypeError, match="Message"):
        otel.extract(given)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="Message"):
        with recorded.process(given):  # type: ignore[arg-type]
            pass
    assert not recorded.spans.get_finished_spans()


@pytest.mark.parametrize("argument", ["tracer_provider", "meter_provider"])
def test_a_provider_that_is_no_provider_is_refused(argument: str) -> None:
    # A bare AttributeError ('str' object has no attribute 'get_tracer') came out.
    with pytest.raises(ArgumentTypeError, match=argument):
        with otel.process(make_message(0), **{argument: "provider"}):  # type: ignore[arg-type]
            pass
