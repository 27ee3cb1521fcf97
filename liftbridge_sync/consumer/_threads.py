"""A consumer's own threads (the heartbeat and the commit thread) and how close() ends
them.

Thread-safe as :class:`Threads` says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Threads"]

_log = logging.getLogger("liftbridge_sync.consumer")


class Threads:
    """The ``liftbridge-consumer-*`` threads of one consumer, and its first close().

    Attributes:
        stop: Set by close(): the readers and the commit thread end.
        stop_polling: Set by close() once the final commit is made: the heartbeat
            ends. Polling goes on until then, or a close() that waited for a commit
            stuck on a hung cursor leader found the coordinator "silent" and withheld
            the final commit.
        heartbeat: The heartbeat thread, once started.

    Thread-safe: threads are started by the joining thread before the consumer is
    handed out; :meth:`closing` is called under the consumer's lock, once.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.stop_polling = threading.Event()
        self.heartbeat: threading.Thread | None = None
        #: Every thread started (only once started: close() joins it).
        self.started: list[threading.Thread] = []
        #: The thread of the first close(), and set once it ended: a second close()
        #: waits for it.
        self._closer: threading.Thread | None = None
        self._close_done = threading.Event()

    def start(
        self, name: str, target: Callable[[], None], *, heartbeat: bool = False
    ) -> threading.Thread:
        """Start a daemonic thread ``name`` running ``target``.

        Raises:
            RuntimeError: if no thread could be started.
        """
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self.started.append(thread)
        if heartbeat:
            self.heartbeat = thread
        return thread

    def closing(self) -> None:
        """The first close() begins, on this thread (under the consumer's lock)."""
        self._closer = threading.current_thread()

    def closed(self) -> None:
        """The first close() ended: a second one waiting for it returns."""
        self._close_done.set()

    def wait_for_close(self, bound: float, who: str) -> None:
        """A second close(): wait for the first to end, so that the member has left the
        group when this one returns too; at most ``bound`` seconds (as long as a first
        close() takes with every call it makes timing out; then a WARNING). Not on the
        thread of the first close() or on one of the threads it joins: that wait would
        hold it up."""
        current = threading.current_thread()
        if current is self._closer or current in self.started:
            return
        if not self._close_done.wait(bound):
            _log.warning(
                "consumer %s: close() returns without waiting longer than %.1fs for "
                "another thread's close() to end",
                who,
                bound,
            )

    def join_others(self, deadline: float) -> list[str]:
        """Join every thread but the heartbeat and the calling one by ``deadline`` (a
        ``time.monotonic()``); the names of those still running."""
        current = threading.current_thread()
        running = []
        for thread in self.started:
            if thread is not current and thread is not self.heartbeat:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    running.append(thread.name)
        return running

    def end_heartbeat(self, deadline: float) -> list[str]:
        """Stop the heartbeat and join it by ``deadline`` unless it is the calling
        thread; its name if it still runs."""
        self.stop_polling.set()
        heartbeat = self.heartbeat
        if heartbeat is None or heartbeat is threading.current_thread():
            return []
        heartbeat.join(max(0.0, deadline - time.monotonic()))
        return [heartbeat.name] if heartbeat.is_alive() else []
