"""Waiting on the publisher: for a future, a batch of futures, a free slot, a flush.

A thread that waits blocks on a gate of its own, listed with what it waits for (a free
slot, a flush, a batch's last future), or set on the future it waits for (``publish``:
:func:`~.futures.wait_gated`), and is woken only once what it waits for holds: the
threads that resolve publishes check each waiter's condition before opening its gate.
On the publisher thread (a done-callback that waits) waiting means processing events
meanwhile instead (:meth:`~.owner.OwnerLoop.run_nested`), or the thread that frees
slots and resolves futures would stop. ``publish()`` callers waiting for a free slot
wait in a line served first (:class:`Waiters`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence

from liftbridge_sync._publishing.futures import PublishFuture, wait_gated
from liftbridge_sync._publishing.gates import Gate, GateLike
from liftbridge_sync._publishing.owner import OwnerLoop
from liftbridge_sync._publishing.pending import AckFuture, FailureLedger
from liftbridge_sync._publishing.table import PendingTable
from liftbridge_sync.errors import (
    ClientClosedError,
    LiftbridgeError,
    PublishQueueFullError,
    UnobservedPublishFailuresError,
    WaitTimeoutError,
)
from liftbridge_sync.models import Ack

__all__ = ["Turn", "Waiters", "Waiting"]


#: Longest wait for the owner thread to finish its turn before a flush counts failures.
_BARRIER_WAIT = 1.0


class Turn:
    """A thread's place in the line for free slots (:meth:`Waiters.join`): the gate it
    sleeps on, and whether that gate was opened. Changed under the line's lock only."""

    __slots__ = ("gate", "opened")

    def __init__(self) -> None:
        self.gate: GateLike = Gate()
        self.opened = False


