"""Publish the rows of one Spark partition: the ``foreachPartition`` sink.

``df.foreachPartition(publish_partition("lb1:9292", "orders"))`` publishes every row of
each partition through the worker process's shared client
(:meth:`liftbridge_sync.Client.for_process`), keeps at most ``max_in_flight`` messages
unacknowledged, and waits for every ack before the task returns. Runs of plain rows go
out with ``publish_batch`` on a short-lived ``liftbridge-spark-run`` thread while the
task gathers the next run; other rows go one by one with ``publish_async``; the rows of
a partition keep their order. Any failed ack raises, so Spark retries the task:
delivery is at-least-once (a retried task may duplicate the messages its failed attempt
had published, never lose one).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from liftbridge_sync import (
    Ack,
    AckPolicy,
    ByKey,
    Client,
    ClientOptions,
    ConfigurationError,
    LiftbridgeError,
    Partitioner,
    RoundRobin,
)
from liftbridge_sync._durations import check_seconds
from liftbridge_sync.spark.config import client_options, get_float, get_int, lower_keys
from liftbridge_sync.spark.rows import (
    Columns,
    RowMessage,
    batch_messages,
    column_index,
    plain_items,
    to_message,
)

__all__ = ["PartitionPublisher", "PublishSummary", "SinkOptions", "publish_partition"]

#: Accepted ``partitioner`` values; ``partition-column`` and ``none`` are the same.
_PARTITIONERS = ("key", "roundrobin", "partition-column", "none")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    """How a partition is published. Immutable and picklable; safe to share.

    Attributes:
        client: Options of the per-process client.
        stream: Target stream; ``None`` reads it from each row's ``stream`` column.
        partitioner: How rows without a ``partition`` value are placed. ``"key"`` (the
            default, like Kafka's): CRC-32 of the key modulo the partition count, as
            :class:`~liftbridge_sync.ByKey` and the Go client do, and partition 0 for
            a null key. ``"roundrobin"``: spread over the partitions.
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
            ConfigurationError: an option is missing or invalid; the message names it.
        """
        lowered = lower_keys(options)
        policy_name = lowered.get("ackpolicy", "leader").strip().upper()
        if policy_name not in AckPolicy.__members__:
            raise ConfigurationError(
                f"option 'ackPolicy' must be leader, all or none, got {lowered['ackpolicy']!r}"
            )
        timeout_ms = get_float(lowered, "ackTimeoutMs", 0.0) if "acktimeoutms" in lowered else 0
        return cls(
            client=client_options(lowered.get("brokers"), lowered),
            stream=lowered.get("stream") or lowered.get("path") or None,
            partitioner=lowered.get("partitioner", "key").strip().lower(),
            ack_policy=AckPolicy[policy_name],
            max_in_flight=get_int(lowered, "maxInFlight", 1024, minimum=1),
            ack_timeout=timeout_ms / 1000.0 if timeout_ms else None,
        )


@dataclasses.dataclass(slots=True)
class PublishSummary:
    """What one partition published: row count and acked ``[first, last]`` offsets.

    ``acked`` maps stream name to partition id to ``[first_offset, last_offset]``.
    Not thread-safe: built by one task.
    """

    count: int = 0
    acked: dict[str, dict[int, list[int]]] = dataclasses.field(default_factory=dict)

    def add(self, ack: Ack | None) -> None:
        """Count one publish and widen the acked range of its partition."""
        self.count += 1
        if ack is None:
            return
        ranges = self.acked.setdefault(ack.stream, {})
        span = ranges.get(ack.partition)
        if span is None:
            ranges[ack.partition] = [ack.offset, ack.offset]
        else:
            span[0] = min(span[0], ack.offset)
            span[1] = max(span[1], ack.offset)


def _partitioner(name: str) -> Partitioner | None:
    if name == "key":
        return ByKey()
    if name == "roundrobin":
        return RoundRobin()
    return None


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
        return self.publish_messages(_messages(rows))

    def publish_messages(self, messages: Iterable[RowMessage]) -> PublishSummary:
        """Publish messages already taken from rows; see :meth:`publish`.

        Runs of plain messages (no ``partition``, ``headers`` or ``correlationId`` cell,
        one stream) go out with ``publish_batch``, ``max_in_flight`` at a time: a row
        then costs a few microseconds instead of a ``publish_async`` call and a future
        each. The others go one by one with ``publish_async``. Either way, the messages
        of a partition are published in row order.
        """
        options = self.options
        sender = _Sender(Client.for_process(options.client), options)
        try:
            for message in messages:
                sender.add(message)
            sender.finish()
        finally:
            sender.abandon()
        return sender.summary

    def publish_batches(self, batches: Iterable[Any]) -> PublishSummary:
        """Publish the rows of ``pyarrow.RecordBatch`` objects; see :meth:`publish`.

        With a ``stream`` option, a batch of plain rows (``value`` and maybe ``key``
        columns) is read column by column, without a message object per row.
        """
        options = self.options
        stream = options.stream
        sender = _Sender(Client.for_process(options.client), options)
        try:
            for batch in batches:
                plain = plain_items(batch) if stream is not None else None
                if stream is None or plain is None:
                    for message in batch_messages(batch):
                        sender.add(message)
                else:
                    sender.add_plain(stream, *plain)
            sender.finish()
        finally:
            sender.abandon()
        return sender.summary


class _RunInFlight:
    """One run's ``publish_batch`` on a thread of its own (``liftbridge-spark-run``), so
    that the task reads and converts the next rows while this run waits for its acks.

    The thread is daemonic and joined by :meth:`outcomes`; ``publish_batch`` ends by
    itself (every message has an ack timeout). Not thread-safe: one owner.
    """

    def __init__(self, send: Callable[[], list[Ack | None | LiftbridgeError]]) -> None:
        self._send = send
        self._outcomes: list[Ack | None | LiftbridgeError] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="liftbridge-spark-run", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcomes = self._send()
        except BaseException as exc:  # handed to the task's thread by outcomes()
            self._error = exc

    def outcomes(self) -> list[Ack | None | LiftbridgeError]:
        """Wait for the run: one outcome per message, as ``publish_batch`` returns them.

        Raises:
            What ``publish_batch`` raised.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._outcomes


class _Sender:
    """A task's messages on their way: a run of plain messages, or a window of futures.

    At most ``max_in_flight`` messages are unacknowledged at a time: a run is sent once
    the window and the run before it are acknowledged, and the window fills only then
    too; the next run is gathered meanwhile. Not thread-safe: one per task.
    """

    def __init__(self, client: Client, options: SinkOptions) -> None:
        self.summary = PublishSummary()
        self._client = client
        self._options = options
        self._partitioner = _partitioner(options.partitioner)
        self._window: collections.deque[concurrent.futures.Future[Ack | None]] = collections.deque()
        self._run: list[Any] = []
        self._run_stream = ""
        self._run_keyed = False
        self._in_flight: _RunInFlight | None = None

    def add(self, message: RowMessage) -> None:
        """Publish ``message`` after every message added before it (per partition)."""
        stream = self._options.stream or message.stream
        if stream is None:
            raise ConfigurationError(
                "no target stream: set the 'stream' option or a 'stream' column"
            )
        plain = (
            message.partition is None and message.headers is None and message.correlation_id is None
        )
        if not plain:
            self._send_run()
            self._send_one(stream, message)
            return
        if self._run and stream != self._run_stream:
            self._send_run()
        if not self._run:
            self._run_stream = stream
        if message.key is None:
            self._run.append(message.value)
        else:
            self._run.append((message.key, message.value))
            self._run_keyed = True
        if len(self._run) >= self._options.max_in_flight:
            self._send_run()

    def add_plain(self, stream: str, items: list[Any], keyed: bool) -> None:
        """Publish plain ``publish_batch`` items after every message added before them."""
        if self._run and stream != self._run_stream:
            self._send_run()
        self._run_stream = stream
        limit = self._options.max_in_flight
        start = 0
        while start < len(items):
            room = limit - len(self._run)
            self._run.extend(items[start : start + room])
            self._run_keyed = self._run_keyed or keyed
            start += room
            if len(self._run) >= limit:
                self._send_run()

    def finish(self) -> None:
        """Send what is left and wait for every ack.

        Raises:
            PublishError: the first failed publish (the task fails; Spark retries it).
        """
        self._send_run()
        self._await_run()
        self._drain(0)

    def abandon(self) -> None:
        """Wait for the run in flight and observe every future still in the window.

        A failed task must not leave its publishes to a later task of this worker: a
        failure nobody looked at would be reported again by its ``flush()`` (a run's
        failures are returned, so they count as observed).
        """
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            with contextlib.suppress(Exception):  # the task is failing already
                in_flight.outcomes()
        while self._window:
            future = self._window.popleft()
            if not future.cancel():
                future.exception()

    def _drain(self, keep: int) -> None:
        window = self._window
        while len(window) > keep:
            self.summary.add(window.popleft().result())

    def _send_one(self, stream: str, message: RowMessage) -> None:
        options = self._options
        part = message.partition
        self._await_run()
        self._drain(options.max_in_flight - 1)
        self._window.append(
            self._client.publish_async(
                stream,
                message.value,
                key=message.key,
                partition=part,
                partitioner=self._partitioner if part is None else None,
                headers=message.headers,
                ack_policy=options.ack_policy,
                correlation_id=message.correlation_id,
                timeout=options.ack_timeout,
            )
        )

    def _send_run(self) -> None:
        run = self._run
        if not run:
            return
        self._drain(0)
        self._await_run()
        partitioner = self._partitioner
        if isinstance(partitioner, ByKey) and not self._run_keyed:
            partitioner = None  # every key is null: partition 0, as ByKey would choose
        self._in_flight = _RunInFlight(
            functools.partial(
                self._client.publish_batch,
                self._run_stream,
                run,
                partition=None if partitioner is not None else 0,
                partitioner=partitioner,
                ack_policy=self._options.ack_policy,
                timeout=self._options.ack_timeout,
            )
        )
        self._run = []
        self._run_keyed = False

    def _await_run(self) -> None:
        """Wait for the run in flight; raise its first failure."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        for outcome in in_flight.outcomes():
            if isinstance(outcome, BaseException):
                raise outcome
            self.summary.add(outcome)


def _messages(rows: Iterable[Any]) -> Iterator[RowMessage]:
    columns: Columns | None = None
    names: list[str] = []
    for row in rows:
        if isinstance(row, bytes | bytearray | str):
            yield RowMessage(
                value=row.encode() if isinstance(row, str) else bytes(row),
                key=None,
                partition=None,
                headers=None,
                correlation_id=None,
                stream=None,
            )
            continue
        if columns is None:
            found = _field_names(row)
            if found is None:
                raise ConfigurationError(
                    "rows must be pyspark Rows, mappings, or bytes/str values; "
                    f"got {type(row).__name__}"
                )
            names = found
            columns = column_index(names)
        if isinstance(row, Mapping):
            row = tuple(row.get(name) for name in names)
        yield to_message(row, columns)


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
