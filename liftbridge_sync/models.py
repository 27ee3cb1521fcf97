"""Immutable values returned and accepted by the client.

Wire timestamps are Unix nanoseconds. Every model keeps the raw ``*_ns`` integer and
offers a timezone-aware :class:`datetime.datetime` view; durations in the API are float
seconds. All models are frozen, hashable where their contents are, picklable, and safe to
share between threads.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from liftbridge_sync._proto import api_pb2

__all__ = [
    "Ack",
    "AckPolicy",
    "BrokerInfo",
    "EventTimestamps",
    "FrozenMap",
    "Message",
    "Metadata",
    "PartitionInfo",
    "PartitionMetadata",
    "StreamInfo",
    "datetime_from_ns",
    "ns_from_datetime",
]

_K = TypeVar("_K")
_V = TypeVar("_V")

_NS_PER_SECOND = 1_000_000_000


def datetime_from_ns(ns: int) -> datetime | None:
    """Convert Unix nanoseconds to an aware UTC datetime; ``0`` (unset) gives ``None``."""
    if not ns:
        return None
    seconds, remainder = divmod(ns, _NS_PER_SECOND)
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=remainder // 1000)


def ns_from_datetime(value: datetime) -> int:
    """Convert a datetime to Unix nanoseconds; naive datetimes are taken as local time."""
    if value.tzinfo is None:
        value = value.astimezone()
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _NS_PER_SECOND + delta.microseconds * 1000


class FrozenMap(Mapping[_K, _V]):
    """A read-only, picklable mapping.

    Immutable; safe to share between threads.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[_K, _V] | None = None) -> None:
        self._data: Mapping[_K, _V] = dict(data) if data else {}

    @classmethod
    def wrap(cls, data: Mapping[_K, _V]) -> FrozenMap[_K, _V]:
        """A view of ``data`` without copying it; the caller must never change ``data``.

        Used for the headers of received messages: copying the protobuf map for every
        message would cost about a microsecond each.
        """
        view: FrozenMap[_K, _V] = cls.__new__(cls)
        view._data = data
        return view

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({dict(self._data)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self._data),))


_EMPTY_HEADERS: FrozenMap[str, bytes] = FrozenMap()


class AckPolicy(enum.IntEnum):
    """When the server acknowledges a published message (values are the wire enum)."""

    #: Ack once the partition leader has written the message (the default).
    LEADER = 0
    #: Ack once every in-sync replica has the message.
    ALL = 1
    #: No ack; the publish completes once the message is handed to the server.
    NONE = 2


class Message:
    """A message read from a stream partition.

    A thin view of the decoded wire message: building one for every received message
    costs a single attribute store, and each field is read from the wire message only
    when it is accessed (headers and timestamps included). The public attributes are
    read-only; equality, hashing and pickling go by them. An empty key reads as ``None``
    (the wire cannot tell the two apart).

    Immutable; safe to share between threads.
    """

    __slots__ = ("_pb",)
    __match_args__ = ()

    _pb: api_pb2.Message

    def __init__(
        self,
        *,
        offset: int,
        key: bytes | None,
        value: bytes,
        partition: int,
        stream: str,
        subject: str,
        reply_subject: str,
        headers: Mapping[str, bytes] = _EMPTY_HEADERS,
        timestamp_ns: int = 0,
    ) -> None:
        pb = api_pb2.Message(
            offset=offset,
            key=key or b"",
            value=value,
            partition=partition,
            stream=stream,
            subject=subject,
            replySubject=reply_subject,
            headers=dict(headers) if headers else None,
            timestamp=timestamp_ns,
        )
        _set_message_pb(self, pb)

    @classmethod
    def from_proto(cls, pb: api_pb2.Message) -> Message:
        """Wrap a wire ``Message``; the caller must never change ``pb`` afterwards."""
        msg = _new_object(cls)
        _set_message_pb(msg, pb)
        return msg

    @property
    def offset(self) -> int:
        """Offset of the message in its partition."""
        return self._pb.offset

    @property
    def key(self) -> bytes | None:
        """Message key, or ``None`` when the message has none."""
        return self._pb.key or None

    @property
    def value(self) -> bytes:
        """Payload."""
        return self._pb.value

    @property
    def partition(self) -> int:
        """Partition the message was read from."""
        return self._pb.partition

    @property
    def stream(self) -> str:
        """Stream name."""
        return self._pb.stream

    @property
    def subject(self) -> str:
        """NATS subject the message arrived on."""
        return self._pb.subject

    @property
    def reply_subject(self) -> str:
        """NATS reply subject of the original message ("" when none)."""
        return self._pb.replySubject

    @property
    def headers(self) -> Mapping[str, bytes]:
        """Headers (read-only). The server adds ``subject`` and ``reply``."""
        headers = self._pb.headers
        return FrozenMap.wrap(headers) if headers else _EMPTY_HEADERS

    @property
    def timestamp_ns(self) -> int:
        """Time the leader received the message, Unix nanoseconds (0 if unknown)."""
        return self._pb.timestamp

    @property
    def timestamp(self) -> datetime | None:
        """Time the leader received the message (aware UTC), ``None`` if unknown."""
        return datetime_from_ns(self._pb.timestamp)

    def _fields(self) -> tuple[Any, ...]:
        pb = self._pb
        return (
            pb.offset,
            pb.key or None,
            pb.value,
            pb.partition,
            pb.stream,
            pb.subject,
            pb.replySubject,
            self.headers,
            pb.timestamp,
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Message:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        names = (
            "offset",
            "key",
            "value",
            "partition",
            "stream",
            "subject",
            "reply_subject",
            "headers",
            "timestamp_ns",
        )
        body = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True))
        return f"Message({body})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_message_from_wire, (self._pb.SerializeToString(),))


