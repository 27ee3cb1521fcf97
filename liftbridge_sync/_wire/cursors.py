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

__all__ = ["cursor_key", "cursor_partition"]


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
