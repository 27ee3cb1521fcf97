"""A traced ``publish()`` returns once its ``send`` span has ended, also when the thread
that resolved its future (the I/O thread, for concurrent callers) is ending it this
moment: the caller's own attempt to end it found it taken and returned at once, so the
span ended after ``publish()`` returned (1 in 200 under load, in the integration test).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Mapping

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider  # noqa: E402

from liftbridge_sync.models import Ack  # noqa: E402
from liftbridge_sync.otel._telemetry import Telemetry  # noqa: E402
from tests.stacks import thread_in  # noqa: E402
from tests.waiting import wait_until  # noqa: E402


class _Holding(SpanProcessor):
    """Holds the thread that ends a span in ``on_end`` until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ended: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.entered.set()
        self.release.wait(30)
        self.ended.append(span.name)


def test_publish_returns_after_the_resolving_thread_ended_its_span() -> None:
    holding = _Holding()
    provider = TracerProvider()
    provider.add_span_processor(holding)
    telemetry = Telemetry(provider, None, propagate=False)
    future: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
    resolver = threading.Thread(target=future.set_result, args=(None,))

    def send(
        headers: Mapping[str, bytes] | None,
    ) -> tuple[concurrent.futures.Future[Ack | None], str, int]:
        return future, "id-1", 0

    def ack_of(sent: concurrent.futures.Future[Ack | None]) -> Ack | None:
        # Resolved on another thread, whose done-callback is ending the span when the
        # caller has its outcome.
        resolver.start()
        wait_until(holding.entered.is_set, what="the resolver ending the span")
        return sent.result(timeout=10)

    seen_on_return: list[list[str]] = []

    def publish() -> None:
        telemetry.trace_publish("s", 0, None, send, ack_of)
        seen_on_return.append(list(holding.ended))

    def returned_or_waiting() -> bool:
        return not caller.is_alive() or (thread_in(caller, "finish") and thread_in(caller, "wait"))

    caller = threading.Thread(target=publish)
    caller.start()
    # Returned, or waiting for the resolver to end the span: let the resolver go on.
    wait_until(returned_or_waiting, what="publish() to return or wait for its span to end")
    holding.release.set()
    caller.join(10)
    resolver.join(10)
    assert not caller.is_alive() and not resolver.is_alive()
    assert seen_on_return == [["send s"]]
