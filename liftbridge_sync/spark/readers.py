"""Batch and streaming readers of the ``liftbridge`` data source.

Planning (offset resolution, splitting) runs in Spark's planner or streaming-source
Python process; :meth:`read` runs on executors, one :class:`OffsetRange` per task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from liftbridge_sync import (
    BrokerUnavailableError,
    Client,
    ConfigurationError,
    NoSuchPartitionError,
    NoSuchStreamError,
)
from liftbridge_sync.spark.admission import TriggerDelay, cap_offsets
from liftbridge_sync.spark.offsets import (
    EARLIEST,
    LATEST,
    Offsets,
    created_of,
    end_offsets,
    from_json_dict,
    high_watermarks,
    parse_spec,
    start_offsets,
    stream_info,
    stream_partitions,
    to_json_dict,
)
from liftbridge_sync.spark.outage import BrokerOutage
from liftbridge_sync.spark.ranges import DataLossError, OffsetRange, read_batches, split_ranges
from liftbridge_sync.spark.source_options import SourceOptions

__all__ = ["MISSING_STREAM_GRACE", "BatchReader", "RefusedStreamReader", "StreamReader"]


_log = logging.getLogger("liftbridge_sync.spark")

#: Seconds a stream must stay missing before a streaming query with ``failOnDataLoss``
#: takes it as deleted: a server that is starting answers "no such stream" until it has
#: replayed its metadata log (thousands of such answers in a restart of the tests' server).
MISSING_STREAM_GRACE = 10.0
#: Pause between looks while a stream is missing (back-off, not synchronisation).
_MISSING_PAUSE = 0.2


class BatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of each partition once.

    Defaults: from the earliest retained offset to the high watermark at planning time.
    Rows reach Spark as Arrow record batches.

    Not thread-safe; Spark calls it from one thread per process.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve the offsets and cut them into ranges (planner process, once).

        Raises:
            ConfigurationError: ``startingOffsets`` says latest, or resolves after
                ``endingOffsets``.
        """
        opts = self.options
        client = Client.for_process(opts.client)
        ids = stream_partitions(client, opts.stream, opts.partitions)
        spec = parse_spec("startingOffsets", opts.starting_offsets, opts.stream, ids, EARLIEST)
        if LATEST in spec.values():
            # As the Kafka connector: a batch read from latest would read nothing.
            raise ConfigurationError(
                "option 'startingOffsets' may not be latest (-1) in a batch read: it "
                "would read nothing (latest is for streaming reads)"
            )
        hws = high_watermarks(client, opts.stream, ids, warn_stale=True)
        ends = end_offsets(client, opts, ids, hws)
        starts = start_offsets(client, opts, ids, hws, EARLIEST)
        for partition in sorted(starts):
            if starts[partition] > ends[partition]:
                raise ConfigurationError(
                    f"partition {partition}: option 'startingOffsets' resolves to "
                    f"{starts[partition]}, after option 'endingOffsets' {ends[partition]} "
                    "(the end is exclusive; 'latest' is the high watermark + 1; the "
                    "timestamp options count as these)"
                )
        for partition in sorted(ends):
            # Only an offset given in 'endingOffsets' can be past the end: refused, as
            # a start past the end is (read short without a word, the rows asked for
            # would be missing silently; Kafka's connector fails after pollTimeoutMs).
            if ends[partition] > hws[partition] + 1:
                raise ConfigurationError(
                    f"partition {partition}: option 'endingOffsets' {ends[partition]} is "
                    f"past the end of the log ({hws[partition] + 1}, the high watermark "
                    "+ 1): those messages do not exist yet; use 'latest' to read to the end"
                )
        return split_ranges(
            opts.stream, starts, ends, opts.max_records_per_partition, opts.min_partitions
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range as Arrow record batches (executor)."""
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_batches(self.options, partition, self.schema)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets ``{stream: {"<partition>": next_offset}}`` and
    ``{"liftbridge.streamCreated": {stream: creation_ns}}``.

    The checkpoint, not the source, is the truth: a restarted query resumes at the
    checkpointed end offset. ``maxOffsetsPerTrigger`` bounds each micro-batch, and
    ``Trigger.AvailableNow`` stops at the high watermarks seen when the query started.
    ``minOffsetsPerTrigger`` holds a micro-batch back until that many offsets are
    available or ``maxTriggerDelay`` passed since the last one (as the Kafka
    connector, not the first one after the query (re)started; not under
    ``Trigger.AvailableNow`` or ``Trigger.Once``, which read what is there).

    A stream deleted while a query reads it is data loss under ``failOnDataLoss`` once
    it stays missing for :data:`MISSING_STREAM_GRACE` seconds (a restarting server says
    "no such stream" for a while); without it the query waits for the stream to be
    created again. A stream created
    again since the offsets were taken, while the query ran or was stopped, is told by
    the creation time the offsets carry, however long its new log: data loss, or read
    from its start (see :meth:`_recreated`). Offsets without one (checkpoints older
    than it) can tell only a log now ending before them (see :meth:`_gone_back`).

    Lag: PySpark 4.3's Python streaming sources cannot report custom metrics (no
    ``offsetsBehindLatest``), so progress ``metrics`` stays empty. Each progress's
    source entry carries ``latestOffset`` (from :meth:`reportLatestOffset`) and
    ``endOffset`` in the same JSON shape; their difference per partition is the lag::

        source = query.lastProgress["sources"][0]
        latest, end = json.loads(source["latestOffset"]), json.loads(source["endOffset"])
        lag = {p: o - end[stream][p] for p, o in latest[stream].items()}

    Not thread-safe; Spark calls it from one thread in the streaming-source process.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # The end of an availableNow run: the creation time and offsets at its start.
        self._target: tuple[int, Offsets] | None = None
        # With failOnDataLoss=false: since when the stream has been missing (monotonic),
        # and whether that was told; a restarting server hides it for a few seconds.
        self._missing_since: float | None = None
        self._gone_logged = False
        self._outage = BrokerOutage(options.stream)
        self._delay: TriggerDelay | None = None
        if options.min_offsets_per_trigger:
            self._delay = TriggerDelay(
                options.min_offsets_per_trigger, options.max_trigger_delay, time.monotonic
            )

    def _client(self) -> Client:
        return Client.for_process(self.options.client)

    def _look(self, warn_stale: bool = False) -> tuple[int, Offsets]:
        """The stream's creation time (ns, 0 if unknown) and its high watermarks + 1
        (``warn_stale``: see :func:`~.offsets.high_watermarks`).

        Raises:
            NoSuchStreamError, NoSuchPartitionError: the stream is gone (or going).
        """
        opts = self.options
        client = self._client()
        info = stream_info(client, opts.stream)
        ids = stream_partitions(client, opts.stream, opts.partitions, info)
        hws = high_watermarks(client, opts.stream, ids, warn_stale=warn_stale)
        return info.creation_timestamp_ns, {p: hw + 1 for p, hw in hws.items()}

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a new query starts: ``startingOffsets`` (default latest).

        Raises:
            ConfigurationError: an offset of ``startingOffsets`` is past the end of
                its partition.
        """
        opts = self.options
        client = self._client()
        info = stream_info(client, opts.stream)
        ids = stream_partitions(client, opts.stream, opts.partitions, info)
        hws = high_watermarks(client, opts.stream, ids, warn_stale=True)
        starts = start_offsets(client, opts, ids, hws, LATEST)
        for partition in sorted(starts):
            if starts[partition] > hws[partition] + 1:
                # Only an explicit offset can be there. The query would take the log
                # ending before it for a stream created again (see _gone_back): data
                # loss, or with failOnDataLoss=false the partition read from offset 0.
                raise ConfigurationError(
                    f"stream {opts.stream!r} partition {partition}: option "
                    f"'startingOffsets' is {starts[partition]}, past the partition's end "
                    f"{hws[partition] + 1} (the high watermark + 1, 'latest'); a query "
                    "cannot start after the end"
                )
        return to_json_dict(opts.stream, starts, info.creation_timestamp_ns)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when set, else ``ReadMinRows`` with
        ``minOffsetsPerTrigger`` alone, else everything available.

        PySpark has no composite limit: with both options the minimum is applied from
        the options, whatever limit Spark passes back other than ``ReadAllAvailable``.
        """
        opts = self.options
        if opts.max_offsets_per_trigger:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.min_offsets_per_trigger:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Fix the end of an ``availableNow`` run at today's high watermarks.

        A stream missing is looked for again for :data:`MISSING_STREAM_GRACE` seconds
        (a restarting server says "no such stream" for a while).

        Raises:
            NoSuchStreamError, NoSuchPartitionError: the stream stayed missing.
        """
        try:
            self._target = self._look(warn_stale=True)
        except (NoSuchStreamError, NoSuchPartitionError):
            found = self._look_again()
            if found is None:
                raise
            self._target = found

    def latestOffset(  # noqa: N802 - Spark's name
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch, within ``limit`` and the availableNow target."""
        stream = self.options.stream
        begin = from_json_dict(stream, start) if start else {}
        # The creation time the offsets were taken in (0 in offsets older than it).
        known = created_of(stream, start) if start else 0
        if self._target is not None:
            created, latest = self._target
        else:
            try:
                created, latest = self._look()
            except (NoSuchStreamError, NoSuchPartitionError):
                found = self._look_again() if self.options.fail_on_data_loss else None
                if found is None:
                    self._vanished()
                    return to_json_dict(stream, begin, known)  # no micro-batch while gone
                created, latest = found
            except BrokerUnavailableError as exc:
                self._outage.endure(exc)
                return to_json_dict(stream, begin, known)  # no micro-batch while away
            self._outage.over()
            self._missing_since = None
            self._gone_logged = False
        if known and created and created != known:
            return to_json_dict(stream, self._recreated(begin, latest), created)
        for partition in self._gone_back(begin, latest):
            begin[partition] = 0  # read again from the start (see partitions())
        self._check_gone(begin, latest)
        hold = (
            self._delay is not None
            and self._target is None
            and not isinstance(limit, ReadAllAvailable)
            and self._delay.hold(begin, latest)
        )
        if hold:
            # Too few new offsets and maxTriggerDelay not reached: no micro-batch yet.
            return to_json_dict(stream, {p: begin.get(p, 0) for p in latest}, created)
        if isinstance(limit, ReadMaxRows):
            end = cap_offsets(begin, latest, limit.max_rows)
        else:
            end = {p: max(o, begin.get(p, 0)) for p, o in latest.items()}
        return to_json_dict(stream, end, created)

    def _look_again(self) -> tuple[int, Offsets] | None:
        """:meth:`_look` again while the stream is missing, for up to
        :data:`MISSING_STREAM_GRACE` seconds: a restarting server says "no such stream" of
        a stream it has yet to recover, and data loss would end the query for good.

        Returns:
            What :meth:`_look` returns once the stream is there (created again in the
            meantime, its creation time tells), or ``None`` when it stayed missing.
        """
        deadline = time.monotonic() + MISSING_STREAM_GRACE
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(_MISSING_PAUSE, left))  # back-off between looks
            try:
                return self._look()
            except (NoSuchStreamError, NoSuchPartitionError):
                continue

    def _vanished(self) -> None:
        """The stream no longer exists (deleted since the last micro-batch, perhaps to be
        created again); the query was to read on in it.

        Raises:
            DataLossError: with ``failOnDataLoss`` on (the stream stayed missing for
                :data:`MISSING_STREAM_GRACE` seconds); else no micro-batch runs until the
                stream is back (a warning once it has been missing for
                :data:`MISSING_STREAM_GRACE` seconds, as a restarting server hides it for
                less), and then it is read from its start (see :meth:`_recreated`).
        """
        told = (
            f"stream {self.options.stream!r} no longer exists (deleted while the query "
            "reads it); what it held after the query's offsets may be missed"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{told}; it stayed missing for {MISSING_STREAM_GRACE:g} s (longer than a "
                "restarting server takes to recover it); set option failOnDataLoss=false "
                "to wait for it to be created again and read it from its start"
            )
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        if self._gone_logged:
            return
        if now - self._missing_since < MISSING_STREAM_GRACE:
            # A restarting server says "no such stream" of a stream it has yet to
            # recover: not worth a warning that it was deleted, unless it stays missing.
            _log.debug("stream %r missing; no micro-batch until it is back", self.options.stream)
            return
        _log.warning(
            "%s; missing for %g s, waiting for it to be created again (failOnDataLoss=false)",
            told,
            MISSING_STREAM_GRACE,
        )
        self._gone_logged = True

    def _recreated(self, begin: Offsets, latest: Offsets) -> Offsets:
        """The stream was deleted and created again since the query's offsets were taken
        (its creation time is not theirs): they belong to the old log. Reading on from
        them would skip the new log up to them, however long it has grown; a restart
        from the checkpoint finds this too.

        Returns:
            The end offsets of one empty micro-batch that takes every partition back to
            offset 0; :meth:`partitions` reads a partition whose end lies before its
            start from the start, so the next micro-batch reads the new log whole.

        Raises:
            DataLossError: with ``failOnDataLoss`` on.
        """
        told = (
            f"stream {self.options.stream!r} was deleted and created again since the "
            f"query's offsets {to_json_dict(self.options.stream, begin)} were taken"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{told}; set option failOnDataLoss=false to read the new stream from its start"
            )
        _log.warning("%s; reading the new stream from its start (failOnDataLoss=false)", told)
        return dict.fromkeys(latest, 0)

    def _gone_back(self, begin: Offsets, latest: Offsets) -> list[int]:
        """The partitions whose log now ends before where the query stands: the stream
        was deleted and created again (Kafka's "offset was changed"). Reading on from the
        old offset would silently skip the new log up to it.

        A high watermark alone may lag for a moment after a leader change; the newest
        offset of the new leader's log never falls below what was committed, so only a
        log whose end is below the checkpoint counts. A leader that does not know the
        stream yet (a restart) holds the partition until the next trigger.

        Raises:
            DataLossError: with ``failOnDataLoss`` on; else the partitions are returned
                (logged as a warning) and read again from their start.
        """
        opts = self.options
        behind = [p for p, end in latest.items() if end < begin.get(p, 0)]
        gone: list[int] = []
        client = self._client() if behind else None
        for partition in behind:
            assert client is not None
            try:
                newest = client.fetch_partition_metadata(opts.stream, partition).newest_offset
            except (NoSuchStreamError, NoSuchPartitionError):
                # The metadata has just listed the stream, its leader does not know it
                # yet (a server starting up): hold the partition and look next trigger.
                continue
            if newest + 1 >= begin[partition]:
                continue  # a lagging high watermark: wait for it (latestOffset holds)
            where = f"stream {opts.stream!r} partition {partition}"
            told = (
                f"{where}: the log now ends at offset {newest}, before offset "
                f"{begin[partition]} where the query stands (the stream was deleted and "
                "created again, or lost its messages)"
            )
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{told}; set option failOnDataLoss=false to read the partition again "
                    "from its start"
                )
            _log.warning("%s; reading it again from its start (failOnDataLoss=false)", told)
            gone.append(partition)
        return gone

    def _check_gone(self, begin: Offsets, latest: Offsets) -> None:
        """Partitions the query stands in that it no longer reads (the stream was created
        again with fewer, or option ``partitions`` changed): the next offsets leave them
        out, as Kafka's "are gone".

        Raises:
            DataLossError: with ``failOnDataLoss`` on; else logged as a warning.
        """
        gone = sorted(set(begin) - set(latest))
        if not gone:
            return
        opts = self.options
        told = (
            f"stream {opts.stream!r} partition {', '.join(map(str, gone))}: no longer read "
            "(the stream was deleted and created again with fewer partitions, or option "
            "'partitions' changed); what it held after the query's offsets may be missed"
        )
        if opts.fail_on_data_loss:
            raise DataLossError(f"{told}; set option failOnDataLoss=false to go on without it")
        _log.warning("%s; going on without it (failOnDataLoss=false)", told)

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """The current high watermarks + 1, for query progress (none while the stream
        does not exist)."""
        try:
            created, latest = self._look()
        except (NoSuchStreamError, NoSuchPartitionError):
            created, latest = 0, {}
        return to_json_dict(self.options.stream, latest, created)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Ranges between two checkpointed offsets (partitions new since ``start`` at 0)."""
        stream = self.options.stream
        ends = from_json_dict(stream, end)
        begin = from_json_dict(stream, start)
        # A start past the end: the partition's log went back below the query
        # (latestOffset reported it, see _gone_back), so it is read from its start.
        starts = {p: begin.get(p, 0) if begin.get(p, 0) <= o else 0 for p, o in ends.items()}
        opts = self.options
        return split_ranges(
            stream, starts, ends, opts.max_records_per_partition, opts.min_partitions
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range as Arrow record batches (executor)."""
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_batches(self.options, partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint records progress."""


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of a query whose options were refused: each call Spark makes
    for offsets raises the refusal.

    A refusal raised while Spark makes the reader reaches the user with PySpark 4.3's
    own ``UnboundLocalError`` attached (its streaming-source runner calls ``stop()`` on
    a reader it never got); raised from the first call instead, it is the whole error.
    The query fails at the same point of its start either way.

    Not thread-safe; Spark calls it from one thread in the streaming-source process.
    """

    def __init__(self, refusal: ConfigurationError) -> None:
        self.refusal = refusal

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def latestOffset(  # noqa: N802 - Spark's name
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Raises the refusal."""
        raise self.refusal.with_traceback(None)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Raises the refusal (never reached: planning fails first)."""
        raise self.refusal.with_traceback(None)
