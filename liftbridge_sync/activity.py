"""Typed events of the activity stream (``__activity``).

With ``activity.stream.enabled: true`` the metadata leader publishes one event per
cluster-wide change to the reserved stream ``__activity``, in Raft order. Each message
value is a plain serialized ``ActivityStreamEvent`` protobuf (no envelope);
:func:`decode_event` turns it into one of the frozen dataclasses below. Delivery is
at-least-once: an event may repeat after a metadata-leader change, with the same
``id`` (the iterator of :meth:`Client.activity` drops such repeats).

Every event carries ``id`` (the Raft index: strictly increasing), ``offset`` (its
position in ``__activity``) and ``timestamp_ns`` (when the server stored it).

Immutable values and pure functions: thread-safe.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from google.protobuf.message import DecodeError

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.validate import check_int
from liftbridge_sync.errors import ArgumentTypeError, ServerError
from liftbridge_sync.models import datetime_from_ns

__all__ = [
    "ACTIVITY_STREAM",
    "ActivityEvent",
    "ConsumerJoinedGroup",
    "ConsumerLeftGroup",
    "StreamCreated",
    "StreamDeleted",
    "StreamPaused",
    "StreamReadonlySet",
    "StreamResumed",
    "UnknownActivity",
    "decode_event",
]

#: Name of the reserved stream the server publishes activity events to.
ACTIVITY_STREAM = "__activity"


@dataclasses.dataclass(frozen=True, slots=True)
class ActivityEvent:
    """Fields common to every activity event.

    Immutable; safe to share between threads.
    """

    #: Event id: the Raft index of the change, strictly increasing (repeats are duplicates).
    id: int
    #: Offset of the event in the ``__activity`` stream.
    offset: int
    #: When the server stored the event, Unix nanoseconds (0 if unknown).
    timestamp_ns: int

    @property
    def timestamp(self) -> datetime | None:
        """When the server stored the event (aware UTC), ``None`` if unknown."""
        return datetime_from_ns(self.timestamp_ns)


@dataclasses.dataclass(frozen=True, slots=True)
class StreamCreated(ActivityEvent):
    """A stream was created. Immutable; safe to share between threads."""

    stream: str
    #: Ids of the partitions created.
    partitions: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDeleted(ActivityEvent):
    """A stream was deleted. Immutable; safe to share between threads."""

    stream: str


@dataclasses.dataclass(frozen=True, slots=True)
class StreamPaused(ActivityEvent):
    """Partitions of a stream were paused. Immutable; safe to share between threads."""

    stream: str
    #: Partitions paused (empty: the server sent none, meaning all of them).
    partitions: tuple[int, ...]
    #: The pause's ``resume_all`` flag.
    resume_all: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StreamResumed(ActivityEvent):
    """Paused partitions were resumed (by a publish or a ``resume`` subscribe).

    Immutable; safe to share between threads.
    """

    stream: str
    partitions: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamReadonlySet(ActivityEvent):
    """Partitions were made read-only, or writable again.

    Immutable; safe to share between threads.
    """

    stream: str
    partitions: tuple[int, ...]
    #: The new read-only flag.
    readonly: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerJoinedGroup(ActivityEvent):
    """A consumer joined a group (also sent when its join created the group).

    Immutable; safe to share between threads.
    """

    group_id: str
    consumer_id: str
    #: Streams the consumer asked to consume.
    streams: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerLeftGroup(ActivityEvent):
    """A consumer left a group, or was removed from it.

    Immutable; safe to share between threads.
    """

    group_id: str
    consumer_id: str
    #: ``True`` if the server removed it for not polling within the consumer timeout.
    expired: bool


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownActivity(ActivityEvent):
    """An event of a kind newer than this client; ``op`` is its ``ActivityStreamOp`` number.

    Immutable; safe to share between threads.
    """

    op: int


# The field each operation the server sends sets (ActivityStreamEvent's oneof in spirit).
_OP_FIELDS: dict[int, str] = {
    api_pb2.CREATE_STREAM: "createStreamOp",
    api_pb2.DELETE_STREAM: "deleteStreamOp",
    api_pb2.PAUSE_STREAM: "pauseStreamOp",
    api_pb2.RESUME_STREAM: "resumeStreamOp",
    api_pb2.SET_STREAM_READONLY: "setStreamReadonlyOp",
    api_pb2.JOIN_CONSUMER_GROUP: "joinConsumerGroupOp",
    api_pb2.LEAVE_CONSUMER_GROUP: "leaveConsumerGroupOp",
}


def decode_event(
    value: bytes | bytearray | memoryview, *, offset: int = -1, timestamp_ns: int = 0
) -> ActivityEvent:
    """Decode the value of one ``__activity`` message.

    Args:
        value: The message value: a serialized ``ActivityStreamEvent``.
        offset: The message's offset in ``__activity``.
        timestamp_ns: The message's timestamp, Unix nanoseconds.

    Returns:
        The typed event; :class:`UnknownActivity` for an operation this client does not
        know.

    Raises:
        ArgumentTypeError: if ``value`` is not bytes-like, or ``offset`` or
            ``timestamp_ns`` not an int.
        ConfigurationError: if ``offset`` is below -1, or either is beyond int64 (the
            event's ``timestamp`` would not be a date).
        ServerError: if ``value`` is not an ``ActivityStreamEvent``: it does not parse,
            has no id, or lacks the field of its operation.
    """
    # bytes() would take an int for a count of zeros and a str for a TypeError.
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ArgumentTypeError(f"value must be bytes-like, not {type(value).__name__}")
    check_int("offset", offset, minimum=-1)
    check_int("timestamp_ns", timestamp_ns, minimum=-(2**63))
    pb = api_pb2.ActivityStreamEvent()
    try:
        pb.ParseFromString(bytes(value))
    except DecodeError as exc:
        raise ServerError(
            f"activity stream: offset {offset} is not an ActivityStreamEvent ({exc})"
        ) from None
    i, o, t = pb.id, offset, timestamp_ns
    op = pb.op
    # Anyone may publish to __activity, and protobuf parses an empty value (or a few
    # stray octets) into defaults: CREATE_STREAM, id 0. The server always sets the id (a
    # Raft index, never 0) and the field of a known operation.
    field = _OP_FIELDS.get(op)
    if i == 0 or (field is not None and not pb.HasField(field)):
        missing = "an id" if i == 0 else field
        raise ServerError(
            f"activity stream: offset {offset} is not an ActivityStreamEvent "
            f"(op {op} without {missing})"
        )
    if op == api_pb2.CREATE_STREAM:
        c = pb.createStreamOp
        return StreamCreated(
            id=i, offset=o, timestamp_ns=t, stream=c.stream, partitions=tuple(c.partitions)
        )
    if op == api_pb2.DELETE_STREAM:
        return StreamDeleted(id=i, offset=o, timestamp_ns=t, stream=pb.deleteStreamOp.stream)
    if op == api_pb2.PAUSE_STREAM:
        p = pb.pauseStreamOp
        return StreamPaused(
            id=i,
            offset=o,
            timestamp_ns=t,
            stream=p.stream,
            partitions=tuple(p.partitions),
            resume_all=p.resumeAll,
        )
    if op == api_pb2.RESUME_STREAM:
        r = pb.resumeStreamOp
        return StreamResumed(
            id=i, offset=o, timestamp_ns=t, stream=r.stream, partitions=tuple(r.partitions)
        )
    if op == api_pb2.SET_STREAM_READONLY:
        s = pb.setStreamReadonlyOp
        return StreamReadonlySet(
            id=i,
            offset=o,
            timestamp_ns=t,
            stream=s.stream,
            partitions=tuple(s.partitions),
            readonly=s.readonly,
        )
    if op == api_pb2.JOIN_CONSUMER_GROUP:
        j = pb.joinConsumerGroupOp
        return ConsumerJoinedGroup(
            id=i,
            offset=o,
            timestamp_ns=t,
            group_id=j.groupId,
            consumer_id=j.consumerId,
            streams=tuple(j.streams),
        )
    if op == api_pb2.LEAVE_CONSUMER_GROUP:
        lv = pb.leaveConsumerGroupOp
        return ConsumerLeftGroup(
            id=i,
            offset=o,
            timestamp_ns=t,
            group_id=lv.groupId,
            consumer_id=lv.consumerId,
            expired=lv.expired,
        )
    return UnknownActivity(id=i, offset=o, timestamp_ns=t, op=int(op))
