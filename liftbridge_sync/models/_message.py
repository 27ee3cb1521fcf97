"""A received message: a read-only view of the decoded wire ``Message``.

Immutable values; thread-safe.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.models._frozen_map import FrozenMap
from liftbridge_sync.models._timestamps import datetime_from_ns

__all__ = ["Message"]

_EMPTY_HEADERS: FrozenMap[str, bytes] = FrozenMap()


class Message:
    """A message read from a stream partition.

    A thin view of the decoded wire message: building one for every received message
    costs a single attribute store, and each field is read from the wire message only
    when it is accessed (headers and timestamps included). The public attributes are
    read-only; equality, hashing and pickling go by them. An empty key reads as ``None``
    (the wire cannot tell the two apart).

    Immutable; safe to share between threads.
    """

    # __weakref__: otel.process() remembers which deliveries it counted, by identity,
    # without keeping them alive.
    __slots__ = ("_pb", "__weakref__")
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
        """Headers, a read-only mapping (a missing key is absent).

        The server adds ``subject`` and ``reply``.
        """
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
#: The wire message a :class:`Message` wraps, for bulk conversions inside the package
#: (the Spark source builds Arrow columns from its fields with no property call per
#: field); the caller must never change it.
wire_message: Callable[[Message], api_pb2.Message] = operator.attrgetter("_pb")
#: Stores the wrapped wire message past the read-only ``__setattr__``.
_set_message_pb = Message._pb.__set__  # type: ignore[misc,attr-defined]


def _message_from_wire(data: bytes) -> Message:
    """Unpickle a :class:`Message` from its wire bytes."""
    return Message.from_proto(api_pb2.Message.FromString(data))


# Pickles name Message and its unpickler by the module users import them from (as
# before the models were split), whichever module loads this one.
Message.__module__ = _message_from_wire.__module__ = "liftbridge_sync.models"
