"""The exception tree, pickling, and the one gRPC status mapping."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import errors
from liftbridge_sync._wire.status import (
    CallContext,
    error_from_rpc_error,
    error_from_status,
    is_transient_async_error,
)

SC = grpc.StatusCode
ALL_ERRORS = [
    obj
    for obj in vars(errors).values()
    if inspect.isclass(obj) and issubclass(obj, errors.LiftbridgeError)
]


def test_every_error_is_exported_from_the_package() -> None:
    for cls in ALL_ERRORS:
        assert getattr(lb, cls.__name__) is cls


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_every_error_survives_pickling(cls: type[errors.LiftbridgeError]) -> None:
    original = cls("something failed", code="NOT_FOUND", details="server text")
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is cls
    assert str(copy) == "something failed"
    assert copy.code == "NOT_FOUND"
    assert copy.details == "server text"
    assert copy.retryable == original.retryable


def test_tree_shape_documented_in_module_docstring() -> None:
    doc = errors.__doc__ or ""
    for cls in ALL_ERRORS:
        assert cls.__name__ in doc, f"{cls.__name__} missing from the drawn tree"
    assert issubclass(lb.AckTimeoutError, TimeoutError)
    assert issubclass(lb.DeadlineExceededError, TimeoutError)
    assert issubclass(lb.WaitTimeoutError, TimeoutError)
    assert issubclass(lb.ConfigurationError, ValueError)
    assert issubclass(lb.EnvelopeError, ValueError)
    assert issubclass(lb.StreamDeletedError, lb.NotFoundError)


@pytest.mark.parametrize(
    ("code", "details", "context", "expected"),
    [
        (SC.UNAVAILABLE, "", CallContext.GENERIC, lb.BrokerUnavailableError),
        (SC.DEADLINE_EXCEEDED, "", CallContext.GENERIC, lb.DeadlineExceededError),
        (SC.ALREADY_EXISTS, "", CallContext.CREATE_STREAM, lb.StreamExistsError),
        (SC.NOT_FOUND, "", CallContext.DELETE_STREAM, lb.NoSuchStreamError),
        (SC.NOT_FOUND, "stream not found", CallContext.STREAM_ADMIN, lb.NoSuchStreamError),
        (SC.NOT_FOUND, "partition not found", CallContext.STREAM_ADMIN, lb.NoSuchPartitionError),
        (SC.NOT_FOUND, "No such partition", CallContext.SUBSCRIBE_OPEN, lb.NoSuchPartitionError),
        (SC.NOT_FOUND, "partition not found", CallContext.LEADER, lb.NoSuchPartitionError),
        (SC.NOT_FOUND, "commit log was deleted", CallContext.SUBSCRIPTION, lb.StreamDeletedError),
        (
            SC.FAILED_PRECONDITION,
            "Server not partition leader",
            CallContext.SUBSCRIBE_OPEN,
            lb.NotLeaderError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "Server not cursor partition leader",
            CallContext.LEADER,
            lb.NotLeaderError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "commit log was closed",
            CallContext.SUBSCRIPTION,
            lb.PartitionPausedError,
        ),
        (SC.FAILED_PRECONDITION, "raft apply failed", CallContext.STREAM_ADMIN, lb.ServerError),
        (
            SC.RESOURCE_EXHAUSTED,
            "End of readonly partition",
            CallContext.SUBSCRIPTION,
            lb.ReadonlyPartitionError,
        ),
        (
            SC.RESOURCE_EXHAUSTED,
            "grpc: received message larger than max (5000000 vs. 4194304)",
            CallContext.GENERIC,
            lb.ServerError,  # sent: not MessageTooLargeError, a ConfigurationError
        ),
        (SC.RESOURCE_EXHAUSTED, "quota", CallContext.GENERIC, lb.ServerError),
        (
            SC.RESOURCE_EXHAUSTED,
            "Stop offset reached",
            CallContext.SUBSCRIPTION,
            lb.ReadonlyPartitionError,
        ),
        (
            SC.RESOURCE_EXHAUSTED,
            "Stream is empty",
            CallContext.SUBSCRIBE_OPEN,
            lb.ReadonlyPartitionError,
        ),
        (
            SC.RESOURCE_EXHAUSTED,
            "Received message larger than max (5000 vs. 1024)",
            CallContext.SUBSCRIPTION,
            lb.ServerError,
        ),
        (SC.RESOURCE_EXHAUSTED, "", CallContext.SUBSCRIPTION, lb.ServerError),
        (SC.PERMISSION_DENIED, "", CallContext.GENERIC, lb.PermissionDeniedError),
        (
            SC.UNKNOWN,
            "The client is not authorized to call Subscribe",
            CallContext.GENERIC,
            lb.PermissionDeniedError,
        ),
        (
            SC.INTERNAL,
            "no known metadata leader",
            CallContext.CREATE_STREAM,
            lb.BrokerUnavailableError,
        ),
        (SC.INTERNAL, "Cursors stream does not exist", CallContext.LEADER, lb.ServerError),
        (
            SC.INVALID_ARGUMENT,
            "Subject is invalid",
            CallContext.CREATE_STREAM,
            lb.InvalidArgumentError,
        ),
        (SC.UNIMPLEMENTED, "", CallContext.GENERIC, lb.UnsupportedError),
        (SC.INTERNAL, "boom", CallContext.GENERIC, lb.ServerError),
        # Consumer groups: texts of server v1.9.0 (groups.go, metadata.go, partition.go).
        (
            SC.NOT_FOUND,
            "consumer group does not exist",
            CallContext.GROUP,
            lb.ConsumerGroupNotFoundError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "No such consumer group g",
            CallContext.GROUP,
            lb.ConsumerGroupNotFoundError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "broker is not the consumer group coordinator",
            CallContext.GROUP,
            lb.CoordinatorMismatchError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "client-provided group epoch differs from broker group epoch",
            CallContext.GROUP,
            lb.CoordinatorMismatchError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "Coordinator generation mismatch, current coordinator: a epoch: 3, got ...",
            CallContext.GROUP,
            lb.CoordinatorMismatchError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "consumer is not a member of the consumer group",
            CallContext.GROUP,
            lb.NotGroupMemberError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "Consumer c is not a member of consumer group g",
            CallContext.GROUP,
            lb.NotGroupMemberError,
        ),
        (
            SC.FAILED_PRECONDITION,
            "consumer is already a member of the consumer group",
            CallContext.GROUP,
            lb.ConsumerIdInUseError,
        ),
        (SC.FAILED_PRECONDITION, "stream does not exist", CallContext.GROUP, lb.NoSuchStreamError),
        (
            SC.FAILED_PRECONDITION,
            "Consumer is not currently assigned this partition",
            CallContext.SUBSCRIBE_OPEN,
            lb.CoordinatorMismatchError,
        ),
        (SC.UNAVAILABLE, "connection refused", CallContext.GROUP, lb.BrokerUnavailableError),
    ],
)
def test_status_mapping(
    code: grpc.StatusCode, details: str, context: CallContext, expected: type
) -> None:
    error = error_from_status(code, details, context)
    assert type(error) is expected
    assert error.code == code.name
    assert error.details == details
    assert context.value in str(error)


def test_only_transient_errors_are_retryable() -> None:
    retryable = {cls for cls in ALL_ERRORS if cls.retryable}
    assert retryable == {lb.BrokerUnavailableError, lb.NotLeaderError}


def test_cursors_disabled_message_says_how_to_fix() -> None:
    error = error_from_status(SC.INTERNAL, "Cursors stream does not exist", CallContext.LEADER)
    assert "cursors.stream.partitions" in str(error)


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: object, details: object) -> None:
        self._code, self._details = code, details

    def code(self) -> Any:
        return self._code

    def details(self) -> Any:
        return self._details


def test_rpc_error_adapter_tolerates_missing_parts() -> None:
    mapped = error_from_rpc_error(_FakeRpcError(SC.UNAVAILABLE, "down"))
    assert isinstance(mapped, lb.BrokerUnavailableError)
    odd = error_from_rpc_error(_FakeRpcError(None, None))
    assert type(odd) is lb.ServerError
    assert odd.code == "UNKNOWN"


@pytest.mark.parametrize(
    ("code", "message", "transient"),
    [
        (3, "failed to publish to NATS: nats: outbound buffer limit exceeded", True),
        (3, "failed to publish to NATS: nats: connection closed", True),
        (3, "failed to publish to NATS: nats: connection reconnecting", True),
        # The NATS server went away under the broker before nats.go saw it (CI, once).
        (
            3,
            "failed to publish to NATS: write tcp 127.0.0.1:4->127.0.0.1:5: write: broken pipe",
            True,
        ),
        (
            3,
            "failed to publish to NATS: write unix @->@: write: connection reset by peer",
            True,
        ),
        (3, "failed to publish to NATS: write tcp 127.0.0.1:4->127.0.0.1:5: i/o timeout", False),
        # About the message, not the connection: it would fail again.
        (3, "failed to publish to NATS: nats: maximum payload exceeded", False),
        (3, "failed to resume stream: boom", False),
        (0, "failed to publish to NATS: nats: connection closed", False),
    ],
)
def test_only_a_broker_without_nats_is_a_transient_publish_refusal(
    code: int, message: str, transient: bool
) -> None:
    assert is_transient_async_error(code, message) is transient


@pytest.mark.parametrize("context", list(CallContext))
def test_messages_name_the_call_in_the_users_words(context: CallContext) -> None:
    # Not internal identifiers such as "subscribe_open" or "generic".
    error = error_from_status(grpc.StatusCode.INTERNAL, "boom", context)
    prefix = str(error).split(":", 1)[0]
    assert prefix and "_" not in prefix and prefix != "generic"
    assert str(error).endswith("boom")
