"""Messages to Arrow record batches, the columnar form PySpark 4 data sources may yield.

A reader that yields ``pyarrow.RecordBatch`` skips PySpark's per-cell conversion of
Python tuples (one converter call per cell): the columns are built here with one
``pyarrow.array`` call each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from liftbridge_sync import ConfigurationError, Message
from liftbridge_sync.models import wire_message

__all__ = ["BATCH_ROWS", "LOG_APPEND_TIME", "arrow_schema", "record_batches"]

#: Rows per record batch: Spark's default ``spark.sql.execution.arrow.maxRecordsPerBatch``.
BATCH_ROWS = 10_000

#: Kafka's ``timestampType`` of every row: 1, LogAppendTime. The Liftbridge leader
#: stamps each message when it stores it; publishers cannot set the time.
LOG_APPEND_TIME = 1

_COLUMNS = frozenset(
    {
        "key",
        "value",
        "stream",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "subject",
        "replySubject",
        "correlationId",
        "headers",
    }
)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (the one it checks batches against).

    Raises:
        ConfigurationError: ``schema`` has a column the source does not provide.
    """
    unknown = [name for name in schema.fieldNames() if name not in _COLUMNS]
    if unknown:
        raise ConfigurationError(
            f"the liftbridge source has no column {unknown}; its columns: {sorted(_COLUMNS)}"
        )
    return to_arrow_schema(schema, timezone="UTC")


def _batch(columns: dict[str, list[Any]], count: int, schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for field in schema:
        if field.name == "timestampType":
            arrays.append(pa.array([LOG_APPEND_TIME] * count, type=field.type))
        elif field.name == "correlationId":
            # The server does not deliver a message's correlation id to subscribers.
            arrays.append(pa.nulls(count, type=field.type))
        else:
            arrays.append(pa.array(columns[field.name], type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(
    messages: Iterable[Message], schema: pa.Schema, rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """``messages`` as record batches of at most ``rows`` rows laid out as ``schema``.

    Headers become Kafka's ``array<struct<key, value>>`` in the message's order.
    Pure transformation of its input; thread-safe if ``messages`` is.
    """
    names = set(schema.names)
    headers = "headers" in names
    keys: list[bytes | None] = []
    values: list[bytes] = []
    streams: list[str] = []
    partitions: list[int] = []
    offsets: list[int] = []
    stamps: list[int | None] = []
    subjects: list[str] = []
    replies: list[str | None] = []
    header_lists: list[list[tuple[str, bytes]]] = []
    columns: dict[str, list[Any]] = {
        "key": keys,
        "value": values,
        "stream": streams,
        "partition": partitions,
        "offset": offsets,
        "timestamp": stamps,
        "subject": subjects,
        "replySubject": replies,
        "headers": header_lists,
    }
    count = 0
    for message in messages:
        pb = wire_message(message)  # one property call per field would cost more than Arrow
        keys.append(pb.key or None)
        values.append(pb.value)
        streams.append(pb.stream)
        partitions.append(pb.partition)
        offsets.append(pb.offset)
        nanos = pb.timestamp
        stamps.append(nanos // 1000 if nanos else None)
        subjects.append(pb.subject)
        replies.append(pb.replySubject or None)
        if headers:
            header_lists.append(list(pb.headers.items()))
        count += 1
        if count >= rows:
            yield _batch(columns, count, schema)
            for column in columns.values():
                column.clear()
            count = 0
    if count:
        yield _batch(columns, count, schema)
