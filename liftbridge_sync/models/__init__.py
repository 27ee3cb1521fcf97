"""Immutable values returned and accepted by the client.

Wire timestamps are Unix nanoseconds. Every model keeps the raw ``*_ns`` integer and
offers a timezone-aware :class:`datetime.datetime` view; durations in the API are float
seconds. All models are frozen, hashable where their contents are, picklable, and safe to
share between threads.

The models are defined in private modules, one concern each:

* :mod:`._timestamps`: Unix nanoseconds to aware datetimes and back;
* :mod:`._frozen_map`: :class:`FrozenMap`, the read-only mapping;
* :mod:`._message`: :class:`Message`, a view of the wire message;
* :mod:`._ack`: :class:`Ack` and :class:`AckPolicy`;
* :mod:`._metadata`: brokers, streams, partitions and their event timestamps.

This module is where they are imported from, and where they say they live (their
``__module__``), so reprs, docs and pickles name ``liftbridge_sync.models``.
"""

from __future__ import annotations

from liftbridge_sync.models._ack import Ack, AckPolicy
from liftbridge_sync.models._frozen_map import FrozenMap
from liftbridge_sync.models._message import Message, _message_from_wire

# Re-exported for the subscription's fast path, which builds messages without the
# call frame of Message.from_proto.
from liftbridge_sync.models._message import _new_object as _new_object
from liftbridge_sync.models._message import _set_message_pb as _set_message_pb
from liftbridge_sync.models._message import wire_message as wire_message
from liftbridge_sync.models._metadata import (
    BrokerInfo,
    EventTimestamps,
    Metadata,
    PartitionInfo,
    PartitionMetadata,
    StreamInfo,
)
from liftbridge_sync.models._timestamps import datetime_from_ns, ns_from_datetime

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


def _show_public_module() -> None:
    # Pickles name a class (and Message's unpickler) by module: this one, as before the
    # split, so pickles made by older versions still load and new ones stay the same.
    for obj in (*(globals()[name] for name in __all__), _message_from_wire):
        if getattr(obj, "__module__", "").startswith(f"{__name__}._"):
            obj.__module__ = __name__


_show_public_module()
