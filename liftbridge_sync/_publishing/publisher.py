"""The publisher: pipelined publishing over one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server).

The per-message path has no thread hand-off. The calling thread, under one short send
lock that fixes the order of messages, enters the publish in the pending table (keyed by
correlation id) and in a deadline queue, and gives its framed bytes to the open stream
(which coalesces writes; :mod:`~liftbridge_sync._transport.h2`). That callers' side is
this module. The rest is in five parts, joined here into one class:

* :mod:`.owner`: the ``liftbridge-publisher`` thread, woken only by whole batches: ack
  timeouts, reopening a broken stream and re-sending what is unacknowledged, closing;
* :mod:`.answers`: acks and refusals (resolved in bulk, on the stream's thread when
  nothing else needs doing), refusals re-sent, silent partitions probed and re-sent;
* :mod:`.batches`: the general path, entering publishes a batch at a time, and the
  batches of ``publish_batch``;
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

from liftbridge_sync._publishing.batches import BatchPublishing
from liftbridge_sync._publishing.futures import PublishFuture
from liftbridge_sync._publishing.pending import (
    WAKE,
    AckFuture,
    Close,
    Entry,
    frame_entry,
    new_entry,
)
from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.publish_codec import _heads, frame_id, head
from liftbridge_sync.models import AckPolicy

__all__ = ["AckFuture", "Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")
_NO_ACK = AckPolicy.NONE
#: What the caller of ``submit_plain`` still does (see ``_speedups_submit.c``).
_TODO_WAKE_OWNER = 1
_TODO_STREAM = 2 | 4  # wake the stream's I/O thread, or write its queue here
_TODO_WRITE_HERE = 4


class Publisher(BatchPublishing):
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

    def submit(
        self,
        framed: bytes,
        correlation_id: str,
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
        direct: bool = False,
    ) -> AckFuture:
        """Send a framed request now, from this thread; the future resolves with its ack.
        ``direct``: the caller waits for the ack next (``publish``).

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
        deadline = self._clock() + timeout
        entry = new_entry(framed, correlation_id, partition, wants_ack, timeout, deadline)
        return self._send_entry(entry, wants_ack, timeout, deadline, direct)

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
