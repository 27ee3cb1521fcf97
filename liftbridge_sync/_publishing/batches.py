"""The general publish path: entering publishes in the pending table a batch at a time,
and the batches of ``publish_batch``.

A batch is entered under the send lock as far as ``max_in_flight`` leaves room, and its
acked requests are handed to the stream together (one lock and one write per group). A
large batch of plain values is framed and entered a chunk at a time
(:meth:`Batches.publish_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.owner import OwnerLoop
from liftbridge_sync._publishing.pending import (
    AckFuture,
    Entry,
    FailureLedger,
    failure,
    new_entries,
    new_entry,
)
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._publishing.waiting import Turn, Waiting
from liftbridge_sync._wire.publish_codec import frame_values
from liftbridge_sync.errors import (
    ClientClosedError,
    InternalThreadError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishQueueFullError,
)
from liftbridge_sync.models import Ack

__all__ = ["Batches"]

#: The smallest chunk :meth:`Batches.publish_values` enters at a time.
_MIN_CHUNK = 256


class Batches:
    """Entering publishes a batch at a time: the part of the publisher that every path
    ends in when the per-message fast path cannot be taken. Thread-safe, as the
    publisher."""

    def __init__(
        self, table: PendingTable, loop: OwnerLoop, waiting: Waiting, ledger: FailureLedger
    ) -> None:
        self._table = table
        self._loop = loop
        self._waiting = waiting
        self._ledger = ledger
        self._clock = table.clock

    def submit_many(
        self,
        requests: Sequence[tuple[bytes, str, int, bool]],
        *,
        timeout: float,
    ) -> list[AckFuture]:
        """:meth:`submit` for ``(framed, correlation_id, partition, wants_ack)`` tuples.

        In order; as many at a time as ``max_in_flight`` leaves room for (one lock and
        one write per group).

        Raises:
            ClientClosedError: after :meth:`close` (nothing of the batch was sent).
            PublishQueueFullError: as :meth:`submit`; the futures of what was sent
                before are attached to the error as ``futures``.
        """
        deadline = self._admit_batch([framed for framed, _, _, _ in requests], timeout)
        entries = [
            new_entry(framed, correlation_id, partition, wants_ack, timeout, deadline)
            for framed, correlation_id, partition, wants_ack in requests
        ]
        self._enter_batch(entries)
        return [entry.future for entry in entries]

    def submit_values(
        self,
        framed: list[bytes],
        ids: list[str],
        *,
        partition: int | list[int],
        wants_ack: bool,
        timeout: float,
    ) -> list[AckFuture]:
        """:meth:`submit_many` for framed requests to one ``partition`` (the common
        ``publish_batch``), or each to its own (a list, one per request: a keyed batch
        that ``ByKey`` spread), their entries and futures built in one call.

        Raises:
            As :meth:`submit_many`.
        """
        deadline = self._admit_batch(framed, timeout)
        entries, futures = new_entries(framed, ids, partition, wants_ack, timeout, deadline)
        self._enter_batch(entries)
        return futures

    def publish_values(
        self,
        request_head: bytes,
        values: list[Any],
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> list[Ack | None | LiftbridgeError]:
        """Publish plain ``bytes`` values behind a cached ``request_head`` and wait for
        them: their outcomes (as :meth:`outcomes`), in order.

        In chunks of ``max_in_flight`` (at least ``_MIN_CHUNK``): a chunk is framed and
        entered while the one before is still in flight, and then that one is waited
        for, so only two chunks' requests and futures are alive at a time. A batch of a
        million messages neither holds a million framed requests nor hands the garbage
        collector a million futures to walk again and again.

        Raises:
            ClientClosedError, PublishQueueFullError: when nothing was entered. Once
                something was, the values that could not be entered get the error as
                their outcome instead.
            MessageTooLargeError: before anything was sent.
        """
        step = max(self._table.max_in_flight, _MIN_CHUNK)
        next_correlation_id = self._table.next_correlation_id
        wait_all = self._waiting.wait_all
        total = len(values)
        if total > step and not self._fits_in_chunks(request_head, values):
            # One chunk: every request's size is checked before any is sent, as the
            # size limit promises (a later chunk's too-large request would be refused
            # after earlier chunks went out).
            step = total
        outcomes: list[Ack | None | LiftbridgeError] = []
        in_flight: list[AckFuture] = []
        for start in range(0, total, step):
            chunk = values[start : start + step] if total > step else values
            framed, ids = frame_values(request_head, chunk, next_correlation_id())
            try:
                futures = self.submit_values(
                    framed, ids, partition=partition, wants_ack=wants_ack, timeout=timeout
                )
            except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
                if not start:
                    raise
                outcomes += wait_all(in_flight)
                return [*outcomes, *[exc] * (total - start)]
            outcomes += wait_all(in_flight)
            in_flight = futures
        outcomes += wait_all(in_flight)
        return outcomes

    def _fits_in_chunks(self, request_head: bytes, values: list[Any]) -> bool:
        """Whether every value frames within the size limit whatever correlation id it
        gets, so that no chunk of them can be refused as too large."""
        # The gRPC prefix, the value's and the id's tags and lengths (at most 11 bytes
        # each), and the id: the prefix, a counter and "." + an index (20 digits each).
        slack = 5 + len(request_head) + 2 * 11 + len(self._table.id_prefix) + 41
        return max(map(len, values)) + slack <= self._table.max_message

    def _admit_batch(self, framed: list[bytes], timeout: float) -> float:
        """Checks before any of a batch is entered; the batch's ack deadline.

        Raises:
            ClientClosedError, MessageTooLargeError: nothing of the batch was sent.
        """
        if self._table.closing:
            raise self._loop.closed_error()
        limit = self._table.max_message
        for request in framed:
            if len(request) > limit:
                raise self.too_large(len(request))
        if not self._loop.started:
            self._loop.start()
        return self._clock() + timeout

    def _enter_batch(self, entries: list[Entry]) -> None:
        """:meth:`enter` for a batch: what could not be entered fails with the error,
        which is raised only when nothing was entered."""
        try:
            self.enter(entries)
        except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
            entered = getattr(exc, "entered", 0)
            if not entered:
                raise
            # Part of the batch is on its way: the rest fails with the same error.
            settle([failure(e, exc) for e in entries[entered:]], self._ledger)

    def too_large(self, size: int) -> MessageTooLargeError:
        """The error of a framed request of ``size`` bytes over the limit."""
        return MessageTooLargeError(
            f"message is {size - 5:,} bytes on the wire; the server accepts at most "
            f"{self._table.max_message - 5:,} (the gRPC message limit; a larger request would "
            "end the whole publish stream)",
            code="TOO_LARGE",
        )

    def enter(self, entries: Sequence[Entry], line: bool = False) -> int:
        """Enter ``entries`` in the pending table and send them, in order, waiting for
        room as needed; ``line``: a ``publish()`` caller's, which waits in the line
        served first (see :class:`~.waiting.Waiters`).

        Raises:
            ClientClosedError, PublishQueueFullError: with ``entered`` set on the error
                to the number of entries that were entered before.
        """
        table = self._table
        start = 0
        total = len(entries)
        if not total:
            return 0
        # Its place in the line for slots, kept until all is entered (see Waiters).
        turn: Turn | None = None
        # What it may enter past those in line (None: nothing while any are).
        limit: int | None = None
        try:
            while True:
                # Each one's timeout counts from when it is entered (and sent).
                entered = table.enter(entries, start, limit is not None, limit)
                if entered < 0:
                    raise self._loop.closed_error()
                took = entered > start
                start = entered
                if start >= total:
                    break
                # No room left, or its share of it taken: in line (at the back if it
                # took slots on its turn).
                turn, limit = self._waiting.wait_for_space(line, turn, took and turn is not None)
        except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
            vars(exc)["entered"] = start
            raise
        finally:
            if turn is not None:
                self._waiting.leave(turn)
        return total
