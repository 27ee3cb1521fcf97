"""The publisher: pipelined publishing over one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server).

The per-message path has no thread hand-off. The calling thread, under one short send
lock that fixes the order of messages, enters the publish in the pending table (keyed by
correlation id) and in a deadline queue, and gives its framed bytes to the open stream
(which coalesces writes; :mod:`~liftbridge_sync._transport.h2`). That callers' side is
this module. The rest is in three parts, joined here into one class:

* :mod:`.owner`: the ``liftbridge-publisher`` thread, woken only by whole batches: ack
  timeouts, reopening a broken stream and re-sending what is unacknowledged, closing;
* :mod:`.answers`: acks and refusals (resolved in bulk, on the stream's thread when
  nothing else needs doing), refusals re-sent, silent partitions probed and re-sent;
* :mod:`.pending`: the per-publish entry, the failure ledger, the loop's events.

A future always resolves or fails: at the latest when its timeout expires or the
publisher closes. A done-callback may call ``publish``, ``publish_async``, ``flush`` or
``close``: on the publisher thread those calls keep processing events while they wait
instead of blocking it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence

from liftbridge_sync._publishing.answers import AnswerHandling
from liftbridge_sync._publishing.encoding import _heads, head
from liftbridge_sync._publishing.futures import (
    settle,
)
from liftbridge_sync._publishing.pending import (
    INF,
    KICK,
    MAX_NESTING,
    TOO_DEEP,
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
from liftbridge_sync._wire.speedups import frame_id
from liftbridge_sync.errors import (
    ClientClosedError,
    ConfigurationError,
    InternalThreadError,
    LiftbridgeError,
    MessageTooLargeError,
    PublishError,
    PublishQueueFullError,
    UnobservedPublishFailuresError,
)
from liftbridge_sync.models import Ack, AckPolicy

__all__ = ["AckFuture", "Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")
_NO_ACK = AckPolicy.NONE


class Publisher(AnswerHandling):
    """Pipelined publishing over one ``PublishAsync`` stream.

    Created by the :class:`~liftbridge_sync.Client` on first publish. Thread-safe:
    :meth:`submit`, :meth:`submit_many`, :meth:`flush` and :meth:`close` may be called
    from any thread, including a future's done-callback.
    """

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

        Raises:
            ConfigurationError: a bad stream name or ack policy (before anything is sent).
            ClientClosedError, PublishQueueFullError: as :meth:`submit`.
        """
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

    def check_can_wait(self) -> None:
        """Refuse, before anything is sent, a blocking call that could not wait here.

        A done-callback runs on the publisher thread; a blocking call there processes
        events while it waits, nesting one level per callback. Past the limit the call
        fails *before* its message is sent, so a failure never hides a stored message.

        Raises:
            PublishError: the nesting limit is reached.
        """
        if self._nesting >= MAX_NESTING and self._on_owner_thread():
            raise PublishError(TOO_DEEP)

    def _wait_for_space(self) -> None:
        enqueue_timeout = self._options.enqueue_timeout
        deadline = None if enqueue_timeout is None else self._clock() + enqueue_timeout
        if self._on_owner_thread():
            # A done-callback publishing: blocking here would stop the very thread that
            # frees slots, so keep processing events while waiting.
            acquired = self._run_nested(self._has_room, deadline)
        else:
            acquired = self._wait_until(self._has_room, deadline)
        if not acquired:
            raise PublishQueueFullError(
                f"{self._max_in_flight} publishes in flight and no slot freed within "
                f"{enqueue_timeout}s (max_in_flight / enqueue_timeout)"
            )

    def _has_room(self) -> bool:
        return len(self._pending) < self._max_in_flight or self._finished

    def _wait_until(self, ready: Callable[[], bool], deadline: float | None) -> bool:
        """Block (not on the owner thread) until ``ready()``; False at ``deadline``.

        ``ready`` must be a cheap look at shared state that any thread may call: the
        threads that change that state call it too, to wake this one only when it holds.
        """
        with self._space:
            # The owner changes what ``ready`` reads *before* it looks at _waits (and
            # calls ``ready`` under _space); we list ourselves *before* we look at
            # ``ready``: no wake-up is lost. ``ready`` runs on the waking thread too.
            self._waits.append(ready)
            try:
                while not ready():
                    if deadline is None:
                        self._space.wait()
                        continue
                    remaining = deadline - self._clock()
                    if remaining <= 0 or not self._space.wait(remaining):
                        if not ready():
                            return False
                return True
            finally:
                self._waits.remove(ready)

    def _start_thread(self) -> None:
        with self._lock:
            if self._closing:
                raise self._closed_error()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="liftbridge-publisher", daemon=True
                )
                self._thread.start()

    def wait(
        self, future: concurrent.futures.Future[Ack | None], timeout: float | None
    ) -> Ack | None:
        """Wait for ``future``; on the owner thread, process events meanwhile."""
        if self._on_owner_thread() and not future.done():
            deadline = None if timeout is None else self._clock() + timeout
            self._run_nested(future.done, deadline)
            if not future.done():
                raise TimeoutError("publish did not complete in time")
        return future.result(timeout=timeout)

    @staticmethod
    def outcomes(futures: Sequence[AckFuture]) -> list[Ack | None | LiftbridgeError]:
        """Each resolved future's ack, or its error (marked observed: it is returned)."""
        result: list[Ack | None | LiftbridgeError] = []
        add = result.append
        for future in futures:
            error = future._exception
            if error is None:
                add(future._result)
                continue
            if future.ledger is not None:
                future.ledger.observed(future)
            add(error if isinstance(error, LiftbridgeError) else ClientClosedError(str(error)))
        return result

    def wait_all(self, futures: list[AckFuture]) -> list[Ack | None | LiftbridgeError]:
        """Wait until every future of a batch resolved; their :meth:`outcomes`, in order."""
        for future in reversed(futures):  # acks arrive in order: the last one first
            if future._state != "FINISHED":  # done() inline: one call less per message
                self.wait_done(future)
        return self.outcomes(futures)

    def wait_done(self, future: AckFuture) -> None:
        """Wait until ``future`` has resolved (its own deadline bounds the wait)."""
        if future.done():
            return
        if self._on_owner_thread():
            self._run_nested(future.done, None)
        else:
            concurrent.futures.wait((future,))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed.

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: if publishes failed since the previous flush
                and nobody called ``result()`` or ``exception()`` on their futures.
        """
        upto = self._seq

        def flushed() -> bool:
            # ``_pending`` is in sequence order (insertion order; re-sends keep it).
            while True:
                try:
                    oldest = next(iter(self._pending.values()), None)
                except RuntimeError:  # changed by another thread meanwhile
                    continue
                return oldest is None or oldest.seq > upto or self._finished

        if not flushed():
            deadline = None if timeout is None else self._clock() + timeout
            if self._on_owner_thread():
                done = self._run_nested(flushed, deadline)
            else:
                done = self._wait_until(flushed, deadline)
            if not done:
                left = sum(1 for e in list(self._pending.values()) if e.seq <= upto)
                raise TimeoutError(f"{left} publishes still pending after {timeout}s")
        count, errors = self._failures_ledger.take()
        if count:
            raise UnobservedPublishFailuresError(count=count, errors=errors)

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
