"""Wire messages to Arrow record batches, the columnar form PySpark 4 data sources may
yield.

A reader that yields ``pyarrow.RecordBatch`` skips PySpark's per-cell conversion of
Python tuples (one converter call per cell): the columns are built here straight from
the subscription's wire messages (no :class:`~liftbridge_sync.Message` view per row),
with one ``pyarrow.array`` call each for the cells that differ by row, and without a
Python object per row where they need none: the constant columns (stream, partition,
``timestampType``, ``correlationId``) are sliced from arrays built once, consecutive
offsets are packed from a range, and timestamps are divided for the whole column.
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from liftbridge_sync import ConfigurationError
from liftbridge_sync._proto import api_pb2

__all__ = ["BATCH_ROWS", "LOG_APPEND_TIME", "arrow_schema", "check_read_schema", "record_batches"]

#: Rows per record batch. Small enough that a batch's wire messages are still in the CPU
#: cache when their columns are built: with Spark's 10,000 (its default
#: ``maxRecordsPerBatch``) building cost 3.7-4.8 µs of CPU a row, with 1,024 3.0-3.7,
#: against 2.2-2.9 for the plain subscription loop (bench/HISTORY.md, 2026-11-26).
BATCH_ROWS = 1024

#: Kafka's ``timestampType`` of every row: 1, LogAppendTime. The Liftbridge leader
#: stamps each message when it stores it; publishers cannot set the time.
LOG_APPEND_TIME = 1

#: The source's columns with their Spark types (``DataType.simpleString()``), as
#: :func:`~.schema.schema_ddl` declares them.
_COLUMN_TYPES = {
    "key": "binary",
    "value": "binary",
    "stream": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "timestampType": "int",
    "subject": "string",
    "replySubject": "string",
    "correlationId": "string",
    "headers": "array<struct<key:string,value:binary>>",
}


def check_read_schema(schema: StructType) -> None:
    """Refuse a read schema (one given with ``.schema(...)``) the source cannot fill:
    a column it does not have, or one of another type. Any subset of its columns, in
    any order, is read. Checked where the read is planned: the batches would otherwise
    fail on the executors, late, in Arrow's words.

    Raises:
        ConfigurationError: naming the first such column and what the source has.

    Pure function; thread-safe.
    """
    for field in schema.fields:
        expected = _COLUMN_TYPES.get(field.name)
        if expected is None:
            raise ConfigurationError(
                f"the liftbridge source has no column {field.name!r}; its columns: "
                f"{', '.join(f'{n} {t}' for n, t in _COLUMN_TYPES.items())}"
            )
        given = field.dataType.simpleString()
        if given != expected:
            raise ConfigurationError(
                f"column {field.name!r} of the read schema is {given}: the liftbridge "
                f"source reads it as {expected} (cast it after the read)"
            )


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (the one it checks batches against).

    Raises:
        ConfigurationError: see :func:`check_read_schema`.
    """
    check_read_schema(schema)
    return to_arrow_schema(schema, timezone="UTC")


class _Constants:
    """The columns that hold one value in every row of a range's batches: its stream
    and partition (the server delivers a partition's messages with both set to the
    partition's own), ``timestampType`` and ``correlationId``. Built once per range at
    the largest batch's size and sliced, not converted again cell by cell."""

    def __init__(self, schema: pa.Schema, stream: str, partition: int, rows: int) -> None:
        values = {
            "stream": stream,
            "partition": partition,
            "timestampType": LOG_APPEND_TIME,
            # The server does not deliver a message's correlation id to subscribers.
            "correlationId": None,
        }
        self._full = {
            field.name: pa.repeat(pa.scalar(values[field.name], type=field.type), rows)
            for field in schema
            if field.name in values
        }

    def get(self, name: str, count: int) -> pa.Array | None:
        """The column ``name`` for ``count`` rows, or ``None`` if it varies by row."""
        full = self._full.get(name)
        if full is None:
            return None
        return full if count == len(full) else full.slice(0, count)


#: Offsets pack into Arrow's int64 buffer as native "q" items where those are 8 bytes.
_PACKED_OFFSETS = array.array("q").itemsize == 8


def _offsets(run: list[api_pb2.Message]) -> pa.Array:
    """The offset column. The offsets of a run strictly increase (the reader yields
    nothing else), so a run spanning exactly its count is consecutive offsets, built
    without a Python int per row."""
    first, last, count = run[0].offset, run[-1].offset, len(run)
    if _PACKED_OFFSETS and last - first == count - 1 and first >= 0:
        packed = array.array("q", range(first, last + 1))
        return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(packed)])
    return pa.array([m.offset for m in run], type=pa.int64())


def _timestamps(run: list[api_pb2.Message], kind: pa.DataType) -> pa.Array:
    """The timestamp column: the server's nanoseconds to Spark's microseconds, 0
    ("unknown") as null, divided for the whole column at once."""
    nanos = pa.array([m.timestamp for m in run], type=pa.int64())
    if pc.min(nanos).as_py() < 0:  # never sent by a server; Arrow's division truncates
        return pa.array([n // 1000 if n else None for n in nanos.to_pylist()], type=kind)
    micros = pc.divide(nanos, 1000)
    unknown = pc.equal(nanos, 0)
    if pc.any(unknown).as_py():
        micros = pc.if_else(unknown, pa.scalar(None, type=pa.int64()), micros)
    return micros.cast(kind)


def _column(name: str, run: list[api_pb2.Message]) -> list[Any]:
    """One column's cells for ``run``: a pass per column over the wire messages costs
    less than reading every field of each message in one pass."""
    if name == "key":
        return [m.key or None for m in run]
    if name == "value":
        return [m.value for m in run]
    if name == "subject":
        return [m.subject for m in run]
    if name == "replySubject":
        return [m.replySubject or None for m in run]
    if name == "headers":  # Kafka's array<struct<key, value>>, in the message's order
        return [list(m.headers.items()) for m in run]
    raise ConfigurationError(f"the liftbridge source has no column {name!r}")


def _batch(run: list[api_pb2.Message], schema: pa.Schema, constants: _Constants) -> pa.RecordBatch:
    count = len(run)
    arrays = []
    for field in schema:
        name = field.name
        constant = constants.get(name, count)
        if constant is not None:
            arrays.append(constant)
        elif name == "offset":
            arrays.append(_offsets(run))
        elif name == "timestamp":
            arrays.append(_timestamps(run, field.type))
        else:
            arrays.append(pa.array(_column(name, run), type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(
    runs: Iterable[list[api_pb2.Message]],
    schema: pa.Schema,
    *,
    stream: str,
    partition: int,
    rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The wire messages of ``runs``, in order, as record batches of at most ``rows``
    rows laid out as ``schema`` (headers as Kafka's ``array<struct<key, value>>``).

    ``runs`` are one partition's messages, ``partition`` of ``stream``, with offsets
    strictly increasing across all of them (as :func:`~.ranges.read_wire` yields them).

    Pure transformation of its input; thread-safe if ``runs`` is.
    """
    constants = _Constants(schema, stream, partition, rows)
    pending: list[api_pb2.Message] = []
    for run in runs:
        pending += run
        while len(pending) >= rows:
            yield _batch(pending[:rows], schema, constants)
            del pending[:rows]
    if pending:
        yield _batch(pending, schema, constants)
