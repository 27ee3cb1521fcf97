"""Wire messages to Arrow record batches, the columnar form PySpark 4 data sources may
yield.

A reader that yields ``pyarrow.RecordBatch`` skips PySpark's per-cell conversion of
Python tuples (one converter call per cell): the columns are built here with one
``pyarrow.array`` call each, straight from the subscription's wire messages (no
:class:`~liftbridge_sync.Message` view per row).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from liftbridge_sync import ConfigurationError
from liftbridge_sync._proto import api_pb2

__all__ = ["BATCH_ROWS", "LOG_APPEND_TIME", "arrow_schema", "record_batches"]

#: Rows per record batch. Small enough that a batch's wire messages are still in the CPU
#: cache when their columns are built: with Spark's 10,000 (its default
#: ``maxRecordsPerBatch``) building cost 3.7-4.8 µs of CPU a row, with 1,024 3.0-3.7,
#: against 2.2-2.9 for the plain subscription loop (bench/HISTORY.md, 2026-11-26).
BATCH_ROWS = 1024

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


def _column(name: str, run: list[api_pb2.Message]) -> list[Any]:
    """One column's cells for ``run``: a pass per column over the wire messages costs
    less than reading every field of each message in one pass."""
    if name == "key":
        return [m.key or None for m in run]
    if name == "value":
        return [m.value for m in run]
    if name == "stream":
        return [m.stream for m in run]
    if name == "partition":
        return [m.partition for m in run]
    if name == "offset":
        return [m.offset for m in run]
    if name == "timestamp":  # nanoseconds to Spark's microseconds; 0 is "unknown"
        return [nanos // 1000 if nanos else None for nanos in [m.timestamp for m in run]]
    if name == "subject":
        return [m.subject for m in run]
    if name == "replySubject":
        return [m.replySubject or None for m in run]
    if name == "headers":  # Kafka's array<struct<key, value>>, in the message's order
        return [list(m.headers.items()) for m in run]
    raise ConfigurationError(f"the liftbridge source has no column {name!r}")


def _batch(run: list[api_pb2.Message], schema: pa.Schema) -> pa.RecordBatch:
    count = len(run)
    arrays = []
    for field in schema:
        if field.name == "timestampType":
            arrays.append(pa.array([LOG_APPEND_TIME] * count, type=field.type))
        elif field.name == "correlationId":
            # The server does not deliver a message's correlation id to subscribers.
            arrays.append(pa.nulls(count, type=field.type))
        else:
            arrays.append(pa.array(_column(field.name, run), type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(
    runs: Iterable[list[api_pb2.Message]], schema: pa.Schema, rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The wire messages of ``runs``, in order, as record batches of at most ``rows``
    rows laid out as ``schema`` (headers as Kafka's ``array<struct<key, value>>``).

    Pure transformation of its input; thread-safe if ``runs`` is.
    """
    pending: list[api_pb2.Message] = []
    for run in runs:
        pending += run
        while len(pending) >= rows:
            yield _batch(pending[:rows], schema)
            del pending[:rows]
    if pending:
        yield _batch(pending, schema)
