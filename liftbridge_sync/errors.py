"""Exceptions raised by liftbridge-sync, and the one place that maps gRPC codes.

Every exception derives from :class:`LiftbridgeError`::

    LiftbridgeError
    ├── ConfigurationError (ValueError)      bad argument or option, caught before the wire
    ├── EnvelopeError (ValueError)           malformed Liftbridge NATS envelope
    ├── ClientClosedError                    the client (or subscription) was closed
    ├── ForkedClientError                    a connected client was used in a forked child
    ├── BrokerUnavailableError               no broker reachable (UNAVAILABLE, no metadata leader)
    ├── NotLeaderError                       request reached a broker that does not lead
    ├── DeadlineExceededError (TimeoutError) an RPC deadline expired
    ├── StreamExistsError                    CreateStream: name already taken
    ├── NotFoundError
    │   ├── NoSuchStreamError
    │   ├── NoSuchPartitionError
    │   └── StreamDeletedError               stream deleted under a subscription
    ├── PartitionPausedError                 partition paused under a subscription
    ├── ReadonlyPartitionError               partition is read-only
    ├── PermissionDeniedError                server-side authorization refused the call
    ├── ServerError                          any other server status (INTERNAL, UNKNOWN, ...)
    │   ├── InvalidArgumentError             server refused an argument (INVALID_ARGUMENT)
    │   └── UnsupportedError                 the server lacks the RPC (UNIMPLEMENTED)
    └── PublishError
        ├── AckTimeoutError (TimeoutError)   no ack within the ack timeout
        ├── IncorrectOffsetError             optimistic concurrency: expected offset mismatch
        ├── PublishRejectedError             server refused the message (carries ``code``)
        ├── PublishQueueFullError            max_in_flight reached and enqueue timed out
        └── UnobservedPublishFailuresError   flush(): publishes failed and nobody looked

Errors produced from a gRPC status carry ``code`` (a :class:`grpc.StatusCode` name) and
``details`` (the server's message). Every error survives pickling, because Spark ships
exceptions between processes.

:func:`error_from_status` is the only function that turns a gRPC status into one of
these exceptions; its siblings :func:`error_from_async_error` and
:func:`error_from_ack_error` do the same for the per-message failures of
``PublishAsync``. Callers say in which :class:`CallContext` a status arrived, since the
same code means different things on different RPCs (NOT_FOUND is a missing stream for
DeleteStream but a deleted stream in the middle of a subscription).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import grpc

__all__ = [
    "AckTimeoutError",
    "BrokerUnavailableError",
    "CallContext",
    "ClientClosedError",
    "ConfigurationError",
    "DeadlineExceededError",
    "EnvelopeError",
    "ForkedClientError",
    "IncorrectOffsetError",
    "InvalidArgumentError",
    "LiftbridgeError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotFoundError",
    "NotLeaderError",
    "PartitionPausedError",
    "PermissionDeniedError",
    "PublishError",
    "PublishQueueFullError",
    "PublishRejectedError",
    "ReadonlyPartitionError",
    "ServerError",
    "StreamDeletedError",
    "StreamExistsError",
    "UnobservedPublishFailuresError",
    "UnsupportedError",
    "error_from_ack_error",
    "error_from_async_error",
    "error_from_rpc_error",
    "error_from_status",
]


def _rebuild(cls: type[LiftbridgeError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class LiftbridgeError(Exception):
    """Root of every exception raised by liftbridge-sync.

    Attributes:
        code: Name of the gRPC status code that caused the error (e.g. ``"NOT_FOUND"``),
            or ``None`` when the error did not come from a gRPC status.
        details: The server's status message, or ``""``.

    Instances are immutable values and safe to share between threads.
    """

    #: Whether retrying the same request may succeed (used by the retry policy).
    retryable: bool = False

    def __init__(self, message: str = "", *, code: str | None = None, details: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword-only arguments, which the default exception pickling
        # cannot restore; rebuild from args and the instance dict instead.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class ConfigurationError(LiftbridgeError, ValueError):
    """An argument or option is invalid; raised before anything is sent."""


class EnvelopeError(LiftbridgeError, ValueError):
    """Bytes are not a valid Liftbridge envelope; the message names the failed check."""


class ClientClosedError(LiftbridgeError):
    """The client, publisher or subscription was used after ``close()``."""


class ForkedClientError(LiftbridgeError):
    """A client that had connected in a parent process was used after ``fork()``.

    gRPC channels cannot cross a fork. Create the client in the child, or use
    ``Client.for_process(options)`` which keeps one client per process.
    """


class BrokerUnavailableError(LiftbridgeError):
    """No broker could serve the request (UNAVAILABLE, or no metadata leader yet)."""

    retryable = True


class NotLeaderError(LiftbridgeError):
    """The broker that received the request does not lead the partition."""

    retryable = True


class DeadlineExceededError(LiftbridgeError, TimeoutError):
    """The RPC's deadline expired before the server answered."""


