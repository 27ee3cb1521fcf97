"""The unary RPCs of the Liftbridge API, each typed with its request and response.

``ClientCore.call_any(rpcs.CREATE_STREAM, request)`` is then checked by ``mypy --strict``
end to end: the request must be a ``CreateStreamRequest`` and the result is a
``CreateStreamResponse``. Immutable constants: thread-safe.
"""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

from google.protobuf.message import Message as ProtoMessage

from liftbridge_sync._proto import api_pb2

__all__ = [
    "CREATE_STREAM",
    "DELETE_STREAM",
    "FETCH_CONSUMER_GROUP_ASSIGNMENTS",
    "FETCH_CURSOR",
    "FETCH_METADATA",
    "FETCH_PARTITION_METADATA",
    "JOIN_CONSUMER_GROUP",
    "LEAVE_CONSUMER_GROUP",
    "PAUSE_STREAM",
    "PUBLISH_TO_SUBJECT",
    "REPORT_CONSUMER_GROUP_COORDINATOR",
    "SET_CURSOR",
    "SET_STREAM_READONLY",
    "Rpc",
]

Req = TypeVar("Req", bound=ProtoMessage)
Resp = TypeVar("Resp", bound=ProtoMessage)


@dataclasses.dataclass(frozen=True, slots=True)
class Rpc(Generic[Req, Resp]):
    """One unary RPC: its method name on the generated stub, typed by its messages."""

    name: str


CREATE_STREAM: Rpc[api_pb2.CreateStreamRequest, api_pb2.CreateStreamResponse] = Rpc("CreateStream")
DELETE_STREAM: Rpc[api_pb2.DeleteStreamRequest, api_pb2.DeleteStreamResponse] = Rpc("DeleteStream")
PAUSE_STREAM: Rpc[api_pb2.PauseStreamRequest, api_pb2.PauseStreamResponse] = Rpc("PauseStream")
SET_STREAM_READONLY: Rpc[api_pb2.SetStreamReadonlyRequest, api_pb2.SetStreamReadonlyResponse] = Rpc(
    "SetStreamReadonly"
)
FETCH_METADATA: Rpc[api_pb2.FetchMetadataRequest, api_pb2.FetchMetadataResponse] = Rpc(
    "FetchMetadata"
)
FETCH_PARTITION_METADATA: Rpc[
    api_pb2.FetchPartitionMetadataRequest, api_pb2.FetchPartitionMetadataResponse
] = Rpc("FetchPartitionMetadata")
PUBLISH_TO_SUBJECT: Rpc[api_pb2.PublishToSubjectRequest, api_pb2.PublishToSubjectResponse] = Rpc(
    "PublishToSubject"
)
SET_CURSOR: Rpc[api_pb2.SetCursorRequest, api_pb2.SetCursorResponse] = Rpc("SetCursor")
FETCH_CURSOR: Rpc[api_pb2.FetchCursorRequest, api_pb2.FetchCursorResponse] = Rpc("FetchCursor")
JOIN_CONSUMER_GROUP: Rpc[api_pb2.JoinConsumerGroupRequest, api_pb2.JoinConsumerGroupResponse] = Rpc(
    "JoinConsumerGroup"
)
LEAVE_CONSUMER_GROUP: Rpc[api_pb2.LeaveConsumerGroupRequest, api_pb2.LeaveConsumerGroupResponse] = (
    Rpc("LeaveConsumerGroup")
)
FETCH_CONSUMER_GROUP_ASSIGNMENTS: Rpc[
    api_pb2.FetchConsumerGroupAssignmentsRequest, api_pb2.FetchConsumerGroupAssignmentsResponse
] = Rpc("FetchConsumerGroupAssignments")
REPORT_CONSUMER_GROUP_COORDINATOR: Rpc[
    api_pb2.ReportConsumerGroupCoordinatorRequest, api_pb2.ReportConsumerGroupCoordinatorResponse
] = Rpc("ReportConsumerGroupCoordinator")
