"""The NATS publisher's book of jobs, shared by its callers and its ``liftbridge-nats`` thread.

Callers register jobs here (taking one of ``max_in_flight`` slots for a publish); the
writer on the loop thread takes them in batches, and the ack handler claims the job an ack
answers by its correlation id. One lock guards it all, held only for a few lines and never
while waiting on NATS.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Any

from liftbridge_sync._runtime.doorbell import Doorbell
from liftbridge_sync.errors import (
    ClientClosedError,
    ConfigurationError,
    PublishQueueFullError,
)
from liftbridge_sync.nats._support import Job

__all__ = ["Ledger"]


class Ledger:
    """The jobs queued for the writer, awaiting their ack, or unresolved, and the closed flag.

    Args:
        max_in_flight: Most publishes holding a slot at once (a flush marker takes none).

    Thread-safe: every method takes the one lock, except :attr:`closed` and
    :meth:`mark_closed_after_fork`, which must work without it.
    """

    def __init__(self, max_in_flight: int) -> None:
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._closed = False
        self._queue: collections.deque[Job] = collections.deque()
        # Whether the writer was asked to wake and has not yet found the queue empty: a
        # batch of jobs wakes it once.
        self._wake_pending = False
        self._pending: dict[str, Job] = {}  # "ack" jobs by correlation id
        self._outstanding: set[concurrent.futures.Future[Any]] = set()
        self._in_flight = 0  # publishes holding a slot (max_in_flight)
        self._slot_freed = Doorbell()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`mark_closed_after_fork`) was called."""
        return self._closed

    # ------------------------------------------------------------------ callers

    def close(self) -> bool:
        """Refuse new jobs and wake publishes waiting for a slot; whether it was closed."""
        with self._lock:
            already = self._closed
            self._closed = True
            self._slot_freed.ring()  # publishes waiting for a slot raise ClientClosedError
        return already

    def mark_closed_after_fork(self) -> None:
        """Close a forked child's copy without the lock (a parent thread may have held it
        at fork, and then it stays held in the child)."""
        self._closed = True

    def take_slot(self, job: Job, *, on_loop: bool) -> bool:
        """Take a slot for publish ``job`` and queue it; whether to wake the writer.

        Waits for a slot until ``job.deadline``, except ``on_loop`` (a done-callback on
        the ``liftbridge-nats`` thread): slots are freed there, so it cannot wait.

        Raises:
            PublishQueueFullError: No slot freed in time (at once ``on_loop``).
            ClientClosedError: The ledger is closed.
            ConfigurationError: Another job awaiting its ack has the correlation id.
        """

        def take() -> bool | None:
            if self._in_flight >= self._max_in_flight and not self._closed:
                if on_loop:
                    raise self._queue_full()
                return None
            wake = self._register(job)
            self._in_flight += 1
            return wake

        wake = self._slot_freed.wait(self._lock, take, job.deadline)
        if wake is None:
            raise self._queue_full()
        return wake

    def add(self, job: Job) -> bool:
        """Queue ``job`` without a slot (a flush marker); whether to wake the writer.

        Raises:
            ClientClosedError: The ledger is closed.
        """
        with self._lock:
            return self._register(job)

    def release(self, future: concurrent.futures.Future[Any]) -> None:
        """A marker's ``future`` is done: forget it."""
        with self._lock:
            self._outstanding.discard(future)

    def release_slot(self, future: concurrent.futures.Future[Any]) -> None:
        """A publish's ``future`` is done: forget it and free its slot."""
        with self._lock:
            self._outstanding.discard(future)
            self._in_flight -= 1
            self._slot_freed.ring()

    def outstanding(self) -> list[concurrent.futures.Future[Any]]:
        """The futures not yet resolved.

        Raises:
            ClientClosedError: The ledger is closed.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("NatsPublisher is closed")
            return list(self._outstanding)

    def _queue_full(self) -> PublishQueueFullError:
        return PublishQueueFullError(
            f"{self._max_in_flight} NATS publishes are pending (max_in_flight) and none "
            "completed in time"
        )

    def _register(self, job: Job) -> bool:
        """Queue ``job`` (lock held); whether the writer needs waking."""
        if self._closed:
            raise ClientClosedError("NatsPublisher is closed")
        if job.kind == "ack":
            if job.correlation_id in self._pending:
                raise ConfigurationError(
                    f"correlation id {job.correlation_id!r} is already awaiting an ack"
                )
            self._pending[job.correlation_id] = job
        self._outstanding.add(job.future)
        self._queue.append(job)
        wake = not self._wake_pending
        self._wake_pending = True
        return wake

    # ------------------------------------------------------------------ the writer

    def next_batch(self) -> list[Job]:
        """Take every queued job; none means the writer sleeps until woken again."""
        with self._lock:
            if not self._queue:
                self._wake_pending = False
                return []
            batch = list(self._queue)
            self._queue.clear()
            return batch

    def expect_wake(self) -> None:
        """Make the next job queued wake the writer (it waits on NATS meanwhile)."""
        with self._lock:
            self._wake_pending = False

    def queued(self) -> list[Job]:
        """The jobs queued and not yet taken by the writer, oldest first."""
        with self._lock:
            return list(self._queue)

    def prune(self) -> None:
        """Drop the queued jobs already resolved (failed or cancelled): never written."""
        with self._lock:
            live = [job for job in self._queue if not job.future.done()]
            if len(live) < len(self._queue):
                self._queue.clear()
                self._queue.extend(live)

    def forget(self, job: Job) -> None:
        """Stop expecting an ack for ``job``; a later job reusing its id keeps its entry."""
        with self._lock:
            if self._pending.get(job.correlation_id) is job:
                del self._pending[job.correlation_id]

    def claim(self, correlation_id: str) -> Job | None:
        """The written job awaiting the ack with ``correlation_id``, no longer pending.

        ``None`` for an unknown id, or that of a job not yet written (its ack timer is
        set just before the write): a late or duplicate ack for an earlier publish.
        """
        with self._lock:
            job = self._pending.get(correlation_id)
            if job is None or job.handle is None:
                return None
            del self._pending[correlation_id]
            return job

    def drain(self) -> tuple[list[Job], list[concurrent.futures.Future[Any]]]:
        """Empty the ledger for the shutdown: the jobs still queued and every future
        not yet resolved."""
        with self._lock:
            self._pending.clear()
            leftover = list(self._queue)
            self._queue.clear()
            return leftover, list(self._outstanding)
