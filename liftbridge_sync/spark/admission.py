"""Admission control: how far a micro-batch may read, and whether it may start yet.

``maxOffsetsPerTrigger`` caps a micro-batch (:func:`cap_offsets`);
``minOffsetsPerTrigger`` with ``maxTriggerDelay`` holds one back (:class:`TriggerDelay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["TriggerDelay", "cap_offsets"]


def cap_offsets(start: Mapping[int, int], latest: Mapping[int, int], budget: int) -> dict[int, int]:
    """End offsets that read at most ``budget`` offsets in all from ``start``.

    Like the Kafka connector, the budget is split across partitions in proportion to
    what each has available, and no partition with offsets is starved: the rounding
    remainder goes first to those whose share rounded down to nothing, then to the
    lowest partition ids. (Kafka's gives each of them one offset beyond the budget.)
    Partitions missing from ``start`` start at 0. Never returns less than ``start``.
    Pure function; thread-safe.
    """
    begin = {p: start.get(p, 0) for p in latest}
    available = {p: max(latest[p] - begin[p], 0) for p in latest}
    total = sum(available.values())
    if total <= budget:
        return {p: max(latest[p], begin[p]) for p in latest}
    share = {p: budget * available[p] // total for p in latest}
    left = budget - sum(share.values())
    # A small partition's share rounds down to 0 for as long as a big one has a
    # backlog: it would get nothing until then.
    for p in sorted(latest, key=lambda p: (share[p] > 0, p)):
        if left <= 0:
            break
        extra = min(available[p] - share[p], left)
        share[p] += extra
        left -= extra
    return {p: begin[p] + share[p] for p in latest}


class TriggerDelay:
    """Kafka's ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` rule for one query.

    A micro-batch is held back while fewer than ``min_offsets`` offsets are available
    and less than ``max_delay`` seconds passed since the last micro-batch was let
    through. As Kafka's, the first look after the query (re)started lets one through,
    so a restarted query does not sit idle up to ``max_delay`` with offsets waiting.
    Letting one through restarts the clock.

    Not thread-safe; Spark asks from one thread.
    """

    def __init__(self, min_offsets: int, max_delay: float, clock: Callable[[], float]) -> None:
        self._min = min_offsets
        self._max_delay = max_delay
        self._clock = clock
        self._last: float | None = None  # no micro-batch let through yet

    def hold(self, start: Mapping[int, int], latest: Mapping[int, int]) -> bool:
        """Whether to hold the next micro-batch back (``True``) or let it through."""
        now = self._clock()
        if self._last is None or now - self._last >= self._max_delay:
            self._last = now
            return False
        available = sum(max(latest[p] - start.get(p, 0), 0) for p in latest)
        if available < self._min:
            return True
        self._last = now
        return False
