"""The publisher: pipelined publishing over one ``PublishAsync`` stream.

Every publish path goes over the bidirectional ``PublishAsync`` stream (a unary Publish
without a deadline is fire-and-forget on the server).

The per-message path has no thread hand-off. The calling thread, under one short send
lock that fixes the order of messages, enters the publish in the pending table (keyed by
correlation id) and in a deadline queue, and gives its framed bytes to the open stream
(which coalesces writes; :mod:`~liftbridge_sync._transport.h2`). :class:`Publisher` is
the callers' facade; it holds the parts, each the one owner of its state:

* :mod:`.table`: the pending table: entries, deadline queues, sequence numbers, the send
  lock and the live stream;
* :mod:`.owner`: the ``liftbridge-publisher`` thread and its inbox, woken only by whole
  batches: ack timeouts, reopening a broken stream and re-sending what is
  unacknowledged, closing;
* :mod:`.connection`: the stream's life, for the owner loop: opened on the next broker,
  drained, reopened with back-off after it ends, closed;
* :mod:`.answers`: ack routing, answers to futures (resolved in bulk, on the stream's
  thread when nothing else needs doing);
* :mod:`.resending`: refusals re-sent, silent partitions probed and re-sent;
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
import concurrent.futures
import logging
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

from liftbridge_sync._publishing.answers import AckRouter
from liftbridge_sync._publishing.batches import Batches
from liftbridge_sync._publishing.futures import PublishFuture, fail_in_forked_child
from liftbridge_sync._publishing.owner import OwnerLoop, max_message
from liftbridge_sync._publishing.pending import (
    WAKE,
    AckFuture,
    Entry,
    FailureLedger,
    frame_entry,
    new_entry,
)
from liftbridge_sync._publishing.resending import Resender
from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync._publishing.waiting import Waiters, Waiting
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.publish_stream import StreamOpener
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.publish_codec import _heads, frame_id, head
from liftbridge_sync.errors import ForkedClientError, LiftbridgeError
from liftbridge_sync.models import Ack, AckPolicy

__all__ = ["AckFuture", "Publisher"]

_log = logging.getLogger("liftbridge_sync.publisher")
_NO_ACK = AckPolicy.NONE
#: What the caller of ``submit_plain`` still does (see ``_speedups_submit.c``).
_TODO_WAKE_OWNER = 1
_TODO_STREAM = 2 | 4  # wake the stream's I/O thread, or write its queue here
_TODO_WRITE_HERE = 4
_TODO_WRITE_DIRECT = 8  # a publish() caller: write here if nobody is, else wake


class Publisher:
    """Pipelined publishing over one ``PublishAsync`` stream: the callers' facade.

    Created by the :class:`~liftbridge_sync.Client` on first publish. Thread-safe:
    :meth:`submit`, :meth:`submit_many`, :meth:`flush` and :meth:`close` may be called
    from any thread, including a future's done-callback.
    """

    #: The client passes its close timeout through.
    close_accepts_timeout = True
    #: Closed after the readers (see ``ClientCore.close``): its close waits for acks.
    close_rank = 2

    def __init__(
        self,
        core: ClientCore,
        *,
        opener: StreamOpener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        options = core.options
        inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        ledger = self._ledger = FailureLedger()
        table = self._table = PendingTable(
            max_in_flight=options.max_in_flight,
            max_message=max_message(options.grpc_options) + 5,  # framed
            wake_owner=inbox.put,
            ledger=ledger,
            clock=clock,
        )
        #: The table's state, which the C fast path (``submit_plain``) enters publishes in.
        self._core = table.core
        waiters = self._waiters = Waiters(clock, table)
        resender = self._resender = Resender(core, table, inbox.put, clock=clock)
        table_core = table.core
        pending = table.entries
        wake_waiters = waiters.wake
        put = inbox.put

        def wake_after_acks() -> None:
            wake_waiters()
            if table_core.closing and not pending:
                # close() waits for the last ack, which the stream's thread resolved:
                # the publisher thread sleeps until its next timer (up to an ack
                # timeout away) unless told.
                put(WAKE)

        router = AckRouter(table, resender, ledger, wake_after_acks)
        loop = self._loop = OwnerLoop(
            core, table, router, resender, ledger, inbox, waiters.wake, opener=opener, clock=clock
        )
        waiting = self._waiting = Waiting(table, loop, waiters, ledger, options.enqueue_timeout)
        self._batches = Batches(table, loop, waiting, ledger)
        self._clock = clock

    def stats(self) -> PublisherStats:
        """Counters so far (a snapshot; see :class:`PublisherStats`)."""
        resender = self._resender
        return PublisherStats(
            in_flight=len(self._table),
            connects=self._loop.connects,
            resent_after_reconnect=self._loop.resent_after_reconnect,
            resent_after_stall=resender.resent_after_stall,
            resent_after_refusal=resender.resent_after_refusal,
            stall_probes=resender.stall_probes,
        )

    # -- waiting (see waiting.py) ------------------------------------------------------

    def check_can_wait(self) -> None:
        """Refuse, before anything is sent, a blocking call that could not wait here
        (see :meth:`.Waiting.check_can_wait`).

        Raises:
            PublishError: the nesting limit of waiting done-callbacks is reached.
        """
        self._loop.check_can_nest()

    def wait(
        self,
        future: concurrent.futures.Future[Ack | None],
        timeout: float | None,
        read_here: bool = False,
    ) -> Ack | None:
        """Wait for ``future`` (see :meth:`.Waiting.wait`)."""
        return self._waiting.wait(future, timeout, read_here)

    def wait_all(self, futures: list[AckFuture]) -> list[Ack | None | LiftbridgeError]:
        """Wait until every future of a batch resolved; their outcomes, in order."""
        return self._waiting.wait_all(futures)

    @staticmethod
    def outcomes(futures: Sequence[AckFuture]) -> list[Ack | None | LiftbridgeError]:
        """Each resolved future's ack, or its error (see :meth:`.Waiting.outcomes`)."""
        return Waiting.outcomes(futures)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed (see
        :meth:`.Waiting.flush`).

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: failed futures dropped unobserved since the
                previous flush.
        """
        self._waiting.flush(timeout)

    def barrier(self, timeout: float) -> None:
        """Return once the ``liftbridge-publisher`` thread has finished its current turn
        (at most ``timeout`` seconds): the done-callbacks of the publishes it resolved
        in it have returned, which a :meth:`flush` returning does not say (it wakes as
        the last one resolves, before its callbacks run)."""
        self._loop.barrier(timeout)

    # -- batches (see batches.py) ------------------------------------------------------

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (prefix + counter: cheap and unique)."""
        return self._table.next_correlation_id()

    def submit_many(
        self,
        requests: Sequence[tuple[bytes, str, int, bool]],
        *,
        timeout: float,
    ) -> list[AckFuture]:
        """:meth:`submit` for ``(framed, correlation_id, partition, wants_ack)`` tuples
        (see :meth:`.Batches.submit_many`).

        Raises:
            ClientClosedError, PublishQueueFullError: as :meth:`.Batches.submit_many`.
        """
        return self._batches.submit_many(requests, timeout=timeout)

    def submit_values(
        self,
        framed: list[bytes],
        ids: list[str],
        *,
        partition: int | list[int],
        wants_ack: bool,
        timeout: float,
    ) -> list[AckFuture]:
        """Framed requests to one partition, or each to its own (see
        :meth:`.Batches.submit_values`).

        Raises:
            As :meth:`submit_many`.
        """
        return self._batches.submit_values(
            framed, ids, partition=partition, wants_ack=wants_ack, timeout=timeout
        )

    def publish_values(
        self,
        request_head: bytes,
        values: list[Any],
        *,
        partition: int,
        wants_ack: bool,
        timeout: float,
    ) -> list[Ack | None | LiftbridgeError]:
        """Publish plain ``bytes`` values and wait for them (see
        :meth:`.Batches.publish_values`).

        Raises:
            ClientClosedError, PublishQueueFullError, MessageTooLargeError: as there.
        """
        return self._batches.publish_values(
            request_head, values, partition=partition, wants_ack=wants_ack, timeout=timeout
        )

    # -- one publish at a time ---------------------------------------------------------

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
        table = self._table
        if table.closing:
            raise self._loop.closed_error()
        if len(framed) > table.max_message:
            raise self._batches.too_large(len(framed))
        if not self._loop.started:
            self._loop.start()
        deadline = self._clock() + timeout
        entry = new_entry(framed, correlation_id, partition, wants_ack, timeout, deadline)
        return self._send_entry(entry, direct)

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

        With the C speedups, a publish that needs no lock to be waited for is entered
        and queued by one call (``submit_plain``) that runs no bytecode; a ``publish()``
        caller then writes the queue itself, unless the I/O thread or a caller woken
        with it will (as the h2 stream's :meth:`send_framed
        <liftbridge_sync._transport.h2.writing.Writer.send_framed>` with ``direct``).

        Raises:
            ConfigurationError: a bad stream name or ack policy (before anything is sent).
            ClientClosedError, PublishQueueFullError: as :meth:`submit`.
        """
        if _submit_plain is not None:
            done = _submit_plain(self._core, stream, value, partition, ack_policy, timeout, direct)
            if done.__class__ is PublishFuture:
                return done  # type: ignore[no-any-return]
            if done.__class__ is tuple:
                future, todo, stream_ = done
                if todo & _TODO_WAKE_OWNER:
                    self._table.wake_owner()
                if todo & _TODO_WRITE_DIRECT:
                    stream_.write_direct()
                elif todo & _TODO_STREAM:
                    stream_.nudge(bool(todo & _TODO_WRITE_HERE))
                return future  # type: ignore[no-any-return]
            if done is not None:  # an entry it could not enter without waiting
                return self._send_entry(done, direct)
        table = self._table
        if table.closing:
            raise self._loop.closed_error()
        # head()'s cache lookup inline: one Python call less per message.
        cached = _heads.get((stream, partition, ack_policy))
        if cached is None:
            cached = head(stream, partition, ack_policy)
        n = table.next_id_number()
        wants_ack = ack_policy is not _NO_ACK
        deadline = self._clock() + timeout
        prefix = table.id_prefix
        entry = frame_entry(
            cached,
            value,
            prefix,
            n,
            table.max_message,
            partition,
            wants_ack,
            timeout,
            deadline,
        )
        if entry is None:
            raise self._batches.too_large(len(frame_id(cached, value, prefix, n)[0]))
        return self._send_entry(entry, direct)

    def _send_entry(self, entry: Entry, direct: bool = False) -> AckFuture:
        """Enter a new publish in the pending table and give it to the open stream, or,
        not connected yet, full or closing, to the general path."""
        if self._table.admit(entry, direct):
            return entry.future
        # Not connected yet, full, or closing: the general path (a publish() caller
        # waits for a slot in line, served first: see Waiters).
        if not self._loop.started:
            self._loop.start()
        self._batches.enter((entry,), direct)
        return entry.future

    def close(self, timeout: float | None = None) -> None:
        """Stop accepting publishes, wait for pending acks, fail what is left. Idempotent.

        Returns within ``timeout`` + :data:`~.owner.CLOSE_SLACK` seconds whatever the
        broker does (see :meth:`~.owner.OwnerLoop.close`).

        Args:
            timeout: Seconds to wait for pending acks (``None``: until each times out);
                what is still pending then fails with :class:`ClientClosedError`.

        Failed publishes whose futures were dropped unobserved since the last
        ``flush()`` (those the close failed included) are logged as a WARNING with
        their count and first errors: no ``flush()`` can report them any more, and a
        process that exits with publishes pending (a web worker's ``202 Accepted``)
        lost them without a word.
        """
        self._loop.close(timeout)
        count, errors = self._ledger.take()
        if count:
            _log.warning(
                "%d publish%s failed and nobody looked at %s: %s%s",
                count,
                "" if count == 1 else "es",
                "its future" if count == 1 else "their futures",
                "; ".join(f"{type(e).__name__}: {e}" for e in errors[:3]),
                "; ..." if count > 3 else "",
            )

    def fail_in_forked_child(self) -> None:
        """In a forked child, right after the fork: fail every publish still pending
        with :class:`ForkedClientError` (see :func:`~.futures.fail_in_forked_child`).
        The parent's threads, which would have resolved them, do not exist here, and a
        result waited for in the child would never come.

        Not thread-safe, nor need it be: the child has one thread while its at-fork
        hooks run, and the pending entries are read without the locks a parent's
        thread may have held.
        """
        error = ForkedClientError(
            "this publish was pending when the process forked: its outcome is the "
            "parent's (the child's client publishes anew)"
        )
        for entry in list(self._table.entries.values()):
            fail_in_forked_child(entry.future, error)


_submit_plain = speedups.submit_plain
if _submit_plain is not None and speedups.setup_submit is not None:
    speedups.setup_submit(collections.deque, _heads, AckPolicy.NONE)
