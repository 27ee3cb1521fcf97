"""Choosing the partition of a published message.

:class:`ByKey` lands a key on the same partition as the Go client does
(``crc32_ieee(key) mod partition_count`` on the unsigned CRC), so Python and Go
producers of the same stream agree. :class:`RoundRobin` spreads messages evenly.
Any object with a matching ``partition`` method satisfies :class:`Partitioner`.
"""

from __future__ import annotations

import operator
import threading
import zlib
from typing import Any, Protocol, runtime_checkable

from liftbridge_sync.errors import ConfigurationError

__all__ = [
    "PARTITIONER_NAMES",
    "ROUND_ROBIN_STREAMS",
    "ByKey",
    "Partitioner",
    "RoundRobin",
    "key_partition",
    "partitioner_named",
]


@runtime_checkable
class Partitioner(Protocol):
    """Maps a message to a partition of its stream.

    Implementations used by a shared client must be thread-safe.
    """

    def partition(self, stream: str, key: bytes | None, value: bytes, partition_count: int) -> int:
        """Return a partition in ``range(partition_count)`` for the message.

        Args:
            stream: The stream the message goes to.
            key: The message key, or ``None``.
            value: The message value.
            partition_count: Number of partitions of the stream (>= 1).
        """
        ...


def _check_count(partition_count: int) -> int:
    count = operator.index(partition_count)
    if count < 1:
        raise ConfigurationError(f"partition_count must be >= 1, got {count}")
    return count


def key_partition(key: bytes | None, partition_count: int) -> int:
    """:class:`ByKey`'s choice for a ``partition_count`` the caller checked (≥ 1).

    Thread-safe (a pure function).
    """
    return zlib.crc32(key or b"") % partition_count


class ByKey:
    """Partition by key: ``zlib.crc32(key or b"") % partition_count``.

    Messages with the same key go to the same partition; messages without a key all go
    to partition 0. Identical to go-liftbridge's key partitioner.

    Stateless and immutable; thread-safe.
    """

    __slots__ = ()

    def partition(self, stream: str, key: bytes | None, value: bytes, partition_count: int) -> int:
        """Return ``crc32_ieee(key) mod partition_count`` (unsigned CRC).

        Raises:
            ConfigurationError: ``partition_count`` is below 1.
        """
        return key_partition(key, _check_count(partition_count))

    def __repr__(self) -> str:
        return "ByKey()"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ByKey):
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return hash(ByKey)


#: Streams whose counters a :class:`RoundRobin` keeps: the most recently used ones.
ROUND_ROBIN_STREAMS = 4096


class RoundRobin:
    """Cycle through the partitions, with one counter per stream starting at 0.

    Counters are kept for the :data:`ROUND_ROBIN_STREAMS` streams used last; a stream
    unused for that long starts at 0 again. A pickled copy starts with fresh counters.

    Thread-safe: concurrent callers each get the next partition exactly once.
    """

    __slots__ = ("_counters", "_lock")

    _counters: dict[str, int]
    _lock: threading.Lock

    def __init__(self) -> None:
        self._counters = {}
        self._lock = threading.Lock()

    def partition(self, stream: str, key: bytes | None, value: bytes, partition_count: int) -> int:
        """Return the stream's next partition, ``counter % partition_count``.

        Raises:
            ConfigurationError: ``partition_count`` is below 1.
        """
        count = _check_count(partition_count)
        counters = self._counters
        with self._lock:
            # Popped and put back, the dict's order is that of last use: one shared by a
            # process publishing to ever new streams drops the longest unused, not
            # growing for good.
            counter = counters.pop(stream, 0)
            counters[stream] = counter + 1
            if len(counters) > ROUND_ROBIN_STREAMS:
                del counters[next(iter(counters))]
        return counter % count

    def __repr__(self) -> str:
        return "RoundRobin()"

    def __reduce__(self) -> tuple[Any, ...]:
        return (RoundRobin, ())


#: The names the CLI's ``--partitioner`` and the Spark sink's ``partitioner`` option take,
#: each with its partitioner. ``roundrobin`` and ``round-robin`` are the same: the CLI
#: spelled it one way and Spark the other, and both keep working.
PARTITIONER_NAMES: dict[str, type[ByKey] | type[RoundRobin]] = {
    "key": ByKey,
    "round-robin": RoundRobin,
    "roundrobin": RoundRobin,
}


def partitioner_named(name: str) -> ByKey | RoundRobin:
    """A new partitioner of the kind ``name`` names (see :data:`PARTITIONER_NAMES`).

    Raises:
        ConfigurationError: no partitioner has that name.

    Thread-safe: each call returns a new partitioner.
    """
    kind = PARTITIONER_NAMES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ConfigurationError(
            f"no partitioner is named {name!r}; the names: {', '.join(PARTITIONER_NAMES)}"
        )
    return kind()
