"""Offset ranges: what one Spark task reads, how ranges are cut, and how one is read.

A range is ``[start, end)`` of one Liftbridge partition. Reading subscribes from
``start`` with the inclusive stop offset ``end - 1`` on the worker's shared client and
yields one tuple per message in the source schema's column order.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import InputPartition

from liftbridge_sync import Client, ConfigurationError, StartAt, StopAt
from liftbridge_sync.spark.source_options import SourceOptions

__all__ = ["DataLossError", "OffsetRange", "read_range", "schema_ddl", "split_ranges"]

_BASE_DDL = (
    "key binary, value binary, stream string, partition int, offset long, "
    "timestamp timestamp, subject string, replySubject string, correlationId string"
)


_log = logging.getLogger("liftbridge_sync.spark")


class DataLossError(ConfigurationError):
    """Offsets to be read no longer exist (retention); see option ``failOnDataLoss``."""


def schema_ddl(include_headers: bool) -> str:
    """The source schema as DDL; ``headers map<string,binary>`` with includeHeaders."""
    return _BASE_DDL + (", headers map<string,binary>" if include_headers else "")


@dataclasses.dataclass(frozen=True)
class OffsetRange(InputPartition):
    """``[start, end)`` of one partition: the work of one Spark task. Immutable."""

    stream: str
    partition: int
    start: int
    end: int


def split_ranges(
    stream: str, starts: Mapping[int, int], ends: Mapping[int, int], max_records: int
) -> list[OffsetRange]:
    """One range per partition with ``start < end``, cut into ``max_records`` chunks.

    Args:
        max_records: Largest offset span of one range; ``0`` leaves ranges whole.
    """
    ranges: list[OffsetRange] = []
    for partition in sorted(starts):
        start, end = starts[partition], ends.get(partition, starts[partition])
        step = max_records if max_records > 0 else max(end - start, 1)
        for low in range(start, end, step):
            ranges.append(OffsetRange(stream, partition, low, min(low + step, end)))
    return ranges


def read_range(options: SourceOptions, piece: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """Yield the messages of ``piece`` as rows (runs on an executor).

    Raises:
        DataLossError: the first message is past ``start`` and ``failOnDataLoss`` is on.
        TimeoutError: no message came for ``pollTimeoutMs`` while the range was unfinished.
    """
    client = Client.for_process(options.client)
    last = piece.end - 1
    headers = options.include_headers
    previous = piece.start - 1  # the last offset a row was made of
    with client.subscribe(
        piece.stream,
        partition=piece.partition,
        start=StartAt.offset(piece.start),
        stop=StopAt.offset(last),
        read_isr_replica=options.read_isr_replica,
    ) as sub:
        while True:
            try:
                message = sub.get(options.poll_timeout)
            except StopIteration:
                return
            offset = message.offset
            # Never a row outside [start, end) or out of order, whatever the client
            # delivers: a duplicate row would break an exactly-once sink.
            if offset > last:
                return
            if offset <= previous:
                _log.warning(
                    "%r partition %d: skipped offset %d, not after %d (range %d..%d)",
                    piece.stream,
                    piece.partition,
                    offset,
                    previous,
                    piece.start,
                    last,
                )
                continue
            if previous < piece.start and offset > piece.start and options.fail_on_data_loss:
                raise DataLossError(
                    f"{piece.stream!r} partition {piece.partition}: offsets {piece.start}.."
                    f"{offset - 1} are gone (retention or compaction); set "
                    "failOnDataLoss=false to skip them"
                )
            previous = offset
            row: tuple[Any, ...] = (
                message.key,
                message.value,
                message.stream,
                message.partition,
                offset,
                message.timestamp,
                message.subject,
                message.reply_subject or None,
                None,
            )
            yield row + (dict(message.headers),) if headers else row
            if offset >= last:
                return
