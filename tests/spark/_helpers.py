"""Helpers for Spark tests; importable by Spark's Python workers (PYTHONPATH is set)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from liftbridge_sync import Client, Message, StartAt, StopAt
from liftbridge_sync.spark import PartitionPublisher


def read_all(client: Client, stream: str) -> list[Message]:
    """Every message of every partition of ``stream``, up to each high watermark."""
    info = client.fetch_metadata(stream).streams[stream]
    messages: list[Message] = []
    for partition in sorted(info.partitions):
        hw = client.fetch_partition_metadata(stream, partition).high_watermark
        if hw < 0:
            continue
        with client.subscribe(
            stream, partition=partition, start=StartAt.earliest(), stop=StopAt.offset(hw)
        ) as sub:
            messages.extend(sub)
    return messages


def published_count(client: Client, stream: str) -> int:
    """Messages committed on every partition of ``stream`` (sum of HW + 1)."""
    info = client.fetch_metadata(stream).streams[stream]
    return sum(
        client.fetch_partition_metadata(stream, p).high_watermark + 1 for p in info.partitions
    )


class FailFirstAttempt:
    """foreachPartition function: publish, then fail attempt 0 of Spark partition 0."""

    def __init__(self, publisher: PartitionPublisher) -> None:
        self.publisher = publisher

    def __call__(self, rows: Iterable[Any]) -> None:
        from pyspark import TaskContext

        self.publisher(rows)
        context = TaskContext.get()
        assert context is not None
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("injected failure after publishing (attempt 0)")


def wait_for_file(path: Path, timeout: float) -> None:
    """Block until ``path`` exists; raise ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{path} did not appear within {timeout}s")
        time.sleep(0.01)


def gated_rows(rows: Iterable[Any], first: int, reached: Path, gate: Path) -> Iterable[Any]:
    """Yield ``first`` rows, then signal ``reached`` and wait for ``gate`` to exist."""
    for index, row in enumerate(rows):
        if index == first:
            reached.touch()
            wait_for_file(gate, 60.0)
        yield row
