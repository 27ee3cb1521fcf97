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

:mod:`._message` (which wraps a protobuf message, so loads protobuf) loads when one of
its names is first asked for (PEP 562): the other values, and the options, positions
and CLI parsing built on them, load without protobuf.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from liftbridge_sync.models._ack import Ack, AckPolicy
from liftbridge_sync.models._frozen_map import FrozenMap
from liftbridge_sync.models._metadata import (
    BrokerInfo,
    EventTimestamps,
    Metadata,
    PartitionInfo,
    PartitionMetadata,
    StreamInfo,
)
from liftbridge_sync.models._timestamps import datetime_from_ns, ns_from_datetime

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below
    from liftbridge_sync.models._message import Message
    from liftbridge_sync.models._message import _message_from_wire as _message_from_wire

    # Re-exported for the subscription's fast path, which builds messages without the
    # call frame of Message.from_proto.
    from liftbridge_sync.models._message import _new_object as _new_object
    from liftbridge_sync.models._message import _set_message_pb as _set_message_pb
    from liftbridge_sync.models._message import wire_message as wire_message

#: The names :mod:`._message` defines for this module.
_FROM_MESSAGE = frozenset(
    {"Message", "_message_from_wire", "_new_object", "_set_message_pb", "wire_message"}
)

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


def __getattr__(name: str) -> Any:
    """Load :mod:`._message` on first use of one of its names (PEP 562).

    Thread-safe: the import system serialises loading the module.
    """
    if name not in _FROM_MESSAGE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    obj = getattr(importlib.import_module("liftbridge_sync.models._message"), name)
    globals()[name] = obj
    return obj


def __dir__() -> list[str]:
    """The module's attributes, :mod:`._message`'s names not loaded yet included."""
    return sorted({*globals(), *_FROM_MESSAGE})


def _show_public_module() -> None:
    # Pickles name a class by module: this one, as before the split, so pickles made by
    # older versions still load and new ones stay the same. (:mod:`._message` names
    # Message and its unpickler itself: it may load before this module asks for it.)
    for name in __all__:
        obj = globals().get(name)
        if getattr(obj, "__module__", "").startswith(f"{__name__}._"):
            obj.__module__ = __name__


_show_public_module()