_new_object = object.__new__
#: Stores the wrapped wire message past the read-only ``__setattr__``.
_set_message_pb = Message._pb.__set__  # type: ignore[misc,attr-defined]


def _message_from_wire(data: bytes) -> Message:
    """Unpickle a :class:`Message` from its wire bytes."""
    return Message.from_proto(api_pb2.Message.FromString(data))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """The server's acknowledgement of a published message.

    Immutable; safe to share between threads.
    """

    #: Stream the message was written to.
    stream: str
    #: Partition the client chose (the wire ack does not carry it; ``-1`` if unknown).
    partition: int
    #: The stream's base subject.
    partition_subject: str
    #: NATS subject the message arrived on (``<subject>.<N>`` for partition N > 0).
    message_subject: str
    #: Offset the message was written at.
    offset: int
    #: Inbox the ack was sent to.
    ack_inbox: str
    #: Correlation id of the publish.
    correlation_id: str
    #: Ack policy of the publish.
    ack_policy: AckPolicy
    #: When the leader received the message, Unix nanoseconds (0 if unknown).
    reception_timestamp_ns: int = 0
    #: When the ack was emitted, Unix nanoseconds (0 if unknown).
    commit_timestamp_ns: int = 0
    #: Name of the wire ``Ack.Error`` when the leader refused the message
    #: (``"INCORRECT_OFFSET"``, ``"TOO_LARGE"``, ``"ENCRYPTION"``, ``"UNKNOWN"``), else ``None``.
    ack_error: str | None = None

    @property
    def reception_timestamp(self) -> datetime | None:
        """When the leader received the message (aware UTC)."""
        return datetime_from_ns(self.reception_timestamp_ns)

    @property
    def commit_timestamp(self) -> datetime | None:
        """When the ack was emitted: at write for LEADER, at commit for ALL (aware UTC)."""
        return datetime_from_ns(self.commit_timestamp_ns)

    @classmethod
    def from_proto(cls, pb: api_pb2.Ack, *, partition: int = -1) -> Ack:
        """Build from a wire ``Ack``; ``partition`` is what the client chose."""
        try:
            policy = AckPolicy(pb.ackPolicy)
        except ValueError:
            policy = AckPolicy.LEADER
        return cls(
            stream=pb.stream,
            partition=partition,
            partition_subject=pb.partitionSubject,
            message_subject=pb.msgSubject,
            offset=pb.offset,
            ack_inbox=pb.ackInbox,
            correlation_id=pb.correlationId,
            ack_policy=policy,
            reception_timestamp_ns=pb.receptionTimestamp,
            commit_timestamp_ns=pb.commitTimestamp,
            ack_error=_ACK_ERROR_NAMES.get(pb.ackError, "UNKNOWN") if pb.ackError else None,
        )