class Waiters:
    """Threads blocked until a condition holds (a flush, a batch), and the line of those
    waiting for a free slot (``max_in_flight``).

    Each of the first is listed as ``(condition, gate)``, blocked on its own
    :class:`~.gates.Gate`. Whoever changes what the conditions read calls :meth:`wake`,
    which releases the gates of those that now hold, so the many batches of acks that
    free nothing a waiter needs wake nobody, and one thread's batch done wakes that
    thread only.

    A ``publish()`` caller that finds no free slot joins the line for slots
    (:meth:`join`), served first and in arrival order: while anybody is in line no
    other publish takes a slot, however many are free (the table's ``in_line``: the C
    fast path, ``admit`` and ``enter`` look at it); ``publish_async`` and
    ``publish_batch`` callers wait until nobody is in line and a slot is free
    (:meth:`room_past_line`). A thread in line goes once more slots are free than
    threads are ahead of it, and takes only those past one for each of them: every
    thread let through finds its slot kept, however long it takes to get the GIL.
    Without the line, a thread flooding ``publish_async`` took the slots that freed
    while a woken ``publish()`` caller was still getting the GIL, again and again
    (seconds on end were seen). The bound the other way: ``publish()`` callers hold a
    slot each until their ack, so while fewer of them wait than ``max_in_flight`` the
    line empties with every batch of acks. Only ``publish()`` callers wait in line:
    lining up every publish would cost a thread switch per slot with many threads
    flooding (a third of the throughput). The one exception: a done-callback publishing
    on the publisher thread, which cannot sleep in line (it frees the slots), takes a
    free slot past it. Thread-safe.
    """

    def __init__(self, clock: Callable[[], float], table: PendingTable | None = None) -> None:
        self._clock = clock
        self._table = table
        #: Guards ``_waits`` and ``_line`` (and the turns in it).
        self._space = threading.Lock()
        self._waits: list[tuple[Callable[[], bool], GateLike]] = []
        #: Threads waiting for a free slot, in arrival order.
        self._line: collections.deque[Turn] = collections.deque()

    def wake(self) -> None:
        """Release the waiters whose condition now holds, and those in line for a slot
        that one is free for."""
        if self._waits or self._line:
            with self._space:
                self._open_ready()
                self._let_through()

    def _open_ready(self) -> None:
        """Release the waiters whose condition holds (under the lock)."""
        waits = self._waits
        for i in range(len(waits) - 1, -1, -1):
            ready, gate = waits[i]
            if ready():
                del waits[i]
                gate.open()

    def room_past_line(self) -> bool:
        """Whether a slot is free and nobody is in line for one (what a publish not in
        line waits for), or the publisher is closing (it fails then)."""
        table = self._table
        assert table is not None
        return table.closing or (not self._line and table.has_room())

    def wait_until(self, ready: Callable[[], bool], deadline: float | None) -> bool:
        """Block (not on the owner thread) until ``ready()``; False at ``deadline``.

        ``ready`` must be a cheap look at shared state that any thread may call: the
        threads that change that state call it too, and release this thread's gate
        only when it holds (:meth:`wake`).
        """
        while True:
            gate = Gate()
            entry = (ready, gate)
            with self._space:
                # Listed *before* the look at ``ready``, and whoever changes what it
                # reads looks at the list *after* the change: no wake-up is lost.
                self._waits.append(entry)
                if ready():
                    self._waits.remove(entry)
                    return True
            if not self._opened_by(gate, deadline):
                with self._space:
                    if entry in self._waits:
                        self._waits.remove(entry)
                return ready()
            if ready():
                return True
            # It held when the gate opened and no longer does: wait again.

    # -- the line for free slots -------------------------------------------------------

    def join(self) -> Turn:
        """Join the line for free slots (leave it with :meth:`leave`, always)."""
        turn = Turn()
        table = self._table
        assert table is not None, "Waiters: a line for slots needs the pending table"
        with self._space:
            self._line.append(turn)
            table.set_in_line(len(self._line))
        return turn

    def leave(self, turn: Turn) -> None:
        """Leave the line (the thread took its slots, or gives up); those behind move up."""
        table = self._table
        assert table is not None
        with self._space:
            self._line.remove(turn)
            table.set_in_line(len(self._line))
            self._let_through()
            if not self._line and self._waits:
                self._open_ready()  # those not in line may go now

    def wait_turn(self, turn: Turn, deadline: float | None, again: bool = False) -> int:
        """Block until more slots are free than threads are ahead of ``turn``; how many
        more (what it may take: the others are kept for those ahead), or 0 at
        ``deadline`` (it stays in line: the caller leaves). ``again``: the thread took
        slots on this turn already and wants more, so it goes to the back first."""
        if again:
            with self._space:
                self._line.remove(turn)
                self._line.append(turn)
                self._let_through()
        while True:
            with self._space:
                # Looked at under the lock that :meth:`wake` and :meth:`leave` take
                # after a change: a slot freed once this look is done opens the gate.
                allowed = self._allowed(turn)
                if allowed > 0:
                    return allowed
                if turn.opened:  # opened for a slot another took since: closed again
                    turn.gate = Gate()
                    turn.opened = False
                gate = turn.gate
            if not self._opened_by(gate, deadline):
                with self._space:
                    return max(0, self._allowed(turn))

    def _opened_by(self, gate: GateLike, deadline: float | None) -> bool:
        """Wait for ``gate`` to open until ``deadline`` (``None``: however long); whether
        it opened (not when ``deadline`` had passed already)."""
        if deadline is None:
            gate.wait()
            return True
        remaining = deadline - self._clock()
        return remaining > 0 and gate.wait(remaining)

    def _allowed(self, turn: Turn) -> int:
        """The free slots past one for each thread ahead of ``turn`` (under the lock)."""
        assert self._table is not None
        return self._table.free_slots() - self._line.index(turn)

    def _let_through(self) -> None:
        """Open the gates of the first threads in line, one per free slot (under the
        lock); those opened before and not yet gone count, each keeping its slot."""
        line = self._line
        if line:
            assert self._table is not None
            free = self._table.free_slots()
            for turn in line:
                if free <= 0:
                    break
                free -= 1
                if not turn.opened:
                    turn.opened = True
                    turn.gate.open()


