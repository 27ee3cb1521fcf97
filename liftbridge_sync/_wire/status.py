"""The one place that turns gRPC statuses and PublishAsync errors into exceptions.

:func:`error_from_status` is the only function that interprets a gRPC status code; its
siblings :func:`error_from_async_error` and :func:`error_from_ack_error` do the same for
the per-message failures of ``PublishAsync``. Callers say in which :class:`CallContext`
a status arrived, since the same code means different things on different RPCs
(NOT_FOUND is a missing stream for DeleteStream but a deleted stream in the middle of a
subscription). Pure functions: thread-safe.
"""

from __future__ import annotations

import enum

import grpc

from liftbridge_sync.errors import (
    BrokerUnavailableError,
    DeadlineExceededError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    MessageTooLargeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    PermissionDeniedError,
    PublishRejectedError,
    ReadonlyPartitionError,
    ServerError,
    StreamDeletedError,
    StreamExistsError,
    UnsupportedError,
)

__all__ = [
    "CallContext",
    "error_from_ack_error",
    "error_from_async_error",
    "error_from_rpc_error",
    "error_from_status",
]


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
        if context in (CallContext.SUBSCRIBE_OPEN, CallContext.SUBSCRIPTION):
            # End of a read-only partition, stop position reached, or STOP_LATEST on an
            # empty partition. All mean "no more data will come".
            return make(ReadonlyPartitionError)
        if "larger than max" in text.lower():
            return make(MessageTooLargeError, f"{where}: message too large: {text}")
        return make(ServerError)

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