_ACK_ERROR_NAMES = {1: "UNKNOWN", 2: "INCORRECT_OFFSET", 3: "TOO_LARGE", 4: "ENCRYPTION"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EventTimestamps:
    """First and latest time a partition event happened (Unix ns; 0 = never).

    Immutable; safe to share between threads.
    """

    first_ns: int = 0
    latest_ns: int = 0

    @property
    def first(self) -> datetime | None:
        """First occurrence (aware UTC), ``None`` if never."""
        return datetime_from_ns(self.first_ns)

    @property
    def latest(self) -> datetime | None:
        """Latest occurrence (aware UTC), ``None`` if never."""
        return datetime_from_ns(self.latest_ns)

    @classmethod
    def from_proto(cls, pb: api_pb2.PartitionEventTimestamps) -> EventTimestamps:
        """Build from the wire message."""
        return cls(first_ns=pb.firstTimestamp, latest_ns=pb.latestTimestamp)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    """A Liftbridge server as listed in cluster metadata.

    Immutable; safe to share between threads.
    """

    id: str
    host: str
    port: int
    #: Partitions this server replicates (0 on servers older than v1.7.0).
    partition_count: int = 0
    #: Partitions this server leads (0 on servers older than v1.7.0).
    leader_count: int = 0

    @property
    def address(self) -> str:
        """``host:port`` to dial."""
        return f"{self.host}:{self.port}"

    @classmethod
    def from_proto(cls, pb: api_pb2.Broker) -> BrokerInfo:
        """Build from the wire message."""
        return cls(
            id=pb.id,
            host=pb.host,
            port=pb.port,
            partition_count=pb.partitionCount,
            leader_count=pb.leaderCount,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    """State of one stream partition.

    ``high_watermark`` and ``newest_offset`` are the answering server's view; for
    authoritative values use ``Client.fetch_partition_metadata`` (asks the leader).

    Immutable; safe to share between threads.
    """

    stream: str
    id: int
    #: Broker id of the leader ("" when there is none).
    leader: str
    replicas: tuple[str, ...] = ()
    isr: tuple[str, ...] = ()
    #: Offset of the last committed message, -1 if none.
    high_watermark: int = -1
    #: Offset of the last written message, -1 if none.
    newest_offset: int = -1
    paused: bool = False
    readonly: bool = False
    messages_received: EventTimestamps = EventTimestamps()
    paused_changed: EventTimestamps = EventTimestamps()
    readonly_changed: EventTimestamps = EventTimestamps()

    @classmethod
    def from_proto(cls, stream: str, pb: api_pb2.PartitionMetadata) -> PartitionInfo:
        """Build from the wire ``PartitionMetadata``."""
        return cls(**_partition_fields(stream, pb))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata(PartitionInfo):
    """Partition state as reported by the partition leader (authoritative offsets).

    Immutable; safe to share between threads.
    """

    @classmethod
    def from_proto(cls, stream: str, pb: api_pb2.PartitionMetadata) -> PartitionMetadata:
        """Build from the wire ``PartitionMetadata``."""
        return cls(**_partition_fields(stream, pb))


def _partition_fields(stream: str, pb: api_pb2.PartitionMetadata) -> dict[str, Any]:
    return {
        "stream": stream,
        "id": pb.id,
        "leader": pb.leader,
        "replicas": tuple(pb.replicas),
        "isr": tuple(pb.isr),
        "high_watermark": pb.highWatermark,
        "newest_offset": pb.newestOffset,
        "paused": pb.paused,
        "readonly": pb.readonly,
        "messages_received": EventTimestamps.from_proto(pb.messagesReceivedTimestamps),
        "paused_changed": EventTimestamps.from_proto(pb.pauseTimestamps),
        "readonly_changed": EventTimestamps.from_proto(pb.readonlyTimestamps),
    }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamInfo:
    """A stream and its partitions.

    Immutable; safe to share between threads.
    """

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo] = FrozenMap()
    creation_timestamp_ns: int = 0

    @property
    def creation_timestamp(self) -> datetime | None:
        """When the stream was created (aware UTC), ``None`` if unknown."""
        return datetime_from_ns(self.creation_timestamp_ns)

    def partition_subject(self, partition: int) -> str:
        """NATS subject of a partition: the stream subject for 0, ``<subject>.<N>`` else."""
        return self.subject if partition == 0 else f"{self.subject}.{partition}"

    @classmethod
    def from_proto(cls, pb: api_pb2.StreamMetadata) -> StreamInfo:
        """Build from the wire ``StreamMetadata``."""
        partitions = {
            pid: PartitionInfo.from_proto(pb.name, part) for pid, part in pb.partitions.items()
        }
        return cls(
            name=pb.name,
            subject=pb.subject,
            partitions=FrozenMap(dict(sorted(partitions.items()))),
            creation_timestamp_ns=pb.creationTimestamp,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Metadata:
    """A snapshot of cluster metadata.

    Immutable; safe to share between threads.
    """

    brokers: tuple[BrokerInfo, ...] = ()
    streams: Mapping[str, StreamInfo] = FrozenMap()
    #: ``time.monotonic()`` when the snapshot was taken.
    fetched_at: float = 0.0

    def broker(self, broker_id: str) -> BrokerInfo | None:
        """The broker with this id, or ``None`` if it is not in the snapshot."""
        for broker in self.brokers:
            if broker.id == broker_id:
                return broker
        return None

    def partition(self, stream: str, partition: int) -> PartitionInfo | None:
        """The partition, or ``None`` if the snapshot lacks the stream or partition."""
        info = self.streams.get(stream)
        return info.partitions.get(partition) if info is not None else None

    @classmethod
    def from_proto(cls, pb: api_pb2.FetchMetadataResponse, *, fetched_at: float) -> Metadata:
        """Build from the wire response; unknown requested streams are left out."""
        streams = {
            sm.name: StreamInfo.from_proto(sm)
            for sm in pb.streamMetadata
            if sm.error == 0  # StreamMetadata.Error.OK
        }
        return cls(
            brokers=tuple(BrokerInfo.from_proto(b) for b in pb.brokers),
            streams=FrozenMap(streams),
            fetched_at=fetched_at,
        )
