"""Client.publish_to_subject's ``timeout`` bounds the whole call, retries included.

A broker that fails each attempt late (UNAVAILABLE just before the attempt's deadline, a
connection lost under load) made every retry wait for a whole ``timeout`` again: with the
default policy a call with ``timeout=1`` could take up to 10 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, RetryPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing import FakeBroker


class _LateFailure(FakeBroker):
    """Answers each PublishToSubject with UNAVAILABLE shortly before its deadline (or,
    with ``fast_then_ok``, the first at once and the next with success)."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0
        self.fast_then_ok = False

    def PublishToSubject(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PublishToSubjectRequest, context: grpc.ServicerContext
    ) -> api_pb2.PublishToSubjectResponse:
        with self.lock:
            self.attempts += 1
            attempt = self.attempts
        if self.fast_then_ok:
            if attempt == 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: connection lost")
            return api_pb2.PublishToSubjectResponse()
        left = context.time_remaining()
        # The fault: the attempt fails late, not a wait for the client (bounded anyway).
        threading.Event().wait(max(0.0, min(left if left is not None else 1.0, 5.0) - 0.15))
        context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: connection lost")
        raise AssertionError("unreachable")


@pytest.fixture
def late() -> Iterator[_LateFailure]:
    server = _LateFailure()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_timeout_bounds_every_attempt_and_back_off_together(late: _LateFailure) -> None:
    retry = RetryPolicy(max_attempts=5, max_delay=30.0, initial=0.01, maximum=0.05, jitter=0.0)
    with Client([late.address], retry=retry, rpc_timeout=30.0) as client:
        started = time.monotonic()
        with pytest.raises((lb.AckTimeoutError, lb.BrokerUnavailableError)):
            client.publish_to_subject("subject", b"x", timeout=1.0)
        elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"took {elapsed:.2f}s for a 1 s timeout ({late.attempts} attempts)"
    assert late.attempts >= 1


def test_a_retry_still_happens_within_the_timeout(late: _LateFailure) -> None:
    # Fails fast at first, then answers: the retry fits in the budget and succeeds.
    late.fast_then_ok = True
    retry = RetryPolicy(max_attempts=5, max_delay=30.0, initial=0.01, maximum=0.05, jitter=0.0)
    with Client([late.address], retry=retry) as client:
        assert client.publish_to_subject("subject", b"x", timeout=5.0) is None
    assert late.attempts == 2
