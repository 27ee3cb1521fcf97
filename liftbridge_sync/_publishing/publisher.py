"""The publisher: pipelined publishing over one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server).

The per-message path has no thread hand-off. The calling thread, under one short send
lock that fixes the order of messages, enters the publish in the pending table (keyed by
correlation id) and in a deadline queue, and gives its framed bytes to the open stream
(which coalesces writes; :mod:`~liftbridge_sync._transport.h2`). That callers' side is
this module. The rest is in four parts, joined here into one class:

* :mod:`.owner`: the ``liftbridge-publisher`` thread, woken only by whole batches: ack
  timeouts, reopening a broken stream and re-sending what is unacknowledged, closing;
* :mod:`.answers`: acks and refusals (resolved in bulk, on the stream's thread when
  nothing else needs doing), refusals re-sent, silent partitions probed and re-sent;
* :mod:`.waiting`: callers waiting for futures, free slots and flushes;
* :mod:`.pending`: the per-publish entry, the failure ledger, the loop's events.

A future always resolves or fails: at the latest when its timeout expires or the
publisher closes. A done-callback may call ``publish``, ``publish_async``, ``flush`` or
``close``: on the publisher thread those calls keep processing events while they wait
instead of blocking it.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Sequence
from typing import Any

from liftbridge_sync._publishing.encoding import _heads, head
from liftbridge_sync._publishing.futures import (
    PublishFuture,
    settle,
)
from liftbridge_sync._publishing.pending import (
    INF,
    KICK,
    WAKE,
    AckFuture,
    Close,
    Entry,
    failure,
    frame_entry,
    new_entries,
    new_entry,
)
from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._publishing.waiting import Waiting
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.speedups import frame_id, frame_values
from liftbridge_sync.errors import (
    ClientClosedError,
    ConfigurationError,
    InternalThreadError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishQueueFullError,
)
from liftbridge_sync.models import Ack, AckPolicy

__all__ = ["AckFuture", "Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")
_NO_ACK = AckPolicy.NONE
#: What the caller of ``submit_plain`` still does (see ``_speedups_submit.c``).
_TODO_WAKE_OWNER = 1
_TODO_STREAM = 2 | 4  # wake the stream's I/O thread, or write its queue here
_TODO_WRITE_HERE = 4
#: The smallest chunk :meth:`Publisher.publish_values` enters at a time.
_MIN_CHUNK = 256


class Publisher(Waiting):
    """Pipelined publishing over one ``PublishAsync`` stream.

    Created by the :class:`~liftbridge_sync.Client` on first publish. Thread-safe:
    :meth:`submit`, :meth:`submit_many`, :meth:`flush` and :meth:`close` may be called
    from any thread, including a future's done-callback.
    """

    #: What the C fast path of :meth:`submit_value` reads and writes in place (the rest
    #: of the state stays in the instance dict).
    __slots__ = (
        "_closing",
        "_ids",
        "_id_prefix",
        "_max_message",
        "_clock",
        "_send_lock",
        "_live",
        "_pending",
        "_max_in_flight",
        "_finished",
        "_seqs",
        "_seq",
        "_expiry",
        "_sleep_until",
    )

    #: The client passes its close timeout through.
    close_accepts_timeout = True

    def stats(self) -> PublisherStats:
        """Counters so far (a snapshot; see :class:`PublisherStats`)."""
        return PublisherStats(
            in_flight=len(self._pending),
            connects=self._connects,
            resent_after_reconnect=self._resent_after_reconnect,
            resent_after_stall=self._resent_after_stall,
            resent_after_refusal=self._resent_after_refusal,
            stall_probes=self._stall_probes,
        )

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        return f"{self._id_prefix}{next(self._ids)}"

    def submit(
        self,
        framed: bytes,
        correlation_id: str,
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> AckFuture:
        """Send a framed request now, from this thread; the future resolves with its ack.

        Raises:
            ClientClosedError: after :meth:`close`.
            InternalThreadError: the publisher thread died (a bug): nothing was sent.
            PublishQueueFullError: ``max_in_flight`` pending and no slot within the
                enqueue timeout.
        """
        if self._closing:
            raise self._closed_error()
        if len(framed) > self._max_message:
            raise self._too_large(len(framed))
        if self._thread is None:
            self._start_thread()
        entry = new_entry(
            framed, correlation_id, partition, wants_ack, timeout, self._clock() + timeout
        )
        self._enter((entry,))
        return entry.future

    def submit_value(
        self,
        stream: str,
        value: bytes,
        partition: int,
        ack_policy: AckPolicy,
        timeout: float,
        direct: bool = False,
    ) -> AckFuture:
        """:meth:`submit` for the common case, everything inline: a value (``bytes``) to a
        partition, no key, headers, expected offset or own correlation id. ``direct``: the
        caller waits for the ack next (``publish``), so it writes on its own thread.

        With the C speedups, a ``publish_async`` that needs no lock to be waited for is
        done by one call (``submit_plain``) that runs no bytecode.

        Raises:
            ConfigurationError: a bad stream name or ack policy (before anything is sent).
            ClientClosedError, PublishQueueFullError: as :meth:`submit`.
        """
        if not direct and _submit_plain is not None:
            done = _submit_plain(self, stream, value, partition, ack_policy, timeout)
            if done.__class__ is PublishFuture:
                return done  # type: ignore[no-any-return]
            if done.__class__ is tuple:
                future, todo, stream_ = done
                if todo & _TODO_WAKE_OWNER:
                    self._inbox.put(WAKE)
                if todo & _TODO_STREAM:
                    stream_.nudge(bool(todo & _TODO_WRITE_HERE))
                return future  # type: ignore[no-any-return]
            if done is not None:  # an entry it could not enter without waiting
                return self._send_entry(done, done.wants_ack, done.timeout, done.deadline)
        if self._closing:
            raise self._closed_error()
        # head()'s cache lookup inline: one Python call less per message.
        cached = _heads.get((stream, partition, ack_policy))
        if cached is None:
            cached = head(stream, partition, ack_policy)
        n = next(self._ids)
        wants_ack = ack_policy is not _NO_ACK
        deadline = self._clock() + timeout
        entry = frame_entry(
            cached,
            value,
            self._id_prefix,
            n,
            self._max_message,
            partition,
            wants_ack,
            timeout,
            deadline,
        )
        if entry is None:
            raise self._too_large(len(frame_id(cached, value, self._id_prefix, n)[0]))
        return self._send_entry(entry, wants_ack, timeout, deadline, direct)

    def _send_entry(
        self, entry: Entry, wants_ack: bool, timeout: float, deadline: float, direct: bool = False
    ) -> AckFuture:
        """Enter a new publish in the pending table and give it to the open stream, or,
        not connected yet, full or closing, to the general path."""
        framed = entry.framed
        correlation_id = entry.correlation_id
        future: AckFuture = entry.future
        pending = self._pending
        lock = self._send_lock
        # acquire/release rather than ``with``: half the cost, on every publish.
        lock.acquire()
        try:
            stream_ = self._live
            if (
                stream_ is not None
                and len(pending) < self._max_in_flight
                and not self._finished
                and correlation_id not in pending
            ):
                self._seq = entry.seq = next(self._seqs)
                pending[correlation_id] = entry
                expiry = self._expiry.get(timeout)
                if expiry is None:
                    expiry = self._expiry[timeout] = collections.deque()
                expiry.append(entry)
                stream_.send_framed(framed, None if wants_ack else correlation_id, direct)
                if deadline < self._sleep_until:
                    self._inbox.put(WAKE)
                return future
        finally:
            lock.release()
        # Not connected yet, full, or closing: the general path.
        if self._thread is None:
            self._start_thread()
        self._enter((entry,))
        return future

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
        items: list[Any],
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> tuple[list[Ack | None | LiftbridgeError], int]:
        """Publish the leading run of plain ``bytes`` values of ``items`` behind a cached
        ``request_head`` and wait for them: their outcomes (as :meth:`outcomes`) and how
        many there were (``publish_batch`` does the rest its own way).

        In chunks of ``max_in_flight`` (at least ``_MIN_CHUNK``): a chunk is framed and
        entered while the one before is still in flight, and then that one is waited
        for, so only two chunks' requests and futures are alive at a time. A batch of a
        million messages neither holds a million framed requests nor hands the garbage
        collector a million futures to walk again and again.

        Raises:
            ClientClosedError, PublishQueueFullError: when nothing was entered. Once
                something was, the values that could not be entered get the error as
                their outcome instead.
        """
        step = max(self._max_in_flight, _MIN_CHUNK)
        outcomes: list[Ack | None | LiftbridgeError] = []
        in_flight: list[AckFuture] = []
        done = 0  # values entered (or failed) so far
        total = len(items)
        while done < total:
            chunk = items[done : done + step] if done or total > step else items
            framed, ids = frame_values(request_head, chunk, self.next_correlation_id())
            if not framed:
                break  # not a plain value: the caller goes on from here
            try:
                futures = self.submit_values(
                    framed, ids, partition=partition, wants_ack=wants_ack, timeout=timeout
                )
            except (ClientClosedError, InternalThreadError, PublishQueueFullError) as exc:
                if not done:
                    raise
                outcomes += self.wait_all(in_flight)
                return [*outcomes, *[exc] * (total - done)], total
            outcomes += self.wait_all(in_flight)
            in_flight = futures
            done += len(framed)
            if len(framed) < len(chunk):
                break
        outcomes += self.wait_all(in_flight)
        return outcomes, done

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

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting publishes, wait for pending acks, fail what is left. Idempotent.

        Args:
            timeout: Seconds to wait for pending acks (``None``: until each times out);
                what is still pending then fails with :class:`ClientClosedError`.
        """
        with self._lock:
            already = self._closing
            self._closing = True
            thread = self._thread
        if thread is None:
            return
        if not already:
            deadline = None if timeout is None else self._clock() + timeout
            self._inbox.put(Close(deadline))
        if threading.current_thread() is not thread:
            thread.join()


_submit_plain = speedups.submit_plain
if _submit_plain is not None and speedups.setup_submit is not None:
    speedups.setup_submit(
        Publisher, type(threading.Lock()), collections.deque, _heads, AckPolicy.NONE
    )
