"""Publish the rows of one Spark partition: the ``foreachPartition`` sink.

``df.foreachPartition(publish_partition("lb1:9292", "orders"))`` publishes every row of
each partition through the worker process's shared client
(:meth:`liftbridge_sync.Client.for_process`), keeps at most ``max_in_flight`` messages
unacknowledged, and waits for every ack before the task returns. Runs of plain rows go
out with ``publish_batch`` on a short-lived ``liftbridge-spark-run`` thread while the
task gathers the next run; other rows go one by one with ``publish_async``; the rows of
a partition keep their order. Any failed ack raises, so Spark retries the task:
delivery is at-least-once (a retried task may duplicate the messages its failed attempt
had published, never lose one). With ``AckPolicy.NONE`` nothing is acknowledged: a
message the server refuses is dropped without an error (at-most-once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from liftbridge_sync import (
    AckPolicy,
    Client,
    ClientOptions,
    ConfigurationError,
)
from liftbridge_sync._durations import check_seconds
from liftbridge_sync._wire.validate import check_name
from liftbridge_sync.partitioners import PARTITIONER_NAMES
from liftbridge_sync.spark.config import (
    client_options,
    get_int,
    get_millis,
    lower_keys,
    stream_option,
)
from liftbridge_sync.spark.rows import (
    Columns,
    RowMessage,
    batch_messages,
    binary_cell,
    column_index,
    is_plain,
    plain_items,
    to_message,
)
from liftbridge_sync.spark.sending import PublishSummary, RowSender
from liftbridge_sync.spark.source_options import WRITE_OPTIONS, check_known

__all__ = ["PartitionPublisher", "PublishSummary", "SinkOptions", "publish_partition"]

#: Accepted ``partitioner`` values: the partitioners' names (``roundrobin`` or
#: ``round-robin``), and ``partition-column`` or its alias ``none``.
_PARTITIONERS = (*PARTITIONER_NAMES, "partition-column", "none")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    """How a partition is published. Immutable and picklable; safe to share.

    Attributes:
        client: Options of the per-process client.
        stream: Target stream; ``None`` reads it from each row's ``stream`` column.
        partitioner: How rows without a ``partition`` value are placed. ``"key"`` (the
            default, like Kafka's): CRC-32 of the key modulo the partition count, as
            :class:`~liftbridge_sync.ByKey` and the Go client do, and partition 0 for
            a null key. ``"roundrobin"`` (or ``"round-robin"``): spread over the partitions.
            ``"partition-column"`` (alias ``"none"``): the ``partition`` column only,
            partition 0 when it is null. A non-null ``partition`` cell always wins.
        ack_policy: Ack policy of every publish.
        max_in_flight: Unacknowledged messages a task may have at once.
        ack_timeout: Seconds to wait for each ack (``None``: the client's).
    """

    client: ClientOptions
    stream: str | None = None
    partitioner: str = "key"
    ack_policy: AckPolicy = AckPolicy.LEADER
    max_in_flight: int = 1024
    ack_timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.client, ClientOptions):
            raise ConfigurationError("'client' must be a ClientOptions")
        if self.stream is not None and (not isinstance(self.stream, str) or not self.stream):
            raise ConfigurationError("'stream' must be a non-empty str or None")
        if self.stream is not None:
            # On the driver: a name no publish takes (the server's own __cursors and
            # __activity included) would fail every task on the executors.
            check_name("stream", self.stream)
        if self.partitioner not in _PARTITIONERS:
            raise ConfigurationError(
                f"'partitioner' must be one of {_PARTITIONERS}, got {self.partitioner!r}"
            )
        if not isinstance(self.ack_policy, AckPolicy):
            raise ConfigurationError("'ack_policy' must be an AckPolicy")
        if (
            isinstance(self.max_in_flight, bool)
            or not isinstance(self.max_in_flight, int)
            or self.max_in_flight < 1
        ):
            raise ConfigurationError(f"'max_in_flight' must be an int >= 1: {self.max_in_flight!r}")
        if self.ack_timeout is not None:
            check_seconds("ack_timeout", self.ack_timeout, allow_zero=False, unlimited=False)

    @classmethod
    def from_strings(cls, options: Mapping[str, str]) -> SinkOptions:
        """Build from data-source style string options (case-insensitive keys).

        Reads ``brokers``, ``stream``, ``partitioner``, ``ackPolicy`` (``leader``,
        ``all``, ``none``), ``maxInFlight``, ``ackTimeoutMs`` and ``liftbridge.*``.

        Raises:
            ConfigurationError: an option is missing, invalid, unknown, or one of reads
                only; the message names it.
        """
        lowered = lower_keys(options)
        check_known(lowered, WRITE_OPTIONS, "write")
        policy_name = lowered.get("ackpolicy", "leader").strip().upper()
        if policy_name not in AckPolicy.__members__:
            raise ConfigurationError(
                f"option 'ackPolicy' must be leader, all or none, got {lowered['ackpolicy']!r}"
            )
        ack_timeout = (
            get_millis(lowered, "ackTimeoutMs", 0.0) if "acktimeoutms" in lowered else None
        )
        return cls(
            client=client_options(lowered.get("brokers"), lowered),
            stream=stream_option(lowered),
            partitioner=lowered.get("partitioner", "key").strip().lower(),
            ack_policy=AckPolicy[policy_name],
            max_in_flight=get_int(lowered, "maxInFlight", 1024, minimum=1),
            ack_timeout=ack_timeout,
        )


def _field_names(row: Any) -> list[str] | None:
    fields = getattr(row, "__fields__", None)
    if fields is not None:
        return list(fields)
    if isinstance(row, Mapping):
        return list(row)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionPublisher:
    """A picklable ``foreachPartition`` function: ``df.foreachPartition(publisher)``.

    Rows may be ``pyspark.sql.Row`` objects, mappings, or plain ``bytes``/``str``
    values (RDDs). The first row's field names fix the column layout of the partition.

    Immutable; each call runs in one task and is independent of any other.
    """

    options: SinkOptions

    def __call__(self, rows: Iterable[Any]) -> None:
        """Publish ``rows`` and wait for every ack (``foreachPartition`` entry point)."""
        self.publish(rows)

    def publish(self, rows: Iterable[Any]) -> PublishSummary:
        """Publish ``rows``; return once every message is acknowledged.

        Raises:
            ConfigurationError: a row lacks ``value``/``stream`` or has a bad cell type.
            PublishError: a publish failed (nack, ack timeout, unreachable broker); the
                task fails and Spark retries it.
        """
        stream = self.options.stream
        return self._send(lambda sender: _feed_rows(sender, rows, stream))

    def publish_messages(self, messages: Iterable[RowMessage]) -> PublishSummary:
        """Publish messages already taken from rows; see :meth:`publish`.

        Runs of plain messages (no ``partition``, ``headers`` or ``correlationId`` cell,
        one stream) go out with ``publish_batch``, ``max_in_flight`` at a time: a row
        then costs a few microseconds instead of a ``publish_async`` call and a future
        each. The others go one by one with ``publish_async``. Either way, the messages
        of a partition are published in row order.
        """

        def feed(sender: RowSender) -> None:
            for message in messages:
                sender.add(message)

        return self._send(feed)

    def publish_batches(self, batches: Iterable[Any]) -> PublishSummary:
        """Publish the rows of ``pyarrow.RecordBatch`` objects; see :meth:`publish`.

        With a ``stream`` option, a batch of plain rows (``value`` and maybe ``key``
        columns) is read column by column, without a message object per row.
        """
        stream = self.options.stream

        def feed(sender: RowSender) -> None:
            for batch in batches:
                plain = plain_items(batch) if stream is not None else None
                if stream is None or plain is None:
                    for message in batch_messages(batch):
                        sender.add(message)
                else:
                    sender.add_plain(stream, *plain)

        return self._send(feed)

    def _send(self, feed: Callable[[RowSender], None]) -> PublishSummary:
        """Run ``feed`` on a task's sender, then wait for every ack; on a failure, leave
        nothing of the task behind (see :meth:`RowSender.abandon`)."""
        sender = RowSender(Client.for_process(self.options.client), self.options)
        try:
            feed(sender)
            sender.finish()
        finally:
            sender.abandon()
        return sender.summary


#: Plain rows gathered before they join the sender's run (bounds the copy per row).
_PLAIN_CHUNK = 256


def _feed_rows(sender: RowSender, rows: Iterable[Any], stream: str | None) -> None:
    """Add ``rows`` to ``sender`` in order. With a ``stream`` option and a layout of
    ``value`` and maybe ``key`` only, Row (tuple) rows go straight into ``publish_batch``
    items, checked as :func:`~liftbridge_sync.spark.rows.to_message` checks them: a
    message object per row cost more than the publish itself."""
    layout = RowLayout()
    # A Row's own __getitem__ (it also takes field names) costs twice tuple's.
    cell = tuple.__getitem__
    items: list[Any] = []
    keyed = False
    plain_stream = ""
    value_at = key_at = -1
    for row in rows:
        if value_at >= 0 and isinstance(row, tuple):
            value = cell(row, value_at)
            if type(value) is not bytes:
                value = binary_cell("value", value, optional=False) or b""
            key = cell(row, key_at) if key_at >= 0 else None
            if key is None:
                items.append(value)
            else:
                # Spark hands string keys as str: encode them here, not through a
                # binary_cell call per row (a third of this loop's CPU).
                kind = type(key)
                if kind is str:
                    key = key.encode()
                elif kind is not bytes:
                    key = binary_cell("key", key, optional=True)
                items.append((key, value))
                keyed = True
            if len(items) >= _PLAIN_CHUNK:
                sender.add_plain(plain_stream, items, keyed)
                items, keyed = [], False
            continue
        if items:
            sender.add_plain(plain_stream, items, keyed)
            items, keyed = [], False
        sender.add(layout.message(row))
        columns = layout.columns
        if stream is not None and columns is not None and is_plain(columns):
            plain_stream = stream
            value_at, key_at = columns.value, columns.key
    if items:
        sender.add_plain(plain_stream, items, keyed)


class RowLayout:
    """The column layout of one partition's rows, fixed by its first Row or mapping.

    Not thread-safe: one per task.
    """

    __slots__ = ("columns", "names")

    def __init__(self) -> None:
        self.columns: Columns | None = None
        self.names: list[str] = []

    def message(self, row: Any) -> RowMessage:
        """The message of one row (a Row, a mapping, or a bytes/str value).

        Raises:
            ConfigurationError: an unknown kind of row, or a cell of the wrong type.
        """
        if isinstance(row, bytes | bytearray | str):
            return RowMessage(
                value=row.encode() if isinstance(row, str) else bytes(row),
                key=None,
                partition=None,
                headers=None,
                correlation_id=None,
                stream=None,
            )
        columns = self.columns
        if columns is None:
            found = _field_names(row)
            if found is None:
                raise ConfigurationError(
                    "rows must be pyspark Rows, mappings, or bytes/str values; "
                    f"got {type(row).__name__}"
                )
            self.names = found
            columns = self.columns = column_index(found)
        if isinstance(row, Mapping):
            row = tuple(row.get(name) for name in self.names)
        return to_message(row, columns)


def publish_partition(
    brokers: str,
    stream: str | None = None,
    *,
    partitioner: str = "key",
    ack_policy: AckPolicy = AckPolicy.LEADER,
    max_in_flight: int = 1024,
    ack_timeout: float | None = None,
    client_options: ClientOptions | None = None,
    check: bool = True,
) -> PartitionPublisher:
    """A ``foreachPartition`` function that publishes each row to Liftbridge.

    Example::

        df.foreachPartition(publish_partition("lb1:9292,lb2:9292", "orders", partitioner="key"))

    Args:
        brokers: Seed brokers, ``"host:port[,host:port...]"`` (ignored when
            ``client_options`` is given).
        stream: Target stream; ``None`` takes it from each row's ``stream`` column.
        partitioner: ``"key"`` (default: hash of the key, partition 0 for a null
            key), ``"roundrobin"`` or ``"partition-column"`` (partition 0) for rows whose
            ``partition`` column is absent or null.
        ack_policy: Ack policy of every publish.
        max_in_flight: Unacknowledged messages per task at most.
        ack_timeout: Seconds to wait for each ack (default: the client's, 5 s).
        client_options: Full client options (TLS, retries) instead of ``brokers``.
        check: Ask the cluster at once, on the driver, that a broker answers and that
            ``stream`` exists, so that a wrong address fails within ``rpc_timeout``
            instead of on every executor after an ack timeout.

    Returns:
        A picklable :class:`PartitionPublisher`.

    Raises:
        ConfigurationError: an argument is invalid (raised on the driver, at once).
        BrokerUnavailableError: with ``check``, no broker answered (names ``brokers``).
        NoSuchStreamError: with ``check``, ``stream`` does not exist.

    Thread-safe: the returned object is immutable; each task uses its worker's client.
    """
    options = client_options if client_options is not None else client_options_for(brokers)
    publisher = PartitionPublisher(
        SinkOptions(
            client=options,
            stream=stream,
            partitioner=partitioner,
            ack_policy=ack_policy,
            max_in_flight=max_in_flight,
            ack_timeout=ack_timeout,
        )
    )
    if check:
        from liftbridge_sync.spark.preflight import check_target

        check_target(options, stream)
    return publisher


def client_options_for(brokers: str) -> ClientOptions:
    """``ClientOptions`` for a ``"host:port,..."`` broker list (no other settings)."""
    return client_options(brokers, {})
