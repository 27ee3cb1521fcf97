"""Offset ranges: what one Spark task reads, how ranges are cut, and how one is read.

A range is ``[start, end)`` of one Liftbridge partition. Reading subscribes from
``start`` with the inclusive stop offset ``end - 1`` on the worker's shared client and
yields its messages, which the readers hand Spark as Arrow record batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import time
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from liftbridge_sync import (
    BrokerUnavailableError,
    Client,
    ConfigurationError,
    Message,
    NoSuchPartitionError,
    NoSuchStreamError,
    ServerError,
    StartAt,
    StopAt,
)
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.spark.arrow import LOG_APPEND_TIME, arrow_schema, record_batches
from liftbridge_sync.spark.cleaner import (
    SEGMENT_PAUSE,
    SEGMENT_RETRIES,
    is_segment_closed,
    retry_segment_closed,
)
from liftbridge_sync.spark.outage import OUTAGE_PAUSE, BrokerOutage
from liftbridge_sync.spark.paused import paused_told
from liftbridge_sync.spark.source_options import SourceOptions

__all__ = [
    "DataLossError",
    "OffsetRange",
    "check_data_loss",
    "earliest_offset",
    "read_batches",
    "read_wire",
    "row_of",
    "split_ranges",
]

_log = logging.getLogger("liftbridge_sync.spark")

#: How the server refuses a subscription whose start is past its stop offset.
_STOP_BEFORE_START = "stop offset is before start offset"

#: Seconds to wait for the oldest message when telling compaction from retention.
_EARLIEST_WAIT = 10.0
#: Most messages taken from the subscription per call (what it has at hand, not more).
_READ_BATCH = 4096


class DataLossError(ConfigurationError):
    """Offsets to be read fell off the log (retention); see option ``failOnDataLoss``.

    Offsets that compaction removed from inside the log are not data loss.
    """


@dataclasses.dataclass(frozen=True)
class OffsetRange(InputPartition):
    """``[start, end)`` of one partition: the work of one Spark task. Immutable."""

    stream: str
    partition: int
    start: int
    end: int


def _even(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into ``parts`` pieces whose sizes differ by at most one."""
    size, extra = divmod(end - start, parts)
    pieces: list[tuple[int, int]] = []
    low = start
    for index in range(parts):
        high = low + size + (1 if index < extra else 0)
        pieces.append((low, high))
        low = high
    return pieces


