"""Cursor keys and ``__cursors`` partition routing (liftbridge-api.md §4.6)."""

from __future__ import annotations

import zlib

import pytest

from liftbridge_sync._wire.cursors import (
    VISIBILITY_CURSOR_ID,
    cursor_key,
    cursor_partition,
    visibility_cursor,
)
from liftbridge_sync.errors import ConfigurationError


def test_cursor_key_uses_commas() -> None:
    assert cursor_key("mycursor", "foo", 0) == b"mycursor,foo,0"
    assert cursor_key("__group:g1", "orders", 3) == b"__group:g1,orders,3"
    assert cursor_key("c", "s", 12345) == b"c,s,12345"


def test_cursor_key_is_utf8() -> None:
    assert cursor_key("curs\u00f6r", "str\u00e9am", 1) == "curs\u00f6r,str\u00e9am,1".encode()


@pytest.mark.parametrize(
    ("cursor_id", "stream", "partition", "crc"),
    [("mycursor", "foo", 0, 0x17D01EDA), ("__group:g1", "orders", 3, 0xA95D2DD3)],
)
def test_known_crcs(cursor_id: str, stream: str, partition: int, crc: int) -> None:
    assert zlib.crc32(cursor_key(cursor_id, stream, partition)) == crc


@pytest.mark.parametrize(
    ("cursor_id", "stream", "partition", "count", "expected"),
    [
        ("mycursor", "foo", 0, 10, 4),
        ("mycursor", "foo", 0, 3, 2),
        ("mycursor", "foo", 0, 1, 0),
        ("__group:g1", "orders", 3, 10, 3),
        # 0xA95D2DD3 has the top bit set: a signed CRC would give a negative remainder.
        ("__group:g1", "orders", 3, 7, 0xA95D2DD3 % 7),
    ],
)
def test_known_partitions(
    cursor_id: str, stream: str, partition: int, count: int, expected: int
) -> None:
    assert cursor_partition(cursor_id, stream, partition, count) == expected


def test_partition_is_in_range() -> None:
    for i in range(200):
        assert 0 <= cursor_partition(f"c{i}", "s", i, 5) < 5


@pytest.mark.parametrize("count", [0, -1])
def test_partition_count_must_be_positive(count: int) -> None:
    with pytest.raises(ConfigurationError, match="at least 1 partition"):
        cursor_partition("c", "s", 0, count)


def test_partition_must_be_an_integer() -> None:
    with pytest.raises(TypeError):
        cursor_key("c", "s", 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64])
def test_visibility_cursor_lands_in_its_partition(count: int) -> None:
    for target in range(count):
        cursor_id = visibility_cursor(target, count)
        assert cursor_id.startswith(VISIBILITY_CURSOR_ID)
        assert cursor_partition(cursor_id, "__cursors", target, count) == target
        assert visibility_cursor(target, count) == cursor_id  # one key per partition


@pytest.mark.parametrize(("target", "count"), [(-1, 3), (3, 3), (0, 0)])
def test_visibility_cursor_refuses_a_partition_outside_the_stream(target: int, count: int) -> None:
    with pytest.raises(ConfigurationError):
        visibility_cursor(target, count)