class StreamExistsError(LiftbridgeError):
    """A stream with this name already exists."""


class NotFoundError(LiftbridgeError):
    """Base class of the "does not exist" errors."""


class NoSuchStreamError(NotFoundError):
    """The stream does not exist."""


class NoSuchPartitionError(NotFoundError):
    """The stream or the partition does not exist."""


class StreamDeletedError(NotFoundError):
    """The stream was deleted while it was being read."""


class PartitionPausedError(LiftbridgeError):
    """The partition was paused while it was being read."""


class ReadonlyPartitionError(LiftbridgeError):
    """The partition is read-only: publishes are refused."""


class PermissionDeniedError(LiftbridgeError):
    """The server's authorization refused the call."""


class ServerError(LiftbridgeError):
    """The server answered with a status that has no more specific class."""


class InvalidArgumentError(ServerError, ValueError):
    """The server refused an argument (INVALID_ARGUMENT)."""


class UnsupportedError(ServerError):
    """The server does not implement this RPC (it is older than the feature)."""


class PublishError(LiftbridgeError):
    """Base class of errors that fail a publish."""


class AckTimeoutError(PublishError, TimeoutError):
    """No ack arrived within the ack timeout; the message may or may not be stored."""


class IncorrectOffsetError(PublishError):
    """Optimistic concurrency control: the message's expected offset did not match."""


class PublishRejectedError(PublishError):
    """The server refused the message.

    ``code`` is the name of the ``PublishAsyncError`` code (``"BAD_REQUEST"``,
    ``"ENCRYPTION_FAILED"``, ``"INTERNAL"``, ``"UNKNOWN"``) or of the ack error
    (``"TOO_LARGE"``, ``"ENCRYPTION"``) that caused it.
    """


class PublishQueueFullError(PublishError):
    """``max_in_flight`` publishes are pending and no slot freed within the enqueue timeout."""


class UnobservedPublishFailuresError(PublishError):
    """``flush()`` found publishes that failed since the last flush and nobody looked at.

    A publish counts as observed once its future's ``result()`` or ``exception()`` has been
    called (``publish()`` does so itself; a done-callback that inspects the future does
    too). Failures are reported by one ``flush()`` only, then forgotten.

    Attributes:
        count: How many publishes failed unobserved since the previous flush.
        errors: The first of their errors (at most 10), in the order they failed.
    """

    def __init__(
        self,
        message: str = "",
        *,
        count: int = 0,
        errors: Sequence[BaseException] = (),
        code: str | None = None,
        details: str = "",
    ) -> None:
        if not message:
            first = f"; first: {type(errors[0]).__name__}: {errors[0]}" if errors else ""
            message = f"{count} publish(es) failed since the last flush, unobserved{first}"
        super().__init__(message, code=code, details=details)
        self.count = count
        self.errors = list(errors)


class CallContext(enum.Enum):
    """Where a gRPC status arrived; decides what an ambiguous code means."""

    #: Any unary RPC not listed below (metadata, publish to subject, ...).
    GENERIC = "generic"
    #: CreateStream.
    CREATE_STREAM = "create_stream"
    #: DeleteStream.
    DELETE_STREAM = "delete_stream"
    #: PauseStream, SetStreamReadonly: NOT_FOUND may be stream or partition.
    STREAM_ADMIN = "stream_admin"
    #: RPCs that must reach a partition leader (FetchPartitionMetadata, cursors).
    LEADER = "leader"
    #: Opening a subscription (before the server's handshake message).
    SUBSCRIBE_OPEN = "subscribe_open"
    #: A status that ended an established subscription.
    SUBSCRIPTION = "subscription"


_NOT_LEADER_HINTS = ("not partition leader", "not leader", "partition leader", "not cursor")
_NO_METADATA_LEADER_HINTS = ("no known metadata leader", "no leader")


def _contains(details: str, hints: tuple[str, ...]) -> bool:
    lowered = details.lower()
    return any(hint in lowered for hint in hints)


