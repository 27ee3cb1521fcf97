"""What of a batch of wire messages a forward subscription may deliver.

Pure functions of the batch and the subscription's position, kept apart from
:mod:`liftbridge_sync.subscription.partition` (which acts on the answer: ends the
subscription, or refuses the call and resubscribes) so the rules can be read and tested
on their own. Thread-safe: nothing here keeps state.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

from liftbridge_sync._proto import api_pb2

__all__ = ["Screened", "before_start", "misaddressed", "screen"]


class Screened(NamedTuple):
    """The verdict on one batch (a tuple: cheap once per message on the grpc path).

    Attributes:
        in_order: Length of the batch's leading run of offsets strictly after the last
            delivered one and strictly increasing; a message after it came out of order.
        stop_at: Index of the first message of that run past the stop position (the
            subscription ends before it), or ``None``.
    """

    in_order: int
    stop_at: int | None


def screen(
    batch: Sequence[api_pb2.Message],
    last_offset: int | None,
    stop_offset: int | None,
    stop_timestamp_ns: int | None,
) -> Screened:
    """Judge ``batch`` against the last delivered offset and the stop position.

    * Offsets must rise strictly, from above ``last_offset``: a message at or below the
      one before it (a diverged replica; a restarted server answering from before the
      requested offset) and everything after it are out of order.
    * A message past the stop (an offset above ``stop_offset``, or a timestamp after
      ``stop_timestamp_ns``) ends the in-order run before it: the server stops only at
      the exact stop offset, which compaction or retention may have removed.
    """
    previous = -1 if last_offset is None else last_offset
    end = len(batch)
    if end == 1:
        in_order = 1 if batch[0].offset > previous else 0
    else:
        offsets = [m.offset for m in batch]
        in_order = end
        if offsets[0] <= previous or not all(map(operator.lt, offsets, offsets[1:])):
            in_order = next(
                i for i, o in enumerate(offsets) if o <= (offsets[i - 1] if i else previous)
            )
    return Screened(in_order, _stop_index(batch, in_order, stop_offset, stop_timestamp_ns))


def misaddressed(batch: Sequence[api_pb2.Message], stream: str, partition: int) -> int | None:
    """Index of the first message of ``batch`` that names another stream, or another
    partition of its stream, than the subscription's; ``None`` if none does.

    The server names each message's stream and partition; one that answers with another
    read's messages (a server or proxy bug) does so for whole batches, so only the first
    and the last are looked at (a scan finds the first stray one then). A message that
    names no stream, as a hand-made one may, is taken as addressed here.
    """
    if not (_elsewhere(batch[0], stream, partition) or _elsewhere(batch[-1], stream, partition)):
        return None
    return next(i for i, m in enumerate(batch) if _elsewhere(m, stream, partition))


def _elsewhere(message: api_pb2.Message, stream: str, partition: int) -> bool:
    named = message.stream
    return bool(named) and (named != stream or message.partition != partition)


def before_start(
    batch: Sequence[api_pb2.Message], start_offset: int, start_timestamp_ns: int | None = None
) -> int:
    """Length of ``batch``'s leading run before the requested start: below
    ``start_offset``, or stamped before ``start_timestamp_ns``.

    Only for the first messages of a subscription, before any was delivered: a v1.9.0
    reader asked for an offset above the high watermark waits for the watermark to move
    and then reads from the old watermark + 1, whatever it was asked for; a start time
    pinned to an offset leaves the messages not committed then to be judged by their
    time. Those messages were not asked for; the ones after them are.
    """
    skipped = 0
    for message in batch:
        if message.offset >= start_offset and (
            start_timestamp_ns is None or message.timestamp >= start_timestamp_ns
        ):
            break
        skipped += 1
    return skipped


def _stop_index(
    batch: Sequence[api_pb2.Message],
    in_order: int,
    stop_offset: int | None,
    stop_timestamp_ns: int | None,
) -> int | None:
    """Index of the first of ``batch[:in_order]`` past the stop position, if any."""
    cut: int | None = None
    if in_order and stop_offset is not None and batch[in_order - 1].offset > stop_offset:
        cut = next(i for i in range(in_order) if batch[i].offset > stop_offset)
    if in_order and stop_timestamp_ns is not None:
        # ``cut`` 0 is a cut (nothing of the batch is inside the range), not "no cut".
        before = in_order if cut is None else cut
        late = next((i for i in range(before) if batch[i].timestamp > stop_timestamp_ns), None)
        cut = late if late is not None else cut
    return cut
