"""Ack deadlines of the NATS publisher: one hashed timer wheel driven by one loop timer.

No thread or timer object per message: each written job that waits for an ack has a
wheel entry, and a single ``call_later`` on the event loop fires at the earliest one.
"""

from __future__ import annotations

import asyncio
import math
import time

from liftbridge_sync._runtime.timerwheel import TimerWheel
from liftbridge_sync.nats._ledger import Ledger
from liftbridge_sync.nats._outcomes import timed_out
from liftbridge_sync.nats._support import Job, settle

__all__ = ["AckDeadlines"]


class AckDeadlines:
    """Fail written jobs whose ack did not come by their deadline.

    Args:
        ledger: The publisher's jobs; an expired job stops awaiting its ack there.

    Not thread-safe: only the ``liftbridge-nats`` thread (the event loop's) uses it.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._wheel: TimerWheel[Job] = TimerWheel(tick=0.01, slots=1024, now=time.monotonic())
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def schedule(self, job: Job) -> None:
        """Give ``job`` its ack timer (it is about to be written); call :meth:`arm` after."""
        job.handle = self._wheel.schedule(job.deadline, job)

    def cancel(self, job: Job) -> None:
        """Drop ``job``'s ack timer, if it has one."""
        if job.handle is not None:
            self._wheel.cancel(job.handle)

    def arm(self) -> None:
        """Set the loop timer to the earliest deadline (none left: no timer)."""
        next_deadline = self._wheel.next_deadline()
        if next_deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_at = math.inf
            return
        if self._timer is not None and self._timer_at <= next_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, next_deadline - time.monotonic()), self._fire)
        self._timer_at = next_deadline

    def clear(self) -> None:
        """Drop every timer (the shutdown settles the jobs itself)."""
        self._wheel.pop_all()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = math.inf

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        for job in self._wheel.advance(time.monotonic()):
            # The entry is this job's own: a later publish reusing its id keeps its entry.
            self._ledger.forget(job)
            settle(job.future, error=timed_out(job))
        self.arm()
