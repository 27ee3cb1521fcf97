"""The general publish path: entering publishes in the pending table a batch at a time,
and the batches of ``publish_batch``.

A batch is entered under the send lock as far as ``max_in_flight`` leaves room, and its
acked requests are handed to the stream together (one lock and one write per group). A
large batch of plain values is framed and entered a chunk at a time
(:meth:`BatchPublishing.publish_values`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

from liftbridge_sync._publishing.futures import settle
from liftbridge_sync._publishing.pending import (
    INF,
    KICK,
    WAKE,
    AckFuture,
    Entry,
    failure,
    new_entries,
    new_entry,
)
from liftbridge_sync._publishing.waiting import Waiting
from liftbridge_sync._wire.publish_codec import frame_values
from liftbridge_sync.errors import (
    ClientClosedError,
    ConfigurationError,
    InternalThreadError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishQueueFullError,
)
from liftbridge_sync.models import Ack

__all__ = ["BatchPublishing"]

#: The smallest chunk :meth:`BatchPublishing.publish_values` enters at a time.
_MIN_CHUNK = 256


class BatchPublishing(Waiting):
    """Entering publishes a batch at a time: the part of the publisher that every path
    ends in when the per-message fast path cannot be taken. Thread-safe, as the
    publisher."""

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        return f"{self._id_prefix}{next(self._ids)}"

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
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> list[AckFuture]:
        """:meth:`submit_many` for framed requests to one partition (the common
        ``publish_batch``), their entries and futures built in one call.

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
        step = max(self._max_in_flight, _MIN_CHUNK)
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
            framed, ids = frame_values(request_head, chunk, self.next_correlation_id())
            try:
                futures = self.submit_values(
                    framed, ids, partition=partition, wants_ack=wants_ack, timeout=timeout
                )
            except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
                if not start:
                    raise
                outcomes += self.wait_all(in_flight)
                return [*outcomes, *[exc] * (total - start)]
            outcomes += self.wait_all(in_flight)
            in_flight = futures
        outcomes += self.wait_all(in_flight)
        return outcomes

    def _fits_in_chunks(self, request_head: bytes, values: list[Any]) -> bool:
        """Whether every value frames within the size limit whatever correlation id it
        gets, so that no chunk of them can be refused as too large."""
        # The gRPC prefix, the value's and the id's tags and lengths (at most 11 bytes
        # each), and the id: the prefix, a counter and "." + an index (20 digits each).
        slack = 5 + len(request_head) + 2 * 11 + len(self._id_prefix) + 41
        return max(map(len, values)) + slack <= self._max_message

    def _admit_batch(self, framed: list[bytes], timeout: float) -> float:
        """Checks before any of a batch is entered; the batch's ack deadline.

        Raises:
            ClientClosedError, MessageTooLargeError: nothing of the batch was sent.
        """
        if self._closing:
            raise self._closed_error()
        limit = self._max_message
        for request in framed:
            if len(request) > limit:
                raise self._too_large(len(request))
        if self._thread is None:
            self._start_thread()
        return self._clock() + timeout

    def _enter_batch(self, entries: list[Entry]) -> None:
        """:meth:`_enter` for a batch: what could not be entered fails with the error,
        which is raised only when nothing was entered."""
        try:
            self._enter(entries)
        except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
            entered = getattr(exc, "entered", 0)
            if not entered:
                raise
            # Part of the batch is on its way: the rest fails with the same error.
            settle([failure(e, exc) for e in entries[entered:]], self._failures_ledger)

    def _too_large(self, size: int) -> MessageTooLargeError:
        return MessageTooLargeError(
            f"message is {size - 5:,} bytes on the wire; the server accepts at most "
            f"{self._max_message - 5:,} (the gRPC message limit; a larger request would "
            "end the whole publish stream)",
            code="TOO_LARGE",
        )

    def _enter(self, entries: Sequence[Entry]) -> int:
        """Enter ``entries`` in the pending table and send them, in order.

        Raises:
            ClientClosedError, PublishQueueFullError: with ``entered`` set on the error
                to the number of entries that were entered before.
        """
        pending = self._pending
        limit = self._max_in_flight
        start = 0
        total = len(entries)
        try:
            while start < total:
                with self._send_lock:
                    if self._finished:
                        raise self._closed_error()
                    room = limit - len(pending)
                    if room > 0:
                        end = min(total, start + room)
                        self._enter_locked(entries, start, end)
                        start = end
                        continue
                self._wait_for_space()
        except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
            vars(exc)["entered"] = start
            raise
        return total

    def _enter_locked(self, entries: Sequence[Entry], start: int, end: int) -> None:
        pending = self._pending
        stream = self._live
        earliest = INF
        seqs = self._seqs
        expiry = self._expiry
        batch: list[bytes] = []  # acked requests, written together
        add_framed = batch.append
        # Entries of one call share a timeout: one deadline-queue lookup per change.
        queue_timeout: float | None = None
        queue_: collections.deque[Entry] = collections.deque()
        for i in range(start, end):
            entry = entries[i]
            correlation_id = entry.correlation_id
            if correlation_id in pending:
                error = ConfigurationError(f"correlation id {correlation_id!r} in use")
                settle((failure(entry, error),), self._failures_ledger)
                continue
            entry.seq = next(seqs)
            pending[correlation_id] = entry
            if entry.timeout != queue_timeout:
                queue_timeout = entry.timeout
                found = expiry.get(queue_timeout)
                if found is None:
                    found = expiry[queue_timeout] = collections.deque()
                queue_ = found
            queue_.append(entry)
            if entry.deadline < earliest:
                earliest = entry.deadline
            if stream is not None:
                if entry.wants_ack:
                    add_framed(entry.framed)
                else:
                    # AckPolicy.NONE: the server never answers a success, so the publish
                    # is done once the transport has written it (a StreamSent event).
                    if batch:
                        stream.send_many(batch)
                        batch = []
                        add_framed = batch.append
                    stream.send_framed(entry.framed, correlation_id)
        if end > start:
            self._seq = entries[end - 1].seq
        if batch and stream is not None:
            stream.send_many(batch)
        if stream is None:
            self._inbox.put(KICK)
        elif earliest < self._sleep_until:
            self._inbox.put(WAKE)

    def _start_thread(self) -> None:
        with self._lock:
            if self._closing:
                raise self._closed_error()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="liftbridge-publisher", daemon=True
                )
                self._thread.start()
