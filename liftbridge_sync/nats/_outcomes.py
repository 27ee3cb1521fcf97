"""The errors that end a NATS publish: nats-py's exceptions and missed deadlines mapped
onto :mod:`liftbridge_sync.errors`. Pure functions: thread-safe."""

from __future__ import annotations

import asyncio
from types import ModuleType

from liftbridge_sync.errors import (
    AckTimeoutError,
    BrokerUnavailableError,
    ClientClosedError,
    LiftbridgeError,
    PublishError,
    PublishRejectedError,
)
from liftbridge_sync.nats._support import Job

__all__ = ["map_nats_error", "timed_out"]


def timed_out(job: Job) -> AckTimeoutError:
    """The error of ``job`` past its deadline: unwritten, or written and not acked."""
    if job.handle is None:  # not written: NATS held up an earlier write
        return AckTimeoutError(
            f"NATS did not take the message for {job.subject!r} in time (it was not sent)"
        )
    return AckTimeoutError(
        f"no ack for {job.subject!r} (correlation id {job.correlation_id!r}) in "
        "time; the stream may not exist, or the partition may be paused or "
        "read-only"
    )


def map_nats_error(nats: ModuleType, exc: BaseException, *, closed: bool) -> LiftbridgeError:
    """The library's error for ``exc``, raised by nats-py (module ``nats``) on a publish
    or flush; ``closed`` says whether the publisher was closed meanwhile."""
    errors = nats.errors
    if isinstance(exc, errors.MaxPayloadError):
        return PublishRejectedError(
            "publish: the message exceeds the NATS server's max_payload",
            code="MAX_PAYLOAD",
        )
    if isinstance(exc, errors.FlushTimeoutError | asyncio.TimeoutError | TimeoutError):
        return AckTimeoutError("NATS did not confirm the messages in time")
    if isinstance(exc, errors.ConnectionClosedError | errors.ConnectionDrainingError):
        if closed:
            return ClientClosedError("NatsPublisher is closed")
        return BrokerUnavailableError("the NATS connection is closed")
    if isinstance(exc, errors.OutboundBufferLimitError):
        return BrokerUnavailableError(
            "NATS is disconnected and the reconnect buffer is full (pending_size)"
        )
    if isinstance(exc, asyncio.CancelledError):
        return ClientClosedError("NatsPublisher is closed")
    error = PublishError(f"NATS publish failed: {str(exc) or type(exc).__name__}")
    error.__cause__ = exc
    return error
