"""A hashed timer wheel for ack timeouts.

The publisher's owner thread keeps one entry per in-flight publish and fails the
futures whose ack never comes. There is no thread and no ``threading.Timer`` per entry:
the owner calls :meth:`TimerWheel.advance` whenever it wakes, and sleeps at most until
:meth:`TimerWheel.next_deadline`.

Time is cut into ticks of ``tick`` seconds; an entry lives in the bucket of its tick
modulo ``slots``. Entries more than one revolution ahead share buckets with nearer ones
and are simply skipped until their own tick comes round. Expiry compares the exact
deadline, so the tick size affects only cost, never correctness: nothing expires
before its deadline and everything due is returned by the next ``advance``.
"""

from __future__ import annotations

import math
from typing import Generic, TypeVar

__all__ = ["TimerHandle", "TimerWheel"]

T = TypeVar("T")


class TimerHandle(Generic[T]):
    """A scheduled entry, as returned by :meth:`TimerWheel.schedule`; pass it to ``cancel``.

    Not thread-safe; owned by the thread that owns its wheel.
    """

    __slots__ = ("_pending", "_seq", "_tick", "_wheel", "deadline", "item")

    deadline: float
    item: T
    _seq: int
    _tick: int
    _pending: bool
    _wheel: TimerWheel[T]

    def __init__(self, wheel: TimerWheel[T], deadline: float, item: T, seq: int, tick: int):
        self._wheel = wheel
        self.deadline = deadline
        self.item = item
        self._seq = seq
        self._tick = tick
        self._pending = True

    @property
    def pending(self) -> bool:
        """Whether the entry has neither expired nor been cancelled."""
        return self._pending

    def __repr__(self) -> str:
        state = "pending" if self._pending else "done"
        return f"<TimerHandle deadline={self.deadline!r} {state} item={self.item!r}>"


