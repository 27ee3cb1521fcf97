"""The NATS publisher's hand-off: jobs from any caller's thread to ``liftbridge-nats``.

It puts together the publisher's three parts, each owned here: the
:class:`~._ledger.Ledger` of jobs, the :class:`~._thread.LoopThread` running the event
loop, and the :class:`~._writer.LoopWriter` on that loop. Submitting registers a job in
the ledger and wakes the writer at most once per batch; closing shuts the writer down on
the loop and joins the thread, each with a bound.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from liftbridge_sync.errors import ClientClosedError, MessageTooLargeError
from liftbridge_sync.nats._ledger import Ledger
from liftbridge_sync.nats._support import Job, settle
from liftbridge_sync.nats._thread import LoopThread
from liftbridge_sync.nats._writer import LoopWriter

__all__ = ["Handoff"]


class Handoff:
    """Queue publish jobs for the ``liftbridge-nats`` thread, starting it on first use.

    Args:
        nats: The nats-py module.
        servers: NATS server URLs.
        connect_timeout: Seconds for the first connection.
        nats_options: More arguments for ``nats.connect``.
        ack_inbox: The subject acks come back on.
        pending_limit: What nats-py buffers before a publish waits for a flush.
        max_in_flight: Most publishes holding a slot at once.

    Thread-safe: any thread may submit and close; the parts guard their own state.
    """

    def __init__(
        self,
        nats: ModuleType,
        *,
        servers: Sequence[str],
        connect_timeout: float,
        nats_options: dict[str, Any],
        ack_inbox: str,
        pending_limit: float,
        max_in_flight: int,
    ) -> None:
        self._ledger = Ledger(max_in_flight)
        self._writer = LoopWriter(
            nats,
            self._ledger,
            servers=servers,
            connect_timeout=connect_timeout,
            nats_options=nats_options,
            ack_inbox=ack_inbox,
            pending_limit=pending_limit,
        )
        self._thread = LoopThread(
            self._writer.connect,
            connect_timeout=connect_timeout,
            servers=servers,
            closed=lambda: self._ledger.closed,
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._ledger.closed

    @property
    def started(self) -> bool:
        """Whether the ``liftbridge-nats`` thread was started (and connected)."""
        return self._thread.started

    def forbid_loop_thread(self, name: str) -> None:
        """Refuse the blocking method ``name`` on the ``liftbridge-nats`` thread.

        Raises:
            WrongThreadError: Called there.
        """
        self._thread.forbid_here(name)

    def refuse_if_forked(self) -> None:
        """Refuse in a process forked after the start.

        Raises:
            ForkedClientError: In such a process.
        """
        self._thread.refuse_if_forked()

    def outstanding(self) -> list[concurrent.futures.Future[Any]]:
        """The futures of jobs not yet resolved.

        Raises:
            ClientClosedError: Closed.
        """
        return self._ledger.outstanding()

    def submit(self, job: Job) -> None:
        """Register ``job`` and hand it to the writer on the loop thread.

        A publish first takes one of ``max_in_flight`` slots, waiting for one until its
        deadline (a flush marker takes none).

        Raises:
            ForkedClientError: In a process forked after the start.
            ClientClosedError: Closed.
            BrokerUnavailableError: The first connection failed.
            ConfigurationError: nats-py refused an option, or the correlation id is taken.
            PublishQueueFullError: No slot freed in time.
            MessageTooLargeError: The payload is over the NATS server's ``max_payload``
                (1 MiB by default, below the 4 MiB a gRPC publish may carry).
        """
        self._thread.refuse_if_forked()
        loop = self._thread.start()
        limit = self._writer.max_payload()
        if job.kind != "flush" and limit is not None and len(job.payload) > limit:
            # Refused here, not by nats-py on the loop: there it failed the future
            # (PublishRejectedError) after a slot was taken and the deadline armed.
            raise MessageTooLargeError(
                f"message is {len(job.payload):,} bytes with its envelope; the NATS "
                f"server accepts at most {limit:,} (its max_payload)",
                code="TOO_LARGE",
            )
        ledger = self._ledger
        if job.kind == "flush":
            wake = ledger.add(job)
            job.future.add_done_callback(ledger.release)
        else:
            wake = ledger.take_slot(job, on_loop=self._thread.on_thread())
            job.future.add_done_callback(ledger.release_slot)
        if wake:
            try:
                loop.call_soon_threadsafe(self._writer.wake)
            except RuntimeError:
                if not loop.is_closed():
                    raise
                # A close() on another thread ended the loop since the job was queued;
                # its shutdown settled the job's future (ClientClosedError).

    def close(self, seconds: float) -> None:
        """Refuse new jobs, shut the writer down within ``seconds`` and join the thread.

        On the ``liftbridge-nats`` thread the shutdown is only started; in a process
        forked after the start, nothing but the closed flag is set. When a done-callback
        holds the thread past the bound, the jobs not yet settled fail here with
        ``ClientClosedError`` (their done-callbacks then run on the caller's thread).
        """
        if self._thread.forked():
            self._ledger.mark_closed_after_fork()
            return
        already = self._ledger.close()
        if self._thread.on_thread():
            if not already:
                self._writer.start_shutdown(seconds)
            return
        shutdown = None if already else lambda: self._writer.shutdown(seconds)
        if not self._thread.stop(shutdown, seconds):
            # A done-callback holds the loop thread: the shutdown, which fails what is
            # left, may never have run. Fail it here, so that a flush() or publish()
            # waiting on another thread wakes now, not when the callback returns.
            leftover, outstanding = self._ledger.drain()
            error = ClientClosedError(
                "NatsPublisher closed before the publish completed (its liftbridge-nats "
                "thread was held by a done-callback)"
            )
            for job in leftover:
                settle(job.future, error=error)
            for future in outstanding:
                settle(future, error=error)
