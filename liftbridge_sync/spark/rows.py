"""Turn Spark rows into the arguments of one ``publish_async`` call.

Columns, by name (Kafka sink conventions): ``value`` (required, binary or string),
``key`` (binary or string), ``partition`` (int), ``headers`` (map of string to binary or
string, or a list of ``(key, value)`` structs), ``correlationId`` (string) and
``stream`` (string; used when the sink has no ``stream`` option). Other columns are
ignored. A ``None`` cell means "not set".
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from liftbridge_sync import ConfigurationError

__all__ = [
    "COLUMNS",
    "Columns",
    "RowMessage",
    "batch_messages",
    "binary_cell",
    "column_index",
    "is_plain",
    "plain_items",
    "to_message",
]

#: Columns the sink reads; everything else in a row is ignored.
COLUMNS = ("value", "key", "partition", "headers", "correlationId", "stream")


@dataclasses.dataclass(frozen=True, slots=True)
class RowMessage:
    """One message taken from a row. Immutable; safe to share between threads."""

    value: bytes
    key: bytes | None
    partition: int | None
    headers: dict[str, bytes] | None
    correlation_id: str | None
    stream: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Columns:
    """Positions of the sink's columns in a row (``-1``: absent). Immutable; thread-safe."""

    value: int
    key: int = -1
    partition: int = -1
    headers: int = -1
    correlation_id: int = -1
    stream: int = -1


def column_index(fields: Sequence[str]) -> Columns:
    """Find the sink's columns among a row's field names.

    Raises:
        ConfigurationError: there is no ``value`` column.
    """
    names = list(fields)

    def pos(name: str) -> int:
        return names.index(name) if name in names else -1

    if "value" not in names:
        raise ConfigurationError(f"the rows need a 'value' column (binary or string); got {names}")
    return Columns(
        value=pos("value"),
        key=pos("key"),
        partition=pos("partition"),
        headers=pos("headers"),
        correlation_id=pos("correlationId"),
        stream=pos("stream"),
    )


def is_plain(columns: Columns) -> bool:
    """Whether rows of this layout are plain ``publish_batch`` items: a ``value`` and
    maybe a ``key`` column, no ``partition``, ``headers``, ``correlationId`` or
    ``stream``."""
    return max(columns.partition, columns.headers, columns.correlation_id, columns.stream) < 0


def binary_cell(column: str, cell: Any, *, optional: bool) -> bytes | None:
    """A binary or string cell as bytes (``None``: ``None`` if ``optional``, else empty).

    Raises:
        ConfigurationError: another type; the message names the column.
    """
    if isinstance(cell, bytes):
        return cell
    if isinstance(cell, str):
        return cell.encode()
    if isinstance(cell, bytearray | memoryview):
        return bytes(cell)
    if cell is None:
        return None if optional else b""
    raise ConfigurationError(
        f"column {column!r} must be binary or string, got {type(cell).__name__}: {cell!r:.60}"
    )


def _headers(cell: Any) -> dict[str, bytes] | None:
    if cell is None:
        return None
    pairs: Any
    if isinstance(cell, Mapping):
        pairs = cell.items()
    elif isinstance(cell, list | tuple):
        pairs = cell
    else:
        raise ConfigurationError(
            "column 'headers' must be a map<string, binary|string> or an array of "
            f"(key, value) structs, got {type(cell).__name__}"
        )
    result: dict[str, bytes] = {}
    for pair in pairs:
        fields = getattr(pair, "__fields__", None)  # a pyspark Row: by name, if it can be
        if fields is not None and "key" in fields and "value" in fields:
            pair = pair.asDict()
        if isinstance(pair, Mapping):  # an Arrow struct, as a dict: fields by name
            if "key" not in pair or "value" not in pair:
                raise ConfigurationError(
                    "column 'headers': a struct entry needs fields 'key' and 'value', "
                    f"got {sorted(pair)}"
                )
            pair = (pair["key"], pair["value"])
        try:
            name, raw = pair
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"column 'headers': entries must be (key, value) pairs, got {pair!r:.60}"
            ) from None
        if not isinstance(name, str):
            raise ConfigurationError(
                f"column 'headers': keys must be strings, got {type(name).__name__}"
            )
        if name in result:
            # Liftbridge headers are a map: a repeated key would silently lose a value.
            raise ConfigurationError(
                f"column 'headers': key {name!r} appears twice; Liftbridge headers hold "
                "one value per key"
            )
        value = binary_cell(f"headers[{name!r}]", raw, optional=True)
        result[name] = b"" if value is None else value
    return result


def _optional_str(column: str, cell: Any) -> str | None:
    if cell is None or isinstance(cell, str):
        return cell or None
    raise ConfigurationError(f"column {column!r} must be a string, got {type(cell).__name__}")


def batch_messages(batch: Any) -> Iterator[RowMessage]:
    """The messages of one ``pyarrow.RecordBatch`` of rows, column by column.

    Each column is turned into Python values once (``to_pylist``) instead of building a
    ``Row`` per row; cells are then checked as :func:`to_message` does.

    Raises:
        ConfigurationError: there is no ``value`` column, or a cell has the wrong type.
    """
    names = list(batch.schema.names)
    columns = column_index(names)
    wanted = {getattr(columns, field) for field in Columns.__slots__}
    cells = [
        batch.column(index).to_pylist() if index in wanted else itertools.repeat(None)
        for index in range(len(names))
    ]
    for row in zip(*cells):  # noqa: B905 - the repeat() stand-ins are endless
        yield to_message(row, columns)


def plain_items(batch: Any) -> tuple[list[Any], bool] | None:
    """The items of one ``pyarrow.RecordBatch`` for ``publish_batch`` when its rows are
    plain (a ``value`` column and maybe a ``key`` column, none of the others), else
    ``None``: values, or ``(key, value)`` pairs where the key is not null, and whether
    any key is. Cells are checked as :func:`to_message` checks them.

    Raises:
        ConfigurationError: there is no ``value`` column, or a cell has the wrong type.
    """
    columns = column_index(batch.schema.names)
    if not is_plain(columns):
        return None
    values = batch.column(columns.value).to_pylist()
    if not all(type(value) is bytes for value in values):
        values = [binary_cell("value", value, optional=False) for value in values]
    if columns.key < 0:
        return values, False
    keys = batch.column(columns.key).to_pylist()
    items: list[Any] = [
        value if key is None else (binary_cell("key", key, optional=True), value)
        for key, value in zip(keys, values, strict=True)
    ]
    return items, any(key is not None for key in keys)


def to_message(row: Any, columns: Columns) -> RowMessage:
    """Read one row (a ``Row`` or tuple laid out as ``columns`` says).

    Raises:
        ConfigurationError: a cell has the wrong type; the message names the column.
    """
    partition = row[columns.partition] if columns.partition >= 0 else None
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
        raise ConfigurationError(
            f"column 'partition' must be an integer, got {type(partition).__name__}"
        )
    return RowMessage(
        value=binary_cell("value", row[columns.value], optional=False) or b"",
        key=binary_cell("key", row[columns.key], optional=True) if columns.key >= 0 else None,
        partition=partition,
        headers=_headers(row[columns.headers]) if columns.headers >= 0 else None,
        correlation_id=(
            _optional_str("correlationId", row[columns.correlation_id])
            if columns.correlation_id >= 0
            else None
        ),
        stream=_optional_str("stream", row[columns.stream]) if columns.stream >= 0 else None,
    )
