"""The ``liftbridge`` Spark 4 Python Data Source.

Usage::

    df = spark.read.format("liftbridge").option("brokers", "lb:9292").load("orders")
    df.write.format("liftbridge").option("brokers", "lb:9292").option("stream", "copy") \\
        .mode("append").save()

It registers itself in every SparkSession through the top-level module
``pyspark_liftbridge``; :func:`register` registers it on a given session by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
)

from liftbridge_sync import ConfigurationError
from liftbridge_sync.spark.schema import schema_ddl
from liftbridge_sync.spark.source_options import (
    BATCH_ONLY_OPTIONS,
    STREAM_ONLY_OPTIONS,
    SourceOptions,
)

if TYPE_CHECKING:
    from liftbridge_sync.spark.readers import BatchReader, RefusedStreamReader, StreamReader
    from liftbridge_sync.spark.sink import SinkOptions
    from liftbridge_sync.spark.writers import BatchWriter, StreamWriter

# The readers, writers and the client behind them are imported by the methods that
# build them: Spark runs each planning step (the schema, the reader's partitions, the
# writer) in a Python worker of its own, and starts new workers after a minute idle.
# A worker asked for the schema alone then loads no client, gRPC or Arrow.

__all__ = ["LiftbridgeDataSource", "register"]


_BYTES = (BinaryType, StringType, NullType)
_INTS = (ByteType, ShortType, IntegerType, LongType, NullType)


def _header_entries(kind: DataType) -> bool:
    if isinstance(kind, NullType):
        return True
    if isinstance(kind, MapType):
        return isinstance(kind.keyType, StringType) and isinstance(kind.valueType, _BYTES)
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in kind.elementType.fields}
    return isinstance(fields.get("key"), StringType) and isinstance(fields.get("value"), _BYTES)


def _check_schema(schema: StructType, stream: str | None) -> None:
    """Refuse, on the driver, rows the tasks could not publish (as Kafka's sink does).

    Raises:
        ConfigurationError: no ``value`` column, no stream, or a column of a wrong type.
    """
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigurationError(
            f"the rows need a 'value' column (binary or string); got {schema.fieldNames()}"
        )
    if stream is None and "stream" not in types:
        raise ConfigurationError("no target stream: set the 'stream' option or a 'stream' column")
    wanted: dict[str, tuple[str, Any]] = {
        "value": ("binary or string", lambda t: isinstance(t, _BYTES)),
        "key": ("binary or string", lambda t: isinstance(t, _BYTES)),
        "partition": ("an integer", lambda t: isinstance(t, _INTS)),
        "correlationId": ("a string", lambda t: isinstance(t, StringType | NullType)),
        "stream": ("a string", lambda t: isinstance(t, StringType | NullType)),
        "headers": (
            "map<string, binary|string> or array<struct<key:string, value:binary|string>>",
            _header_entries,
        ),
    }
    for name, (what, fits) in wanted.items():
        kind = types.get(name)
        if kind is not None and not fits(kind):
            raise ConfigurationError(f"column {name!r} must be {what}, got {kind.simpleString()}")


def _sink_options(options: Any, overwrite: bool, schema: StructType | None = None) -> SinkOptions:
    """Parse the write options and check the target on the driver, before any task."""
    if overwrite:
        raise ConfigurationError(
            "liftbridge streams are append-only: use .mode('append') (overwrite is refused)"
        )
    from liftbridge_sync.spark.preflight import check_target
    from liftbridge_sync.spark.sink import SinkOptions

    lowered = {str(k).lower(): v for k, v in options.items()}
    sink = SinkOptions.from_strings(lowered)  # refuses unknown options too
    if schema is not None:
        _check_schema(schema, sink.stream)
    check_target(sink.client, sink.stream)
    return sink


class LiftbridgeDataSource(DataSource):
    """Read Liftbridge streams into DataFrames and write DataFrames to streams.

    Schema: ``key binary, value binary, stream string, partition int, offset long,
    timestamp timestamp, timestampType int, subject string, replySubject string,
    correlationId string`` (``timestampType`` is always 1, Kafka's LogAppendTime: the
    leader stamps each message as it stores it)
    plus Kafka's ``headers array<struct<key:string,value:binary>>`` with
    ``includeHeaders=true`` (its ``traceparent`` / ``tracestate`` entries carry the
    producer's OpenTelemetry context: see :func:`liftbridge_sync.otel.extract_headers`).
    Reads hand Spark Arrow record batches. Written rows need
    ``value`` and may carry ``key``, ``partition``, ``headers``, ``correlationId`` and
    ``stream``. A row's non-null ``partition`` picks its partition; otherwise option
    ``partitioner`` does: ``key`` (default, as Kafka: CRC-32 of the key like
    :class:`~liftbridge_sync.ByKey` and the Go client, partition 0 for a null key),
    ``roundrobin``, or ``partition-column`` (partition 0).

    Spark pickles it to its workers; it holds only the option strings. Not thread-safe.
    """

    @classmethod
    def name(cls) -> str:
        """The short name: ``spark.read.format("liftbridge")``."""
        return "liftbridge"

    def _source(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def _only_for(self, where: str, names: tuple[str, ...]) -> None:
        """Refuse options of the other kind of read, as the Kafka connector does."""
        given = {str(k).lower() for k in self.options}
        for name in names:
            if name.lower() in given:
                other = "streaming" if where == "batch" else "batch"
                raise ConfigurationError(
                    f"option {name!r} is for {other} reads only; remove it from this {where} read"
                )

    def schema(self) -> str:
        """The source schema (checks the read options first)."""
        return schema_ddl(self._source().include_headers)

    def reader(self, schema: StructType) -> BatchReader:
        """A batch reader.

        Raises:
            ConfigurationError: a bad option, a streaming-only one
                (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``),
                or a read schema with a column the source lacks or of another type.
        """
        from liftbridge_sync.spark.arrow import check_read_schema
        from liftbridge_sync.spark.readers import BatchReader

        source = self._source()
        self._only_for("batch", STREAM_ONLY_OPTIONS)
        check_read_schema(schema)
        return BatchReader(source, schema)

    def streamReader(  # noqa: N802 - Spark's name
        self, schema: StructType
    ) -> StreamReader | RefusedStreamReader:
        """A micro-batch stream reader.

        A bad option, a batch-only one (``endingOffsets``,
        ``endingOffsetsByTimestamp``, ``endingTimestamp``), or a read schema the source
        cannot fill (see :func:`~.arrow.check_read_schema`) gives a reader that raises
        the ``ConfigurationError`` from Spark's first call (see
        :class:`~liftbridge_sync.spark.readers.RefusedStreamReader` for why not here).
        """
        from liftbridge_sync.spark.arrow import check_read_schema
        from liftbridge_sync.spark.readers import RefusedStreamReader, StreamReader

        try:
            source = self._source()
            self._only_for("streaming", BATCH_ONLY_OPTIONS)
            check_read_schema(schema)
        except ConfigurationError as refusal:
            return RefusedStreamReader(refusal)
        return StreamReader(source, schema)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        """A batch writer; refuses overwrite.

        Raises:
            ConfigurationError: overwrite, a bad option (named), or rows the tasks
                could not publish: no ``value`` column, no stream, a column of a
                wrong type (named).
            BrokerUnavailableError: no broker of option ``brokers`` answered within
                about ``liftbridge.rpcTimeoutMs``.
            NoSuchStreamError: the stream of option ``stream`` does not exist.
        """
        from liftbridge_sync.spark.writers import BatchWriter

        return BatchWriter(_sink_options(self.options, overwrite, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:  # noqa: N802
        """A streaming writer; refuses complete-mode overwrite; checks as :meth:`writer`."""
        from liftbridge_sync.spark.writers import StreamWriter

        return StreamWriter(_sink_options(self.options, overwrite, schema))


def register(spark: Any) -> None:
    """Register the data source on ``spark`` (needed only without auto-registration)."""
    spark.dataSource.register(LiftbridgeDataSource)