class TimerWheel(Generic[T]):
    """Deadlines for many items, expired in deadline order by an owner thread.

    Args:
        tick: Width of a bucket in seconds of the caller's clock.
        slots: Number of buckets; one revolution covers ``tick * slots`` seconds.
        now: The clock reading at creation (the wheel's time origin).

    ``schedule`` and ``cancel`` are O(1); ``advance`` costs the number of ticks elapsed
    (at most ``slots`` buckets) plus the entries in the buckets it visits. The clock is
    whatever the owner passes in (normally ``time.monotonic()``); an ``advance`` with an
    earlier ``now`` than before is treated as the latest ``now`` seen.

    Not thread-safe; owned by one thread.
    """

    __slots__ = (
        "_buckets",
        "_current",
        "_hint",
        "_len",
        "_now",
        "_origin",
        "_seq",
        "_slots",
        "_tick_width",
    )

    _buckets: list[dict[int, TimerHandle[T]]]
    _origin: float
    _tick_width: float
    _slots: int
    _now: float
    _current: int
    _hint: int
    _seq: int
    _len: int

    def __init__(self, tick: float = 0.01, slots: int = 512, now: float = 0.0) -> None:
        if not (math.isfinite(tick) and tick > 0):
            raise ValueError(f"tick must be a positive number of seconds, got {tick!r}")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        if not math.isfinite(now):
            raise ValueError(f"now must be finite, got {now!r}")
        self._buckets = [{} for _ in range(slots)]
        self._origin = now
        self._tick_width = tick
        self._slots = slots
        self._now = now
        # Invariants: every pending entry has _current <= _hint <= _tick, where _current
        # is the tick of _now. An entry's deadline <= now implies its _tick <= tick of now.
        self._current = 0
        self._hint = 0
        self._seq = 0
        self._len = 0

    @property
    def tick(self) -> float:
        """Width of a bucket in seconds."""
        return self._tick_width

    @property
    def slots(self) -> int:
        """Number of buckets."""
        return self._slots

    @property
    def now(self) -> float:
        """The latest ``now`` passed to :meth:`advance` (or the creation time)."""
        return self._now

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"<TimerWheel tick={self._tick_width!r} slots={self._slots} "
            f"pending={self._len} now={self._now!r}>"
        )

    def _tick_of(self, t: float) -> int:
        return math.floor((t - self._origin) / self._tick_width)

    def schedule(self, deadline: float, item: T) -> TimerHandle[T]:
        """Add ``item`` to expire at ``deadline``.

        Args:
            deadline: When the item is due, in the clock's seconds. A deadline at or
                before the wheel's current time expires at the next :meth:`advance`.
            item: Anything; returned by :meth:`advance` when due.

        Returns:
            The handle to :meth:`cancel` the entry with.

        Raises:
            ValueError: ``deadline`` is NaN or infinite.
        """
        if not math.isfinite(deadline):
            raise ValueError(f"deadline must be finite, got {deadline!r}")
        tick = max(self._tick_of(deadline), self._current)
        seq = self._seq
        self._seq = seq + 1
        handle = TimerHandle(self, deadline, item, seq, tick)
        self._buckets[tick % self._slots][seq] = handle
        self._len += 1
        if tick < self._hint:
            self._hint = tick
        return handle

    def cancel(self, handle: TimerHandle[T]) -> bool:
        """Remove a pending entry. Idempotent.

        Returns:
            ``True`` if the entry was pending (it will not expire), ``False`` if it had
            already expired or been cancelled, or belongs to another wheel.
        """
        if not handle._pending or handle._wheel is not self:
            return False
        handle._pending = False
        del self._buckets[handle._tick % self._slots][handle._seq]
        self._len -= 1
        return True

    def advance(self, now: float) -> list[T]:
        """Move the wheel's time to ``now`` and remove every entry due by then.

        Args:
            now: The current clock reading.

        Returns:
            The items whose deadline is ``<= now``, each exactly once, in deadline order
            (equal deadlines in scheduling order).
        """
        if now > self._now:
            self._now = now
        now = self._now
        target = self._tick_of(now)  # >= self._current: now never decreases
        expired: list[TimerHandle[T]] = []
        if self._len:
            start = self._hint
            for tick in range(start, min(target + 1, start + self._slots)):
                bucket = self._buckets[tick % self._slots]
                if not bucket:
                    continue
                due = [h for h in bucket.values() if h.deadline <= now]
                for handle in due:
                    del bucket[handle._seq]
                    handle._pending = False
                expired.extend(due)
            self._len -= len(expired)
        self._current = target
        if self._hint < target:
            self._hint = target
        if len(expired) > 1:
            expired.sort(key=_order)
        return [handle.item for handle in expired]

    def next_deadline(self) -> float | None:
        """When the owner should next call :meth:`advance`.

        Returns:
            ``None`` when nothing is pending; otherwise a time that is never later than
            the earliest pending deadline. It is that deadline exactly when it lies
            within one revolution, else an earlier bound about a revolution ahead.
        """
        if not self._len:
            return None
        start = self._hint
        for tick in range(start, start + self._slots):
            bucket = self._buckets[tick % self._slots]
            if not bucket:
                continue
            deadlines = [h.deadline for h in bucket.values() if h._tick == tick]
            if deadlines:
                self._hint = tick
                return min(deadlines)
        # Nothing within a revolution: every entry has _tick >= start + slots.
        self._hint = start + self._slots
        return self._origin + (start + self._slots - 1) * self._tick_width

    def pop_all(self) -> list[T]:
        """Remove every pending entry (for shutdown).

        Returns:
            The items in deadline order (equal deadlines in scheduling order).
        """
        handles = [h for bucket in self._buckets for h in bucket.values()]
        for bucket in self._buckets:
            bucket.clear()
        for handle in handles:
            handle._pending = False
        self._len = 0
        handles.sort(key=_order)
        return [handle.item for handle in handles]


def _order(handle: TimerHandle[T]) -> tuple[float, int]:
    return (handle.deadline, handle._seq)