class Waiting:
    """The publisher's waiting calls (see the module docstring). Thread-safe: each may be
    called from any thread, including a future's done-callback."""

    def __init__(
        self,
        table: PendingTable,
        loop: OwnerLoop,
        waiters: Waiters,
        ledger: FailureLedger,
        enqueue_timeout: float | None,
    ) -> None:
        self._table = table
        self._loop = loop
        self._waiters = waiters
        self._ledger = ledger
        self._enqueue_timeout = enqueue_timeout
        self._clock = table.clock
        #: ``publish()`` callers waiting for their acks now, and the lock guarding it.
        self._readers = 0
        self._readers_lock = threading.Lock()

    def check_can_wait(self) -> None:
        """Refuse, before anything is sent, a blocking call that could not wait here.

        A done-callback runs on the publisher thread; a blocking call there processes
        events while it waits, nesting one level per callback. Past the limit the call
        fails *before* its message is sent, so a failure never hides a stored message.

        Raises:
            PublishError: the nesting limit is reached.
        """
        self._loop.check_can_nest()

    def wait_for_space(
        self, line: bool = False, turn: Turn | None = None, again: bool = False
    ) -> tuple[Turn | None, int | None]:
        """Block until the caller may take a free slot (bounded by ``enqueue_timeout``).

        ``line``: a ``publish()`` caller, which waits in the line (:class:`Waiters`) on
        the ``turn`` it holds (``again``: it took slots on it, and goes to the back),
        else on a new one; others wait until a slot is free and nobody is in line. The
        caller's turn (to :meth:`leave` when done; None unless in line) and how many
        it may enter past those in line (``enter``'s ``limit``; None: none while any
        are). On the publisher thread, which takes a free slot past the line, there is
        no limit.

        Raises:
            PublishQueueFullError: no slot freed within the enqueue timeout (a turn
                passed in is still the caller's to leave; a new one has left).
        """
        enqueue_timeout = self._enqueue_timeout
        deadline = None if enqueue_timeout is None else self._clock() + enqueue_timeout
        waiters = self._waiters
        if self._loop.on_owner_thread():
            # A done-callback publishing: blocking here would stop the very thread that
            # frees slots, so keep processing events while waiting.
            if self._loop.run_nested(self._table.has_room, deadline):
                return None, self._table.max_in_flight
        elif not line:
            if waiters.wait_until(waiters.room_past_line, deadline):
                return None, None
        else:
            mine = turn if turn is not None else waiters.join()
            try:
                allowed = waiters.wait_turn(mine, deadline, again)
            except BaseException:
                if turn is None:
                    waiters.leave(mine)
                raise
            if allowed > 0:
                return mine, allowed
            if turn is None:
                waiters.leave(mine)
        raise PublishQueueFullError(
            f"{self._table.max_in_flight} publishes in flight and no slot freed within "
            f"{enqueue_timeout}s (max_in_flight / enqueue_timeout)"
        )

    def leave(self, turn: Turn) -> None:
        """Leave the line for slots (see :meth:`wait_for_space`)."""
        self._waiters.leave(turn)

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
        if self._loop.on_owner_thread() and not future.done():
            deadline = None if timeout is None else self._clock() + timeout
            self._loop.run_nested(future.done, deadline)
            if not future.done():
                raise WaitTimeoutError("publish did not complete in time")
        elif read_here and future._state != "FINISHED":
            lock = self._readers_lock
            with lock:
                self._readers += 1
                alone = self._readers == 1
            try:
                stream = self._table.live
                if alone and stream is not None:
                    # Only a caller waiting alone reads its own ack: with others
                    # waiting, the I/O thread hands their acks over together and they
                    # write their next requests together (combining, see the h2
                    # transport's writing); one of them reading would wake them one at
                    # a time, each writing alone, and the broker answering alone.
                    stream.answer_here(future.done)
                if timeout is None and isinstance(future, PublishFuture):
                    wait_gated(future)  # one gate of this thread's, no Condition
            finally:
                with lock:
                    self._readers -= 1
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
        if self._loop.on_owner_thread():
            self._loop.run_nested(future.done, None)
            return
        self._waiters.wait_until(future.done, None)  # the future's own deadline bounds it

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish submitted so far has resolved or failed.

        Raises:
            TimeoutError: if some are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: if, since the previous flush, failed
                futures were dropped without anybody having called ``result()`` or
                ``exception()`` on them (see :class:`~.pending.FailureLedger`).
        """
        table = self._table
        upto = table.last_seq

        def flushed() -> bool:
            return table.flushed(upto)

        if not flushed():
            deadline = None if timeout is None else self._clock() + timeout
            if self._loop.on_owner_thread():
                done = self._loop.run_nested(flushed, deadline)
            else:
                done = self._waiters.wait_until(flushed, deadline)
            if not done:
                left = table.left(upto)
                raise WaitTimeoutError(f"{left} publishes still pending after {timeout}s")
        if self._ledger.live:
            # The owner thread may still hold futures it has just failed (its locals
            # outlive waking us): one round trip through its inbox lets them go, so a
            # failure dropped unretrieved is counted by this flush, not the next one.
            self._loop.barrier(_BARRIER_WAIT)
        count, errors = self._ledger.take()
        if count:
            raise UnobservedPublishFailuresError(count=count, errors=errors)
