"""One shared timer thread per client, for timeouts of blocking subscription reads.

A subscription reads its gRPC stream on the caller's thread, and a blocked ``next()``
on a gRPC call has no timeout of its own; the only way to bound it is to cancel the call
from elsewhere. Rather than a thread per subscription, every subscription of a client
shares this one lazily started thread, which runs short callbacks (``call.cancel()``)
at their deadlines. It also looks for whole-stream subscriptions dropped without close()
(see :mod:`liftbridge_sync.subscription.stream`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from liftbridge_sync.errors import ClientClosedError, InternalThreadError

__all__ = ["THREAD_NAME", "Scheduler", "TimerHandle"]

THREAD_NAME = "liftbridge-timer"

#: Entries the heap may hold before cancelled ones are first swept out; after a sweep,
#: the next comes once the heap has doubled (an amortized O(1) a timer).
_SWEEP_AT_LEAST = 256

_log = logging.getLogger("liftbridge_sync.subscription")


class TimerHandle:
    """A scheduled callback; :meth:`cancel` stops it from running.

    Thread-safe.
    """

    __slots__ = ("deadline", "callback", "cancelled", "fired")

    def __init__(self, deadline: float, callback: Callable[[], object]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False
        self.fired = False

    def cancel(self) -> bool:
        """Prevent the callback from running; returns ``False`` if it already ran."""
        # Lazy removal: the scheduler skips cancelled entries when they reach the top,
        # so cancelling costs no lock and no heap reordering. The entry waits there
        # until its deadline (``rpc_timeout`` for most): it must not keep the callback,
        # and through it a call with its buffers, alive that long.
        self.cancelled = True
        self.callback = _nothing
        return not self.fired


def _nothing() -> None:
    """What a cancelled handle runs instead of its callback (it has let go of it)."""


class Scheduler:
    """Runs callbacks at deadlines on one daemon thread named ``liftbridge-timer``.

    The thread starts on the first :meth:`call_later` and is stopped and joined by
    :meth:`close`. Callbacks must be short; one that raises is logged and the thread
    goes on. Cancelled timers are swept out of the heap as it grows, so it holds
    at most about twice the live ones (a subscription read with a stop offset, or with
    a timeout on the ``"grpc"`` transport, arms one or two a message). Thread-safe.
    """

    close_accepts_timeout = True
    #: Closed last by the client (see ``ClientCore.close``): what closes before may use it.
    close_rank = 3

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: The heap length at which cancelled entries are swept out next.
        self._sweep_at = _SWEEP_AT_LEAST

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        """Run ``callback`` on the timer thread after ``delay`` seconds.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        handle = TimerHandle(time.monotonic() + max(delay, 0.0), callback)
        with self._cond:
            if self._closed:
                raise ClientClosedError("client is closed")
            if self._thread is not None and not self._thread.is_alive():
                raise InternalThreadError(
                    f"the {THREAD_NAME} thread died, so timeouts can no longer be kept; "
                    "close the client and create a new one"
                )
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
            if len(self._heap) >= self._sweep_at:
                self._sweep()
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (handle.deadline, next(self._seq), handle))
            # Only a new earliest deadline changes how long the thread must sleep.
            if earliest is None or handle.deadline < earliest:
                self._cond.notify()
        return handle

    def _sweep(self) -> None:
        """Drop cancelled entries (called with the lock held).

        Without this, every cancelled timer stayed until its deadline came: a reader
        arming timers faster than ``rpc_timeout`` lets them expire grew the heap by
        thousands of entries a second.
        """
        heap = [entry for entry in self._heap if not entry[2].cancelled]
        heapq.heapify(heap)
        self._heap = heap
        self._sweep_at = max(_SWEEP_AT_LEAST, 2 * len(heap))

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._next_due()
                if due is None:
                    return
            callback = due.callback  # read before the check: cancel() replaces it
            if not due.cancelled:
                due.fired = True
                try:
                    callback()
                except Exception:  # one bad callback must not stop every other timeout
                    _log.exception("a timer callback failed")

    def _next_due(self) -> TimerHandle | None:
        # Called with the lock held; returns None once closed.
        while not self._closed:
            if not self._heap:
                self._cond.wait()
                continue
            deadline, _, handle = self._heap[0]
            if handle.cancelled:
                heapq.heappop(self._heap)
                continue
            wait = deadline - time.monotonic()
            if wait <= 0:
                heapq.heappop(self._heap)
                return handle
            self._cond.wait(wait)
        return None

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread (pending callbacks are dropped) and join it. Idempotent."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
