"""Where a consumer dropped without close() waits to be closed.

Thread-safe as :class:`Dropped` says.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Protocol

from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.errors import ClientClosedError

__all__ = ["Dropped"]

_log = logging.getLogger("liftbridge_sync.consumer")


class _Member(Protocol):
    """What :class:`Dropped` needs of a consumer."""

    _core: ClientCore

    @property
    def _who(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


class Dropped:
    """Where a consumer dropped without close() waits to be closed.

    Its ``__del__`` puts it here (:meth:`put`: no lock, no thread); the heartbeat
    thread closes it before its next poll (:meth:`tend`), or ``Client.close()`` does
    first (:meth:`close`: the client holds this weakly, the heartbeat thread strongly).
    Otherwise the member would stay in its group, holding partitions nobody reads, and
    its threads outlive ``Client.close()`` by up to a heartbeat interval.

    Thread-safe: the consumer is taken out by one atomic ``popleft``; whoever takes it
    closes it.
    """

    close_accepts_timeout = False
    close_rank = 1  # as the consumer's own (see ConsumerGroup.close_rank)

    def __init__(self) -> None:
        self._queue: collections.deque[_Member] = collections.deque()
        #: The consumer's heartbeat thread, and how long its close() may take.
        self._heartbeat: threading.Thread | None = None
        self._bound = 0.0
        #: Set once a consumer was taken out to be closed.
        self._taken = False

    def watch(self, heartbeat: threading.Thread, bound: float) -> None:
        """The heartbeat thread :meth:`close` joins while it closes a dropped consumer."""
        self._heartbeat, self._bound = heartbeat, bound

    def put(self, consumer: _Member) -> None:
        """Hand over ``consumer``, collected without close() (its ``__del__``)."""
        self._queue.append(consumer)  # atomic: the collector may hold any lock

    def _take(self) -> _Member | None:
        try:
            consumer = self._queue.popleft()
        except IndexError:
            return None
        if consumer.closed:
            return None  # closed meanwhile: the client still held it (no cycle)
        self._taken = True
        _log.warning("consumer %s: dropped without close(): closing", consumer._who)
        return consumer

    def tend(self) -> None:
        """Close the consumer handed over, if any (the heartbeat thread, before a poll).

        Registered again first: the collector may have taken it off the client, whose
        close() then waits for this one instead of ending before it.
        """
        consumer = self._take()
        if consumer is None:
            return
        try:
            consumer._core.register(consumer)
        except ClientClosedError:
            return  # closed by register(), as by Client.close()
        consumer.close()

    def close(self) -> None:
        """``Client.close()``: close the consumer handed over and join its threads; if
        its heartbeat thread is closing it already, wait for that to end."""
        consumer = self._take()
        if consumer is not None:
            consumer.close()
            return
        heartbeat = self._heartbeat
        if self._taken and heartbeat is not None and heartbeat is not threading.current_thread():
            heartbeat.join(self._bound)
