"""Routing of cursor requests to a partition of the ``__cursors`` stream.

The server stores cursor ``<cursorId>,<stream>,<partition>`` in partition
``crc32_ieee(key) mod N`` of ``__cursors`` and refuses SetCursor/FetchCursor sent to
any other partition's leader (liftbridge-api.md §4.6). ``zlib.crc32`` is that CRC,
unsigned, exactly as Go's ``crc32.ChecksumIEEE``.
"""

from __future__ import annotations

import operator
import zlib

from liftbridge_sync.errors import ConfigurationError

__all__ = ["VISIBILITY_CURSOR_ID", "cursor_key", "cursor_partition", "visibility_cursor"]


def cursor_key(cursor_id: str, stream: str, partition: int) -> bytes:
    """The key the server stores a cursor under: UTF-8 of ``"<cursorId>,<stream>,<partition>"``.

    Args:
        cursor_id: The cursor id (consumer groups use ``"__group:<groupId>"``).
        stream: The stream name.
        partition: The stream partition, written in decimal.

    Returns:
        The key bytes.

    Raises:
        TypeError: ``partition`` is not an integer.
    """
    return f"{cursor_id},{stream},{operator.index(partition)}".encode()


def cursor_partition(
    cursor_id: str, stream: str, partition: int, cursors_partition_count: int
) -> int:
    """The ``__cursors`` partition that holds a cursor.

    Args:
        cursor_id: The cursor id.
        stream: The stream name.
        partition: The stream partition.
        cursors_partition_count: Number of partitions of the ``__cursors`` stream.

    Returns:
        ``zlib.crc32(cursor_key(...)) % cursors_partition_count``.

    Raises:
        ConfigurationError: ``cursors_partition_count`` is below 1.
        TypeError: ``partition`` or ``cursors_partition_count`` is not an integer.
    """
    if operator.index(cursors_partition_count) < 1:
        raise ConfigurationError(
            f"the __cursors stream must have at least 1 partition, got {cursors_partition_count}"
        )
    return zlib.crc32(cursor_key(cursor_id, stream, partition)) % cursors_partition_count


#: Prefix of the cursor ids :func:`visibility_cursor` picks. Their cursors are stored
#: for the ``__cursors`` stream itself, which no reader of ours ever asks about.
VISIBILITY_CURSOR_ID = "__liftbridge_sync:visibility"


def visibility_cursor(target: int, cursors_partition_count: int) -> str:
    """A cursor id whose cursor for ``("__cursors", target)`` lands in partition
    ``target`` of ``__cursors``: storing it commits a message there.

    The same id every time for a given partition and count, so the compacted
    ``__cursors`` stream keeps one such message per partition.

    Args:
        target: The ``__cursors`` partition.
        cursors_partition_count: Number of partitions of the ``__cursors`` stream.

    Returns:
        ``VISIBILITY_CURSOR_ID`` with a numeric suffix.

    Raises:
        ConfigurationError: ``target`` is not a partition of a stream of that many.
    """
    if not 0 <= target < cursors_partition_count:
        raise ConfigurationError(
            f"__cursors partition {target} is not below the count {cursors_partition_count}"
        )
    suffix = 0
    while True:
        # CRC-32 spreads consecutive suffixes evenly: about ``count`` tries on average.
        cursor_id = f"{VISIBILITY_CURSOR_ID}.{suffix}"
        if cursor_partition(cursor_id, "__cursors", target, cursors_partition_count) == target:
            return cursor_id
        suffix += 1
