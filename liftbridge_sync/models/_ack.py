"""A publish's acknowledgement and the ack policies that ask for one.

:class:`Ack` keeps its fields in an ``AckCore`` base: the C extension's
(``_speedups_ack.c``), which the C ack decoder fills without naming an attribute, or
its pure-Python twin :class:`PyAckCore` when the extension is not loaded.

Immutable values; thread-safe.
"""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any

from liftbridge_sync import _extension
from liftbridge_sync.models._timestamps import datetime_from_ns

if TYPE_CHECKING:  # annotations only: the values load without protobuf
    from liftbridge_sync._proto import api_pb2

__all__ = ["ACK_FIELD_NAMES", "Ack", "AckPolicy", "PyAckCore"]

#: An ack's fields, in the order of the C struct (``_speedups.h``).
ACK_FIELD_NAMES = (
    "stream",
    "partition",
    "partition_subject",
    "message_subject",
    "offset",
    "ack_inbox",
    "correlation_id",
    "ack_policy",
    "reception_timestamp_ns",
    "commit_timestamp_ns",
    "ack_error",
)


class PyAckCore:
    """The pure-Python twin of the C ``AckCore``: the fields of an ack, unset until
    written (a read then raises ``AttributeError``). Not thread-safe by itself; an
    :class:`Ack` is filled before it is shared."""

    __slots__ = ACK_FIELD_NAMES

    stream: str
    partition: int
    partition_subject: str
    message_subject: str
    offset: int
    ack_inbox: str
    correlation_id: str
    ack_policy: AckPolicy
    reception_timestamp_ns: int
    commit_timestamp_ns: int
    ack_error: str | None


#: The base that holds an Ack's fields.
AckCore: Any = PyAckCore if _extension.MODULE is None else _extension.MODULE.AckCore


class AckPolicy(enum.IntEnum):
    """When the server acknowledges a published message (values are the wire enum)."""

    #: Ack once the partition leader has written the message (the default).
    LEADER = 0
    #: Ack once every in-sync replica has the message.
    ALL = 1
    #: No ack; the publish completes once the message is handed to the server.
    NONE = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ack(AckCore):  # type: ignore[misc]
    """The server's acknowledgement of a published message.

    Immutable; safe to share between threads.
    """

    # The fields live in the AckCore base; an Ack adds no attribute of its own.
    __slots__ = ()

    #: Stream the message was written to.
    stream: str
    #: Partition the client chose (the wire ack does not carry it); for
    #: ``publish_to_subject``, the one the ack's subjects name (``-1`` if unknown).
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

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, tuple(getattr(self, name) for name in ACK_FIELD_NAMES))

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
            ack_error=ACK_ERROR_NAMES.get(pb.ackError, "UNKNOWN") if pb.ackError else None,
        )


#: ``Ack.Error`` codes to names (0, OK, is no error); the one table the client uses.
ACK_ERROR_NAMES = {1: "UNKNOWN", 2: "INCORRECT_OFFSET", 3: "TOO_LARGE", 4: "ENCRYPTION"}

# The dataclass keeps the defaults above as class attributes, which would hide the
# AckCore fields of the same names; its __init__ has them already.
for _name in ("reception_timestamp_ns", "commit_timestamp_ns", "ack_error"):
    delattr(Ack, _name)
del _name


def _rebuilt(*fields: Any) -> Ack:
    """An unpickled :class:`Ack`."""
    return Ack(**dict(zip(ACK_FIELD_NAMES, fields, strict=True)))
