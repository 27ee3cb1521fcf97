"""Cluster metadata: brokers, streams, partitions and their event timestamps.

Immutable values; thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from liftbridge_sync.models._frozen_map import FrozenMap
from liftbridge_sync.models._timestamps import datetime_from_ns

if TYPE_CHECKING:  # annotations only: the values load without protobuf
    from liftbridge_sync._proto import api_pb2

__all__ = [
    "BrokerInfo",
    "EventTimestamps",
    "Metadata",
    "PartitionInfo",
    "PartitionMetadata",
    "StreamInfo",
    "is_paused",
]


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
    #: The ``host:port`` the server advertised, when ``address_translator`` mapped it to
    #: the ``host``/``port`` above; ``""`` when they are what it advertised.
    advertised: str = ""

    @property
    def address(self) -> str:
        """``host:port`` to dial (``[host]:port`` for an IPv6 host, which a resolver
        would otherwise read up to the last colon)."""
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
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
    #: The server's flag. v1.9.0 never clears it once the partition was paused: a
    #: partition resumed since still says paused. A message received after the last
    #: pause or resume (``messages_received`` later than ``paused_changed``) shows it
    #: live.
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


def is_paused(info: PartitionInfo) -> bool:
    """Whether ``info`` shows the partition paused now (see :attr:`PartitionInfo.paused`).

    v1.9.0 never clears the flag once a partition was paused: a resume (by a publish or
    a subscribe that asks for it) builds the new partition from the paused one's
    record. A message received since the last pause or resume proves the partition
    live, as only a live partition receives: without this check, a partition that an
    auto-pause once stopped would have every passing refusal ("segment has been
    closed" mid-compaction, "commit log was closed" in a restart) end its readers as
    paused. A partition resumed and not published to since still reads as paused.
    Pure function; thread-safe.
    """
    return info.paused and info.messages_received.latest_ns <= info.paused_changed.latest_ns


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
