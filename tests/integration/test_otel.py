"""OpenTelemetry traces and metrics with the real SDK's in-memory exporter and reader."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from liftbridge_sync import (
    Ack,
    AckTimeoutError,
    ArgumentTypeError,
    Client,
    ConfigurationError,
    Message,
    NoSuchPartitionError,
    ReadonlyPartitionError,
    StartAt,
    StopAt,
    otel,
)

from .conftest import unique

pytestmark = pytest.mark.integration

#: The conventions' client metrics: messages sent (a counter), operations (a histogram).
SENT = "messaging.client.sent.messages"
DURATION = "messaging.client.operation.duration"


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

    def total(self, metric: str) -> int:
        """The sum of a counter's points."""
        return sum(point.value for point in self.points(metric))  # type: ignore[attr-defined]

    def count(self, metric: str) -> int:
        """How many measurements a histogram's points hold."""
        return sum(point.count for point in self.points(metric))  # type: ignore[attr-defined]

    def client(self, address: str, *, metered: bool = True, **options: Any) -> Client:
        """A client of the server at ``address`` that traces into these, and measures
        into them too when ``metered`` (otherwise into the global meter provider)."""
        return Client(
            [address],
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider if metered else None,
            **options,
        )

    @contextlib.contextmanager
    def stream(
        self, address: str, *, partitions: int = 1, **options: Any
    ) -> Iterator[tuple[Client, str]]:
        """A ``client(address, **options)`` and a fresh stream of it, by name; the client
        is closed when the block ends, so its spans have ended and its points are in."""
        name = unique("otel")
        with self.client(address, **options) as client:
            client.create_stream(name, name, partitions=partitions)
            yield client, name

    def process(self, message: Message) -> contextlib.AbstractContextManager[trace.Span]:
        """``otel.process`` tracing and measuring into these."""
        return otel.process(
            message, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )


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
    with telemetry.stream(liftbridge_address, partitions=2) as (client, name):
        sync_ack = client.publish(name, b"one", partition=1)
        async_ack = client.publish_async(name, b"two", key=b"k", partition=1).result(30)
        custom = client.publish(
            name,
            b"three",
            partition=1,
            headers={"traceparent": b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"},
        )
        assert sync_ack and async_ack and custom
        messages = _read(client, name, 1)

    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 3
    for span in sends:
        assert span.kind is SpanKind.PRODUCER
        assert not span.links
        _assert_sent_to(span, name, "1")
        attributes = dict(span.attributes or {})
        assert attributes["messaging.operation.type"] == "send"
        assert "messaging.batch.message_count" not in attributes
    ids = {s.attributes["messaging.message.id"] for s in sends}  # type: ignore[index]
    assert {sync_ack.correlation_id, async_ack.correlation_id, custom.correlation_id} == ids  # type: ignore[union-attr]

    # Each message carries the traceparent of its own send span, except the one whose
    # caller set its own.
    by_value = {m.value: m for m in messages}
    span_of = {s.context.span_id: s for s in sends}
    carried = {value: _carried(by_value[value]).span_id for value in (b"one", b"two", b"three")}
    assert carried[b"one"] in span_of and carried[b"two"] in span_of
    assert carried[b"one"] != carried[b"two"]
    assert by_value[b"three"].headers["traceparent"].startswith(b"00-1111")

    assert telemetry.count(DURATION) == 3
    assert telemetry.total(SENT) == 3


#: A trace context a caller set in a message's headers itself.
CUSTOM_TRACE = "1" * 32
CUSTOM_SPAN = "2" * 16
CUSTOM = f"00-{CUSTOM_TRACE}-{CUSTOM_SPAN}-01".encode()


def _run_python(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh interpreter, which must succeed (bounded: 120 s)."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result


def _assert_sent_to(span: ReadableSpan, stream: str, partition: str) -> None:
    """``span`` is a Liftbridge send to ``partition`` of ``stream``."""
    attributes = dict(span.attributes or {})
    assert attributes["messaging.system"] == "liftbridge"
    assert attributes["messaging.destination.name"] == stream
    assert attributes["messaging.destination.partition.id"] == partition


def _linked(span: ReadableSpan) -> list[int]:
    """The span ids a span links to, in order."""
    return [link.context.span_id for link in span.links]


def _carried(message: Message) -> trace.SpanContext:
    """The span context a message's headers carry."""
    return trace.get_current_span(otel.extract(message)).get_span_context()


def test_a_publish_has_ended_its_span_and_recorded_its_metrics_when_it_returns(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # publish() is synchronous: its send span is over when it returns, also when the
    # I/O thread (not the caller) read the ack, as it does for concurrent callers.
    late: list[str] = []
    with telemetry.stream(liftbridge_address) as (client, name):

        def publish_some() -> None:
            for _ in range(50):
                ack = client.publish(name, b"x", key=b"k")
                assert ack is not None
                ended = {
                    s.attributes["messaging.message.id"]  # type: ignore[index]
                    for s in telemetry.finished(f"send {name}")
                }
                if ack.correlation_id not in ended:
                    late.append(ack.correlation_id)

        threads = [threading.Thread(target=publish_some) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
        assert late == []
        # And so are its metrics: nothing is recorded after the last publish returned.
        assert telemetry.total(SENT) == 200


def test_an_async_publishs_span_ends_where_it_resolves_without_its_context_there(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # publish_async's span is the caller's child and ends with the outcome, on the
    # thread that resolved the future (the publisher's, usually): ending it there
    # neither makes it current on that thread nor leaves the caller's context there.
    tracer = telemetry.tracer_provider.get_tracer("test")
    # Where each future resolved, and whether a span was current there (on the caller's
    # thread, a future done already runs it at once, in the caller's span).
    seen: list[tuple[bool, bool]] = []
    caller_thread = threading.current_thread()

    def look(_: object) -> None:
        here = threading.current_thread() is caller_thread
        seen.append((here, trace.get_current_span().get_span_context().is_valid))

    with telemetry.stream(liftbridge_address, metered=False) as (client, name):
        with tracer.start_as_current_span("caller") as caller:
            futures = [client.publish_async(name, b"x", key=b"k") for _ in range(20)]
            for future in futures:
                future.add_done_callback(look)
            client.flush(30)  # every one acknowledged before the stream turns read-only
            client.set_stream_readonly(name)
            failed = client.publish_async(name, b"y", key=b"k")
            failed.add_done_callback(look)
        assert isinstance(failed.exception(30), ReadonlyPartitionError)
        assert all(f.exception(0) is None for f in futures)
        later = client.publish_async(name, b"w", key=b"k")
        later.add_done_callback(look)
        assert isinstance(later.exception(30), ReadonlyPartitionError)

    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 22
    caller_id = caller.get_span_context().span_id
    by_parent = [s for s in sends if s.parent is not None and s.parent.span_id == caller_id]
    assert len(by_parent) == 21  # the one published outside the caller's span is a root
    assert [s.status.status_code for s in sends].count(StatusCode.ERROR) == 2
    assert all(s.end_time is not None for s in sends)
    assert len(seen) == 22
    assert not any(valid for here, valid in seen if not here), seen


def test_a_batch_is_one_client_send_span_linked_to_a_create_span_per_message(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # The messaging conventions for a batch API: each message's creation context is a
    # "create" span of its own, which it carries; the batch's "send" span links to
    # every creation context (also one a caller set, which stays as it is).
    tracer = telemetry.tracer_provider.get_tracer("test")
    with telemetry.stream(liftbridge_address, metered=False, partitions=2) as (client, name):
        with tracer.start_as_current_span("job") as job:
            outcomes = client.publish_batch(
                name,
                [b"a", (b"k", b"b"), (None, b"c", {"traceparent": CUSTOM, "x": b"y"})],
                partition=1,
            )
        assert all(isinstance(o, Ack) for o in outcomes)
        messages = _read(client, name, 1)
        by_value = {m.value: m for m in messages}
        with otel.process(by_value[b"a"], tracer_provider=telemetry.tracer_provider):
            pass

    creates = telemetry.finished(f"create {name}")
    (send,) = telemetry.finished(f"send {name}")
    assert len(creates) == 2
    for span in [*creates, send]:
        assert span.context.trace_id == job.get_span_context().trace_id
        assert span.parent is not None and span.parent.span_id == job.get_span_context().span_id
        assert span.attributes["messaging.destination.partition.id"] == "1"  # type: ignore[index]
    for create in creates:
        assert create.kind is SpanKind.PRODUCER
        assert create.attributes["messaging.operation.type"] == "create"  # type: ignore[index]
    assert send.kind is SpanKind.CLIENT  # its own context is no message's creation context
    assert send.attributes["messaging.operation.type"] == "send"  # type: ignore[index]
    assert send.attributes["messaging.batch.message_count"] == 3  # type: ignore[index]

    created = {c.context.span_id for c in creates}
    carried = {value: _carried(by_value[value]) for value in (b"a", b"b", b"c")}
    assert {carried[b"a"].span_id, carried[b"b"].span_id} == created  # one each
    assert format(carried[b"c"].span_id, "016x") == CUSTOM_SPAN  # left as the caller set it
    assert by_value[b"c"].headers["x"] == b"y" and by_value[b"b"].key == b"k"
    assert set(_linked(send)) == created | {int(CUSTOM_SPAN, 16)}

    # A consumer's process span continues the message's own creation context.
    (process,) = telemetry.finished(f"process {name}")
    assert process.parent is not None and process.parent.span_id == carried[b"a"].span_id
    assert _linked(process) == [carried[b"a"].span_id]


def test_without_create_spans_a_batch_is_one_producer_span_its_messages_carry(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    with telemetry.stream(liftbridge_address, batch_create_spans=False) as (client, name):
        outcomes = client.publish_batch(name, [b"a", b"b", (None, b"c", {"traceparent": CUSTOM})])
        assert all(isinstance(o, Ack) for o in outcomes)
        by_value = {m.value: m for m in _read(client, name)}

    assert not telemetry.finished(f"create {name}")
    (send,) = telemetry.finished(f"send {name}")
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes["messaging.batch.message_count"] == 3  # type: ignore[index]
    assert _carried(by_value[b"a"]).span_id == send.context.span_id
    assert _carried(by_value[b"b"]).span_id == send.context.span_id
    assert format(_carried(by_value[b"c"]).span_id, "016x") == CUSTOM_SPAN
    assert _linked(send) == [int(CUSTOM_SPAN, 16)]
    assert telemetry.count(DURATION) == 1
    assert telemetry.total(SENT) == 3


def test_consumer_group_messages_continue_their_producers_trace(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # A consumer group member delivers messages whose extracted context is their
    # creation context: a publish's send span, a batch message's create span.
    with telemetry.stream(liftbridge_address, metered=False, partitions=2) as (client, name):
        client.publish(name, b"single", partition=0)
        client.publish_batch(name, [b"batched-1", b"batched-2"], partition=1)
        with client.consumer(
            unique("g"), streams=[name], auto_commit=None, start=StartAt.earliest()
        ) as consumer:
            delivered: dict[bytes, Message] = {}
            while len(delivered) < 3:
                msg = consumer.get(timeout=30)
                delivered[msg.value] = msg
                with otel.process(msg, tracer_provider=telemetry.tracer_provider):
                    pass

    (send_single, send_batch) = sorted(
        telemetry.finished(f"send {name}"), key=lambda s: s.start_time or 0
    )
    create_spans = telemetry.finished(f"create {name}")
    creates = {c.context.span_id for c in create_spans}
    trace_of = {s.context.span_id: s.context.trace_id for s in [send_single, *create_spans]}
    assert send_batch.attributes["messaging.batch.message_count"] == 2  # type: ignore[index]
    origin = {
        b"single": send_single.context.span_id,
        b"batched-1": _carried(delivered[b"batched-1"]).span_id,
        b"batched-2": _carried(delivered[b"batched-2"]).span_id,
    }
    assert {origin[b"batched-1"], origin[b"batched-2"]} == creates and len(creates) == 2
    assert _carried(delivered[b"single"]).span_id == origin[b"single"]
    processes = telemetry.finished(f"process {name}")
    assert len(processes) == 3
    by_parent = {p.parent.span_id: p for p in processes if p.parent is not None}
    assert set(by_parent) == set(origin.values())
    for span_id, process in by_parent.items():
        assert process.kind is SpanKind.CONSUMER
        assert process.context.trace_id == trace_of[span_id]
        assert _linked(process) == [span_id]


def test_process_spans_join_the_producers_trace_and_errors_are_recorded(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    with telemetry.stream(liftbridge_address) as (client, name):
        client.publish(name, b"hello")
        (message,) = _read(client, name)
        with pytest.raises(RuntimeError):
            with telemetry.process(message):
                raise RuntimeError("handler failed")
        with telemetry.process(message):
            pass  # handled this time
        with pytest.raises(NoSuchPartitionError):
            client.publish(name, b"x", partition=7)

    (send,) = [s for s in telemetry.finished(f"send {name}") if s.status.is_ok]
    (process, handled) = telemetry.finished(f"process {name}")
    assert handled.status.is_ok and "error.type" not in (handled.attributes or {})
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert _linked(process) == [send.context.span_id]
    assert process.status.status_code is StatusCode.ERROR
    # A failed operation's error.type, as on the send spans (a builtin's bare name).
    assert process.attributes["error.type"] == "RuntimeError"  # type: ignore[index]
    assert telemetry.points("messaging.client.consumed.messages")
    # The conventions' processing duration (which MUST be reported for process
    # operations): a point per handling, the failed one with its error.type.
    durations = {
        p.attributes.get("error.type"): p  # type: ignore[attr-defined]
        for p in telemetry.points("messaging.process.duration")
    }
    assert set(durations) == {"RuntimeError", None}
    for point in durations.values():
        assert point.count == 1  # type: ignore[attr-defined]
        assert point.attributes["messaging.operation.name"] == "process"  # type: ignore[attr-defined]
        assert point.attributes["messaging.destination.name"] == name  # type: ignore[attr-defined]

    (failed,) = [s for s in telemetry.finished(f"send {name}") if not s.status.is_ok]
    assert failed.status.status_code is StatusCode.ERROR
    # The fully qualified class name, as the conventions ask and as the SDK records it.
    error_type = "liftbridge_sync.errors.NoSuchPartitionError"
    assert failed.attributes["error.type"] == error_type  # type: ignore[index]
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes["exception.type"] == error_type  # type: ignore[index]


def test_a_handler_interrupted_by_a_base_exception_ends_its_process_span_as_an_error(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # A KeyboardInterrupt (no Exception) left the handling unfinished as much as an
    # error: the span says so, and the interrupt goes on unchanged.
    interrupt = KeyboardInterrupt("stopped mid-handling")
    with telemetry.stream(liftbridge_address) as (client, name):
        client.publish(name, b"hello")
        (message,) = _read(client, name)
        with pytest.raises(KeyboardInterrupt) as raised:
            with telemetry.process(message):
                raise interrupt

    assert raised.value is interrupt
    (process,) = telemetry.finished(f"process {name}")
    assert process.status.status_code is StatusCode.ERROR
    assert process.attributes["error.type"] == "KeyboardInterrupt"  # type: ignore[index]
    (event,) = [e for e in process.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "KeyboardInterrupt"  # type: ignore[index]
    (point,) = telemetry.points("messaging.process.duration")
    assert point.attributes["error.type"] == "KeyboardInterrupt"  # type: ignore[attr-defined]


def test_a_generator_closed_inside_a_process_block_is_no_error(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # GeneratorExit is how Python closes a generator, no failure of the handling.
    with telemetry.stream(liftbridge_address) as (client, name):
        client.publish(name, b"hello")
        (message,) = _read(client, name)

        def handle() -> Generator[None]:
            with telemetry.process(message):
                yield

        handling = handle()
        next(handling)
        handling.close()

    (process,) = telemetry.finished(f"process {name}")
    assert process.status.status_code is StatusCode.UNSET
    assert "error.type" not in (process.attributes or {})


def test_a_failed_publish_names_its_message_and_partition(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # A publish the broker refused was sent with a correlation id to a partition: its
    # span and metrics say which, as for one acknowledged (the partition defaulted here).
    with telemetry.stream(liftbridge_address) as (client, name):
        client.set_stream_readonly(name)
        with pytest.raises(ReadonlyPartitionError):
            client.publish(name, b"x", correlation_id="sync-1")
        refused = client.publish_async(name, b"y", key=b"k").exception(30)
        assert isinstance(refused, ReadonlyPartitionError)
        generated = client.publish_async(name, b"z", headers={"h": b"v"})
        assert isinstance(generated.exception(30), ReadonlyPartitionError)

    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 3
    for span in sends:
        attributes = dict(span.attributes or {})
        assert attributes["error.type"] == "liftbridge_sync.errors.ReadonlyPartitionError"
        assert attributes["messaging.destination.partition.id"] == "0"
        assert attributes.get("messaging.message.id")
    assert "sync-1" in {s.attributes["messaging.message.id"] for s in sends}  # type: ignore[index]
    assert len({s.attributes["messaging.message.id"] for s in sends}) == 3  # type: ignore[index]
    (sent,) = telemetry.points(SENT)
    assert sent.value == 3  # type: ignore[attr-defined]
    assert sent.attributes["messaging.destination.partition.id"] == "0"  # type: ignore[attr-defined]
    (duration,) = telemetry.points(DURATION)
    for point in (sent, duration):  # the spans' error.type
        error_type = point.attributes["error.type"]  # type: ignore[attr-defined]
        assert error_type == "liftbridge_sync.errors.ReadonlyPartitionError"


@pytest.mark.parametrize("headers", [5, "ab", [("a", b"b")], (("a", b"b"),)])
def test_headers_that_are_no_mapping_are_refused_as_without_telemetry(
    liftbridge_address: str, telemetry: Telemetry, headers: object
) -> None:
    # Injecting the trace context copied them into a dict first: a list of pairs was
    # published, an int or a str raised a bare TypeError or ValueError.
    name = unique("otel")
    calls = {
        "publish": lambda c: c.publish(name, b"x", headers=headers),
        "publish_async": lambda c: c.publish_async(name, b"x", headers=headers),
        "publish_batch": lambda c: c.publish_batch(name, [(None, b"x", headers)]),
    }
    refusals: dict[bool, list[tuple[type[BaseException], str]]] = {}
    with Client([liftbridge_address]) as plain:
        plain.create_stream(name, name)
        for traced in (False, True):
            with Client(
                [liftbridge_address],
                tracer_provider=telemetry.tracer_provider if traced else None,
                telemetry=traced,
            ) as client:
                found = refusals.setdefault(traced, [])
                for call in calls.values():
                    with pytest.raises(ArgumentTypeError) as info:
                        call(client)
                    found.append((info.type, str(info.value)))
        assert plain.fetch_partition_metadata(name).newest_offset == -1  # nothing sent
    assert refusals[True] == refusals[False]
    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 3
    assert all(s.status.status_code is StatusCode.ERROR for s in sends)


def test_a_publish_refused_before_it_is_sent_is_no_sent_message(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # messaging.client.sent.messages counts the messages the client attempted to send
    # to the broker and MUST NOT count those not sent: a refused argument is neither.
    # The refused operation still has its span and duration point, with its error.type.
    with telemetry.stream(liftbridge_address) as (client, name):
        refusals = [
            lambda: client.publish(name, "not bytes"),  # type: ignore[arg-type]
            lambda: client.publish_async(name, b"x", headers=5),  # type: ignore[arg-type]
            lambda: client.publish_batch(name, [b"a", (b"only",)]),  # type: ignore[list-item]
            lambda: client.publish_to_subject(name, "not bytes"),  # type: ignore[arg-type]
        ]
        for refusal in refusals:
            with pytest.raises(TypeError):
                refusal()
        assert client.fetch_partition_metadata(name).newest_offset == -1  # nothing sent
        client.publish(name, b"sent")
        client.publish_batch(name, [b"one", b"two"])
        client.publish_to_subject(name, b"by subject")

    sent = telemetry.points(SENT)
    assert telemetry.total(SENT) == 4
    assert all("error.type" not in p.attributes for p in sent)  # type: ignore[attr-defined]
    failed = [p for p in telemetry.points(DURATION) if "error.type" in p.attributes]  # type: ignore[attr-defined]
    assert sum(p.count for p in failed) == 4  # type: ignore[attr-defined]
    assert telemetry.count(DURATION) == 7
    assert len(telemetry.finished(f"send {name}")) == 7


def test_a_refused_streams_span_names_it_in_text_an_exporter_takes(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    """Spans of publishes refused for their stream were named from the raw argument:
    "send 5", "send b'x'", or a lone surrogate, on which an OTLP exporter fails the
    whole batch of spans (protobuf strings are UTF-8)."""
    with telemetry.stream(liftbridge_address) as (client, _name):
        for stream in (5, b"raw", "bad\udc80"):
            with pytest.raises(ConfigurationError):
                client.publish(stream, b"x")  # type: ignore[arg-type]
    names = sorted(s.name for s in telemetry.spans.get_finished_spans())
    assert names == ["send <bytes>", "send <int>", "send bad\\udc80"]
    for span in telemetry.spans.get_finished_spans():
        assert span.attributes is not None
        destination = span.attributes["messaging.destination.name"]
        assert isinstance(destination, str)
        (span.name + destination).encode("utf-8")  # strict: raises on a surrogate


def test_publish_to_subject_is_a_send_span_whose_context_travels_in_the_headers(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    with telemetry.stream(liftbridge_address) as (client, name):
        ack = client.publish_to_subject(name, b"by subject", correlation_id="subj-1")
        assert ack is not None
        with pytest.raises(AckTimeoutError):  # no stream listens there
            client.publish_to_subject(unique("nobody"), b"lost", timeout=0.5)
        client.publish(name, b"by stream")  # its publisher reports with the same id
        (message, _) = _read(client, name)
        observed = telemetry.points("messaging.liftbridge.publish.connects")

    sends = telemetry.finished(f"send {name}")
    (send,) = [s for s in sends if (s.attributes or {}).get("messaging.message.id") == "subj-1"]
    assert send.kind is SpanKind.PRODUCER and send.status.is_ok
    _assert_sent_to(send, name, "0")
    assert message.value == b"by subject"
    assert _carried(message).span_id == send.context.span_id
    (failed,) = [s for s in telemetry.spans.get_finished_spans() if not s.status.is_ok]
    assert failed.attributes["error.type"] == "liftbridge_sync.errors.AckTimeoutError"  # type: ignore[index]
    assert telemetry.total(SENT) == 3
    assert len(observed) == 1  # one client, one series


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
    result = _run_python(script)
    assert result.stdout.strip() == "[False, True]"


def test_a_refused_batch_records_its_error_and_leaves_no_create_spans(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # Bad items fail with the ArgumentTypeError publish_batch gives without telemetry, before
    # anything is sent, on the send span; a malformed batch makes no create spans.
    with telemetry.stream(liftbridge_address, metered=False) as (client, name):
        with pytest.raises(TypeError, match="tuple of 1") as malformed:
            client.publish_batch(name, [b"a", (b"only",)])  # type: ignore[list-item]
        with pytest.raises(TypeError) as not_bytes:  # a header value is bytes-like
            client.publish_batch(name, [(None, b"b", {"traceparent": CUSTOM.decode()})])  # type: ignore[dict-item]
        assert client.fetch_partition_metadata(name).newest_offset == -1  # nothing sent

    assert not telemetry.finished(f"create {name}")
    sends = sorted(telemetry.finished(f"send {name}"), key=lambda s: s.start_time or 0)
    assert [s.attributes["error.type"] for s in sends] == [  # type: ignore[index]
        f"{error.type.__module__}.{error.type.__qualname__}" for error in (malformed, not_bytes)
    ]
    assert malformed.type is not_bytes.type is ArgumentTypeError
    assert all(send.status.status_code is StatusCode.ERROR for send in sends)
    assert [len(send.links) for send in sends] == [0, 0]  # the str context is no context


def test_the_create_spans_of_a_batch_refused_before_it_is_sent_are_errors(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # Well-formed items get their create span (its context goes into their headers
    # before they are framed), but a batch refused when framed was never sent: its
    # messages' creation failed with it, so their create spans are errors with the
    # refusal's error.type, not messages created and handed to the broker.
    refused = [
        [b"a", "not bytes"],
        [b"a", (None, b"b", {"h": 5})],
        [b"a", (b"k", b"b")],  # to partition -1
    ]
    with telemetry.stream(liftbridge_address, metered=False) as (client, name):
        for index, batch in enumerate(refused):
            with pytest.raises(ConfigurationError):
                client.publish_batch(name, batch, partition=-1 if index == 2 else None)  # type: ignore[arg-type]
        assert client.fetch_partition_metadata(name).newest_offset == -1  # nothing sent
        client.publish_batch(name, [b"sent"])

    creates = telemetry.finished(f"create {name}")
    sends = telemetry.finished(f"send {name}")
    assert len(creates) == 7 and len(sends) == 4
    failed = [s for s in creates if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 6
    assert {s.attributes["error.type"] for s in failed} == {  # type: ignore[index]
        "liftbridge_sync.errors.ArgumentTypeError",
        "liftbridge_sync.errors.ConfigurationError",
    }
    (created,) = [s for s in creates if s.status.status_code is not StatusCode.ERROR]
    (sent,) = [s for s in sends if s.status.status_code is not StatusCode.ERROR]
    assert _linked(sent) == [created.context.span_id]
    for send in sends:  # each refused send links to its failed creations
        if send is not sent:
            linked = [c for c in creates if c.context.span_id in _linked(send)]
            assert linked and {c.status.status_code for c in linked} == {StatusCode.ERROR}


def test_publishes_flushed_at_exit_end_their_spans_before_the_sdk_shuts_down(
    liftbridge_address: str,
) -> None:
    # The usual order: liftbridge_sync imported, then the SDK set up. atexit runs the
    # last registered hook first, so the SDK shut down before the library's exit hook
    # flushed the client: every span of the publishes still pending was dropped
    # ("Already shutdown"). An exit hook of the application registered before the first
    # publish still finds the client open.
    script = textwrap.dedent(
        f"""
        import atexit, secrets
        from liftbridge_sync import Client
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor, SpanExporter, SpanExportResult,
        )

        class Counter(SpanExporter):
            sent = 0

            def export(self, spans):
                self.sent += sum(span.name.startswith("send ") for span in spans)
                return SpanExportResult.SUCCESS

            def shutdown(self):  # the SDK's exit hook
                print("send spans exported:", self.sent, flush=True)

        name = "otel-exit-" + secrets.token_hex(4)
        client = Client(["{liftbridge_address}"])
        client.create_stream(name, name)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Counter()))
        trace.set_tracer_provider(provider)
        atexit.register(lambda: print("closed at exit:", client.closed, flush=True))
        futures = [client.publish_async(name, b"x", key=b"k") for _ in range(200)]
        print("acknowledged on return:", sum(f.done() for f in futures), flush=True)
        """
    )
    result = _run_python(script)
    lines = result.stdout.splitlines()
    assert "send spans exported: 200" in lines, (lines, result.stderr[-500:])
    assert "closed at exit: False" in lines
    assert "shutdown" not in result.stderr.lower(), result.stderr[-500:]


def test_a_partition_refused_as_invalid_is_not_recorded_as_the_destination(
    liftbridge_address: str, telemetry: Telemetry
) -> None:
    # A refused partition is no partition of the stream: recorded, each bad value the
    # caller passed (a hash, say) would be a partition id of its own on the span and a
    # metric series of its own.
    with telemetry.stream(liftbridge_address) as (client, name):
        for partition in (-1, 2**40, "0"):
            with pytest.raises(ConfigurationError):
                client.publish(name, b"x", partition=partition)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError):
                client.publish_async(name, b"x", partition=partition)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError):
                client.publish_batch(name, [b"x"], partition=partition)  # type: ignore[arg-type]

    sends = telemetry.finished(f"send {name}")
    assert len(sends) == 9
    for span in [*sends, *telemetry.finished(f"create {name}")]:
        assert "messaging.destination.partition.id" not in (span.attributes or {})
    assert telemetry.count(DURATION) == 9
    for point in telemetry.points(DURATION):
        assert "messaging.destination.partition.id" not in point.attributes  # type: ignore[attr-defined]
