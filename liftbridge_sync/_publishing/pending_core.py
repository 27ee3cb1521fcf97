"""The pending table's state and its send lock: a C type, or its pure-Python twin.

:class:`PyPendingCore` and ``_speedups.PendingCore`` (``_speedups_table.c``) have the
same interface; :data:`PendingCore` is the C one when the speedups are active. The
:class:`~.table.PendingTable` composes one and keeps the logic; the publish_async fast
path in C (``submit_plain``) works on the C struct directly, under its lock.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from liftbridge_sync._runtime.own_lock import OwnLock
from liftbridge_sync._wire import speedups

__all__ = ["INF", "PendingCore", "PendingCoreType", "PyPendingCore"]

INF = float("inf")


class PendingCoreType(Protocol):
    """What both implementations offer (see ``_speedups_table.c``)."""

    @property
    def pending(self) -> dict[str, Any]: ...
    @property
    def expiry(self) -> dict[float, collections.deque[Any]]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def id_prefix(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def max_message(self) -> int: ...

    live: Any
    outbound: Any
    sleep_until: float
    in_line: int
    closing: bool
    finished: bool

    def acquire(self, blocking: bool = True) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def next_seq(self) -> int: ...
    def next_id(self) -> int: ...


class PyPendingCore(OwnLock):
    """The pending table's state (the pure-Python twin of ``_speedups.PendingCore``).

    Thread-safe as the C type: the lock is the send lock; ``next_seq`` is called under
    it; the rest are single reads and writes.
    """

    __slots__ = (
        "_ids",
        "_seq",
        "pending",
        "expiry",
        "clock",
        "id_prefix",
        "max_in_flight",
        "max_message",
        "live",
        "outbound",
        "sleep_until",
        "in_line",
        "closing",
        "finished",
    )

    def __init__(
        self, max_in_flight: int, max_message: int, id_prefix: str, clock: Callable[[], float]
    ) -> None:
        if type(max_in_flight) is not int or type(max_message) is not int:
            raise TypeError("PendingCore: max_in_flight and max_message must be int")
        if not isinstance(id_prefix, str):
            raise TypeError("PendingCore: id_prefix must be str")
        if max_in_flight < 1 or max_message < 0:
            raise ValueError("PendingCore: max_in_flight >= 1, max_message >= 0")
        if not callable(clock):
            raise TypeError("PendingCore: clock must be callable")
        super().__init__()
        self._ids = itertools.count()
        self._seq = 0
        self.pending: dict[str, Any] = {}
        self.expiry: dict[float, collections.deque[Any]] = {}
        self.clock = clock
        self.id_prefix = id_prefix
        self.max_in_flight = max_in_flight
        self.max_message = max_message
        self.live: Any = None
        self.outbound: Any = None
        self.sleep_until = INF
        #: Threads in line for a free slot (:class:`~.waiting.Waiters`): while any
        #: are, a new publish takes no slot past them.
        self.in_line = 0
        self.closing = False
        self.finished = False

    @property
    def seq(self) -> int:
        return self._seq

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def next_id(self) -> int:
        return next(self._ids)  # itertools.count: one atomic step, from any thread


PendingCore: Callable[[int, int, str, Callable[[], float]], PendingCoreType] = (
    speedups.PendingCore if speedups.PendingCore is not None else PyPendingCore
)
