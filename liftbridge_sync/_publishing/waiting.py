"""Waiting on the publisher: for a future, a batch of futures, a free slot, a flush.

A thread that waits blocks on a gate of its own, listed with what it waits for (a free
slot, a flush, a batch's last future), or set on the future it waits for (``publish``:
:func:`~.futures.wait_gated`), and is woken only once what it waits for holds: the
threads that resolve publishes check each waiter's condition before opening its gate.
On the publisher thread (a done-callback that waits) waiting means processing events
meanwhile instead (:meth:`~.owner.OwnerLoop._run_nested`), or the thread that frees
slots and resolves futures would stop.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence

from liftbridge_sync._publishing.answers import AnswerHandling
from liftbridge_sync._publishing.futures import PublishFuture, wait_gated
from liftbridge_sync._publishing.pending import MAX_NESTING, TOO_DEEP, AckFuture
from liftbridge_sync.errors import (
    ClientClosedError,
    LiftbridgeError,
    PublishError,
    PublishQueueFullError,
    UnobservedPublishFailuresError,
)
from liftbridge_sync.models import Ack

__all__ = ["Waiting"]


#: Longest wait for the owner thread to finish its turn before a flush counts failures.
_BARRIER_WAIT = 1.0


class Waiting(AnswerHandling):
    """The publisher's waiting calls (see the module docstring). Thread-safe: each may be
    called from any thread, including a future's done-callback."""

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
        threads that change that state call it too, and release this thread's gate
        only when it holds (:meth:`~.owner.OwnerLoop._wake_waiters`).
        """
        while True:
            gate = threading.Lock()
            gate.acquire()
            entry = (ready, gate)
            with self._space:
                # Listed *before* the look at ``ready``, and whoever changes what it
                # reads looks at the list *after* the change: no wake-up is lost.
                self._waits.append(entry)
                if ready():
                    self._waits.remove(entry)
                    return True
            if deadline is None:
                gate.acquire()
            else:
                remaining = deadline - self._clock()
                if remaining <= 0 or not gate.acquire(timeout=remaining):
                    with self._space:
                        if entry in self._waits:
                            self._waits.remove(entry)
                    return ready()
            if ready():
                return True
            # It held when the gate opened and no longer does (another thread took
            # the free slot): wait again.

    def wait(
        self,
        future: concurrent.futures.Future[Ack | None],
        timeout: float | None,
        read_here: bool = False,
    ) -> Ack | None:
        """Wait for ``future``; on the owner thread, process events meanwhile.

        With ``read_here`` (the future waits for an ack), the stream may first let this
        thread read the answer itself (``answer_here``: a ``publish()`` caller gets its
        ack without a hop through the I/O thread). A publish without an ack is resolved
        by the publisher thread once written, which a reading caller would not notice
        until something arrived."""
        if self._on_owner_thread() and not future.done():
            deadline = None if timeout is None else self._clock() + timeout
            self._run_nested(future.done, deadline)
            if not future.done():
                raise TimeoutError("publish did not complete in time")
        elif read_here and future._state != "FINISHED":
            stream = self._live
            if stream is not None:
                stream.answer_here(future.done)
            if timeout is None and isinstance(future, PublishFuture):
                wait_gated(future)  # one lock of this thread's, no Condition
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
        """Wait until ``future`` has resolved (its own deadline bounds the wait).

        On a gate of its own, like :meth:`flush`, rather than through
        ``concurrent.futures.wait``: every thread that resolves futures already opens
        the gates of the waiters whose condition holds, so a batch costs no event,
        waiter or condition of its own, and the thread resolving it no extra notify.
        """
        if future.done():
            return
        if self._on_owner_thread():
            self._run_nested(future.done, None)
            return
        self._wait_until(future.done, None)  # the future's own deadline bounds it

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed.

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: if, since the previous flush, failed
                futures were dropped without anybody having called ``result()`` or
                ``exception()`` on them (see :class:`~.pending.FailureLedger`).
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
        if self._failures_ledger.live:
            # The owner thread may still hold futures it has just failed (its locals
            # outlive waking us): one round trip through its inbox lets them go, so a
            # failure dropped unretrieved is counted by this flush, not the next one.
            self._owner_barrier(_BARRIER_WAIT)
        count, errors = self._failures_ledger.take()
        if count:
            raise UnobservedPublishFailuresError(count=count, errors=errors)