def split_ranges(
    stream: str,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    max_records: int,
    min_partitions: int = 0,
) -> list[OffsetRange]:
    """One range per partition with ``start < end``, cut into balanced pieces.

    Args:
        max_records: Largest offset span of one piece; ``0`` for no limit. A range is
            cut into ``ceil(span / max_records)`` pieces of near-equal size.
        min_partitions: Least number of pieces in all (Kafka's ``minPartitions``);
            each range gets a share in proportion to its span, cut evenly. ``0``: no
            minimum.
    """
    spans = {
        p: (starts[p], ends.get(p, starts[p])) for p in sorted(starts) if ends.get(p, 0) > starts[p]
    }
    total = sum(end - start for start, end in spans.values())
    ranges: list[OffsetRange] = []
    for partition, (start, end) in spans.items():
        span = end - start
        parts = 1
        if max_records > 0:
            parts = -(-span // max_records)
        if min_partitions > 0 and total > 0:
            parts = max(parts, -(-span * min_partitions // total))
        for low, high in _even(start, end, min(parts, span)):
            ranges.append(OffsetRange(stream, partition, low, high))
    return ranges


def row_of(message: Message, headers: bool) -> tuple[Any, ...]:
    """One message as a row in the source schema's column order (without Arrow)."""
    row: tuple[Any, ...] = (
        message.key,
        message.value,
        message.stream,
        message.partition,
        message.offset,
        message.timestamp,
        LOG_APPEND_TIME,
        message.subject,
        message.reply_subject or None,
        None,
    )
    return row + (list(message.headers.items()),) if headers else row


def read_batches(
    options: SourceOptions, piece: OffsetRange, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """The rows of ``piece`` as Arrow record batches laid out as ``schema``."""
    return record_batches(
        read_wire(options, piece),
        arrow_schema(schema),
        stream=piece.stream,
        partition=piece.partition,
    )


def read_wire(options: SourceOptions, piece: OffsetRange) -> Iterator[list[api_pb2.Message]]:
    """Yield the messages of ``piece`` in runs, as wire messages (runs on an executor).

    Only offsets in ``[start, end)`` are ever yielded, whatever the subscription
    delivers: a message before ``start`` is skipped, and the first one at or past
    ``end`` ends the range (a compacted log may lack the stop offset itself, so the
    next message present is the first sign that the range is done).

    Offsets absent *inside* the log (removed by compaction) are not data loss. Only
    offsets before the earliest retained one (removed by retention) are: see
    :func:`check_data_loss`.

    Raises:
        DataLossError: offsets of the range fell off the log and ``failOnDataLoss``
            is on.
        TimeoutError: no message came for ``pollTimeoutMs`` while the range was unfinished.
        PartitionPausedError: the partition is paused and option ``resumePaused`` is off.
    """
    with paused_told(piece.stream, piece.partition):
        yield from _read_wire(options, piece)


def _read_wire(options: SourceOptions, piece: OffsetRange) -> Iterator[list[api_pb2.Message]]:
    """:func:`read_wire` without the paused partition's wording."""
    client = Client.for_process(options.client)
    next_offset = piece.start
    closed_segments = 0
    outage = BrokerOutage(piece.stream, f"partition {piece.partition}'s read task waits")
    while True:
        batches = _batches(client, options, piece, next_offset)
        past_end = False
        try:
            with contextlib.closing(batches):
                for batch, resubscribed in batches:
                    outage.over()
                    offsets = [message.offset for message in batch]
                    if resubscribed and next_offset != piece.start:
                        # Where the read started over, retention may have deleted what
                        # it was to read next: the server then starts at its oldest
                        # message, and only this gap can tell.
                        _check_gap(client, options, piece, next_offset, offsets)
                    if (
                        next_offset <= offsets[0]
                        and offsets[-1] < piece.end
                        and next_offset != piece.start
                        and all(map(operator.lt, offsets, offsets[1:]))
                    ):
                        # Inside the range, after what was yielded and increasing: all
                        # of it, with no per-row test.
                        next_offset = offsets[-1] + 1
                        yield batch
                        continue
                    past_end = False
                    run: list[api_pb2.Message] = []
                    for message in batch:
                        offset = message.offset
                        if offset < next_offset:
                            continue
                        if offset >= piece.end:
                            past_end = True
                            break
                        if next_offset == piece.start and offset > piece.start:
                            check_data_loss(client, options, piece, offset)
                        next_offset = offset + 1
                        run.append(message)
                    if run:
                        yield run
                    if past_end:
                        break
                    if next_offset >= piece.end:
                        return
                if not past_end and next_offset < piece.end:
                    # The subscription ended before the range did: the rest was
                    # compacted away, or fell off the log (retention).
                    check_data_loss(client, options, piece, piece.end, next_offset)
                return
        except (BrokerUnavailableError, NoSuchStreamError, NoSuchPartitionError) as exc:
            # Every broker away (beyond the retry policy, or resubscribe_wait), or one
            # back from it that has yet to recover the stream: read on from the next
            # offset once one answers, within OUTAGE_GRACE.
            if not isinstance(exc, BrokerUnavailableError) and not outage.under_way:
                raise
            outage.endure(exc)
            time.sleep(OUTAGE_PAUSE)  # back-off before subscribing again
        except ServerError as exc:
            if _STOP_BEFORE_START in str(exc).lower():
                # What is left of the range lies before the log's start: the server
                # refuses it. Where the read resumed mid-range (after a closed segment),
                # retention deleted it while it was read.
                check_data_loss(client, options, piece, piece.end, next_offset)
                return
            # The cleaner of a compacted stream replaces the segments a reader holds; the
            # server reports it as "segment has been closed". Transient: resume after
            # the last row yielded, a bounded number of times.
            closed_segments += 1
            if not is_segment_closed(exc) or closed_segments > SEGMENT_RETRIES:
                raise
            time.sleep(SEGMENT_PAUSE)  # back-off before resubscribing
            _log.info(
                "%s partition %d: %s; resuming at %d",
                piece.stream,
                piece.partition,
                exc,
                next_offset,
            )


def _check_gap(
    client: Client,
    options: SourceOptions,
    piece: OffsetRange,
    next_offset: int,
    offsets: list[int],
) -> None:
    """:func:`check_data_loss` for a gap before the first of ``offsets`` not yet
    yielded, if there is one."""
    first = next((o for o in offsets if o >= next_offset), None)
    if first is not None and first > next_offset:
        check_data_loss(client, options, piece, min(first, piece.end), next_offset)


def _batches(
    client: Client, options: SourceOptions, piece: OffsetRange, start: int
) -> Generator[tuple[list[api_pb2.Message], bool], None, None]:
    """The subscription's messages from ``start`` up to the stop offset ``end - 1``, in
    the runs the subscription has at hand (one call each, not one per message), each
    with whether the subscription started over for it: the first run, and any that
    follows a resubscribe (after a failover or a lost connection)."""
    with client.subscribe(
        piece.stream,
        partition=piece.partition,
        start=StartAt.offset(start),
        stop=StopAt.offset(piece.end - 1),
        read_isr_replica=options.read_isr_replica,
        resume=options.resume_paused,
    ) as sub:
        resubscribes = -1
        while True:
            try:
                # The wire messages: columns are built from them (a view per message,
                # and the views' properties per cell, would cost more).
                batch = sub._get_many_wire(_READ_BATCH, options.poll_timeout)
            except StopIteration:
                return
            now = sub.stats().resubscribes
            yield batch, now != resubscribes
            resubscribes = now


def earliest_offset(
    client: Client, stream: str, partition: int, timeout: float, resume: bool = False
) -> int | None:
    """Offset of the oldest message the partition still holds (``resume``: option
    ``resumePaused``).

    Returns ``None`` when none came within ``timeout`` seconds: the log is empty.
    """

    def oldest() -> int | None:
        with client.subscribe(
            stream, partition=partition, start=StartAt.earliest(), resume=resume
        ) as sub:
            try:
                return sub.get(timeout).offset
            except (StopIteration, TimeoutError):
                return None

    return retry_segment_closed(oldest)


def check_data_loss(
    client: Client,
    options: SourceOptions,
    piece: OffsetRange,
    first: int,
    gap_start: int | None = None,
) -> None:
    """Tell a compaction gap from retention loss where the read skips offsets.

    The offsets ``[gap_start, first)`` are missing (``gap_start`` is ``piece.start`` by
    default: where the read began or started over; ``first`` is ``piece.end`` when
    nothing more came). Those before the partition's
    earliest retained message are lost (retention truncated the log); the rest were
    compacted away, which is normal. Lost offsets raise :class:`DataLossError` with
    ``failOnDataLoss`` on, else are logged as a warning and skipped. The earliest
    retained message is the best the client can see: an oldest message removed by
    compaction counts as retention loss.

    Raises:
        DataLossError: offsets were lost and ``failOnDataLoss`` is on.
    """
    start = piece.start if gap_start is None else gap_start
    wait = min(options.poll_timeout, _EARLIEST_WAIT)
    earliest = earliest_offset(client, piece.stream, piece.partition, wait, options.resume_paused)
    if earliest is not None and earliest <= start:
        return  # the gap is inside the log: compaction
    if earliest is None:
        earliest = first  # the log holds nothing: all of the range is gone
    lost_end = min(earliest, first) - 1
    where = f"stream {piece.stream!r} partition {piece.partition}"
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{where}: offsets {start}..{lost_end} are gone (before the earliest "
            f"retained offset {earliest}, removed by retention); set option "
            "failOnDataLoss=false to skip them"
        )
    _log.warning(
        "%s: offsets %d..%d are gone (before the earliest retained offset %d); skipped "
        "because failOnDataLoss=false",
        where,
        start,
        lost_end,
        earliest,
    )
