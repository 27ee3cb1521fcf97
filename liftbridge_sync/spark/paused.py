"""Paused partitions: a read resumes one only when option ``resumePaused`` says so.

A paused partition's log is closed; a subscription to it fails unless it asks the
server to resume the partition first. The core client's error tells a caller of
``subscribe()`` to pass ``resume=True``, which a Spark user cannot: reads say which
option does it instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from liftbridge_sync import PartitionPausedError

__all__ = ["paused_told"]


@contextlib.contextmanager
def paused_told(stream: str, partition: int) -> Iterator[None]:
    """Re-raise a :class:`PartitionPausedError` from the block naming the read option.

    Raises:
        PartitionPausedError: the partition is paused and the read was not to resume
            it; the message names ``stream``, ``partition`` and option ``resumePaused``.

    Thread-safe (no state).
    """
    try:
        yield
    except PartitionPausedError as exc:
        raise PartitionPausedError(
            f"stream {stream!r} partition {partition} is paused: set option "
            "resumePaused=true to resume it for the read (a publish to it resumes it too)"
        ) from exc
