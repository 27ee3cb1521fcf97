"""Batch and streaming writers of the ``liftbridge`` data source.

Both publish each task's rows with the sink (:class:`PartitionPublisher`) and wait
for every ack before the task reports success: at-least-once, like the sink
(at-most-once with ``ackPolicy=none``, where there are no acks). Published
messages cannot be withdrawn, so ``abort`` does nothing. They take Spark's rows as
Arrow record batches, read column by column, instead of one ``Row`` object per row.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from liftbridge_sync.spark.sink import PartitionPublisher, SinkOptions

__all__ = ["BatchWriter", "PublishCommit", "StreamWriter"]

_log = logging.getLogger("liftbridge_sync.spark")


@dataclasses.dataclass(frozen=True)
class PublishCommit(WriterCommitMessage):
    """What one task published. Immutable and picklable.

    Attributes:
        partition_id: Spark partition of the task.
        attempt: Task attempt number.
        count: Messages published and acknowledged.
        acked: ``{stream: {partition: [first_offset, last_offset]}}``.
    """

    partition_id: int
    attempt: int
    count: int
    acked: dict[str, dict[int, list[int]]]


def _write(options: SinkOptions, batches: Iterator[Any]) -> PublishCommit:
    from pyspark import TaskContext

    summary = PartitionPublisher(options).publish_batches(batches)
    context = TaskContext.get()
    return PublishCommit(
        partition_id=context.partitionId() if context else 0,
        attempt=context.attemptNumber() if context else 0,
        count=summary.count,
        acked=summary.acked,
    )


def _total(messages: Sequence[Any]) -> int:
    return sum(m.count for m in messages if isinstance(m, PublishCommit))


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("liftbridge").mode("append")``. Not thread-safe (one per task)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishCommit:
        """Publish the task's record batches; return once all are acknowledged (executor)."""
        return _write(self.options, iterator)

    def commit(self, messages: Sequence[Any]) -> None:
        """Log the total; acked messages are already durable (driver)."""
        _log.info("liftbridge write committed %d messages", _total(messages))

    def abort(self, messages: Sequence[Any]) -> None:
        """Log only: published messages cannot be withdrawn (at-least-once)."""
        _log.warning("liftbridge write aborted after %d acked messages", _total(messages))


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("liftbridge")``. Not thread-safe (one per task)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishCommit:
        """Publish the task's record batches of one micro-batch (executor)."""
        return _write(self.options, iterator)

    def commit(self, messages: Sequence[Any], batchId: int) -> None:  # noqa: N803
        """Log the micro-batch total (driver)."""
        _log.info("liftbridge batch %d committed %d messages", batchId, _total(messages))

    def abort(self, messages: Sequence[Any], batchId: int) -> None:  # noqa: N803
        """Log only: published messages cannot be withdrawn (at-least-once)."""
        _log.warning("liftbridge batch %d aborted", batchId)