def error_from_status(
    code: grpc.StatusCode, details: str, context: CallContext = CallContext.GENERIC
) -> LiftbridgeError:
    """Turn a gRPC status into the matching :class:`LiftbridgeError`.

    This is the only place where status codes are interpreted.

    Args:
        code: The status code of the failed call.
        details: The status message the server sent.
        context: Where the status arrived.

    Returns:
        The exception to raise (not raised here). Its ``retryable`` flag tells the retry
        policy whether the same request may succeed on another attempt.
    """
    name = code.name
    text = details or name
    where = context.value

    def make(cls: type[LiftbridgeError], message: str | None = None) -> LiftbridgeError:
        return cls(message or f"{where}: {text}", code=name, details=details)

    sc = grpc.StatusCode
    if code is sc.UNAVAILABLE:
        return make(BrokerUnavailableError, f"{where}: broker unavailable: {text}")
    if code is sc.DEADLINE_EXCEEDED:
        return make(DeadlineExceededError, f"{where}: deadline exceeded: {text}")
    if code is sc.ALREADY_EXISTS:
        return make(StreamExistsError)
    if code in (sc.PERMISSION_DENIED, sc.UNAUTHENTICATED):
        return make(PermissionDeniedError)
    if code is sc.UNIMPLEMENTED:
        return make(UnsupportedError, f"{where}: the server does not support this RPC: {text}")
    if code is sc.INVALID_ARGUMENT:
        return make(InvalidArgumentError)

    if code is sc.NOT_FOUND:
        if context is CallContext.SUBSCRIPTION:
            return make(StreamDeletedError)
        if context is CallContext.DELETE_STREAM:
            return make(NoSuchStreamError)
        if context is CallContext.STREAM_ADMIN and "partition" not in text.lower():
            return make(NoSuchStreamError)
        return make(NoSuchPartitionError)

    if code is sc.FAILED_PRECONDITION:
        if context is CallContext.SUBSCRIPTION:
            return make(PartitionPausedError)
        if context in (CallContext.SUBSCRIBE_OPEN, CallContext.LEADER) or _contains(
            text, _NOT_LEADER_HINTS
        ):
            return make(NotLeaderError)
        if "readonly" in text.lower() or "read-only" in text.lower():
            return make(ReadonlyPartitionError)
        return make(ServerError)

    if code is sc.RESOURCE_EXHAUSTED:
        # Subscriptions: end of a read-only partition, stop position reached, or
        # STOP_LATEST on an empty partition. All mean "no more data will come".
        return make(ReadonlyPartitionError)

    if code is sc.UNKNOWN and "not authorized" in text.lower():
        return make(PermissionDeniedError)

    if code is sc.INTERNAL and _contains(text, _NO_METADATA_LEADER_HINTS):
        return make(BrokerUnavailableError, f"{where}: no metadata leader yet: {text}")

    if code is sc.INTERNAL and "cursors stream does not exist" in text.lower():
        return make(
            ServerError,
            f"{where}: {text} (the server runs with cursors disabled; "
            "set cursors.stream.partitions > 0 in its configuration)",
        )

    return make(ServerError)


def error_from_rpc_error(
    error: grpc.RpcError, context: CallContext = CallContext.GENERIC
) -> LiftbridgeError:
    """Map a ``grpc.RpcError`` (which is also a ``grpc.Call``) with :func:`error_from_status`."""
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else ""
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return error_from_status(code, details or "", context)


#: ``PublishAsyncError.Code`` numbers (liftbridge-api) to names.
_ASYNC_CODES = {
    0: "UNKNOWN",
    1: "BAD_REQUEST",
    2: "NOT_FOUND",
    3: "INTERNAL",
    4: "READONLY",
    5: "INCORRECT_OFFSET",
    6: "ENCRYPTION_FAILED",
    7: "PERMISSION_DENIED",
}


def error_from_async_error(code: int, message: str) -> LiftbridgeError:
    """Map a ``PublishAsyncError`` (a refused message on the PublishAsync stream)."""
    name = _ASYNC_CODES.get(code, "UNKNOWN")
    text = f"publish: {message or name}"
    if name == "NOT_FOUND":
        cls = NoSuchStreamError if "stream" in message.lower() else NoSuchPartitionError
        return cls(text, code=name, details=message)
    if name == "READONLY":
        return ReadonlyPartitionError(text, code=name, details=message)
    if name == "INCORRECT_OFFSET":
        return IncorrectOffsetError(text, code=name, details=message)
    if name == "PERMISSION_DENIED":
        return PermissionDeniedError(text, code=name, details=message)
    return PublishRejectedError(text, code=name, details=message)


def error_from_ack_error(ack_error: str) -> LiftbridgeError:
    """Map the name of a leader's ``Ack.Error`` (e.g. ``"TOO_LARGE"``)."""
    if ack_error == "INCORRECT_OFFSET":
        return IncorrectOffsetError(
            "publish: expected offset did not match", code=ack_error, details=ack_error
        )
    if ack_error == "TOO_LARGE":
        text = "publish: message exceeds the server's clustering.replication.max.bytes"
        return PublishRejectedError(text, code=ack_error, details=ack_error)
    return PublishRejectedError(
        f"publish: the leader refused the message ({ack_error})", code=ack_error, details=ack_error
    )
