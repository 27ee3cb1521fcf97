"""Admission control: how far a micro-batch may read under ``maxOffsetsPerTrigger``."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["cap_offsets"]


def cap_offsets(start: Mapping[int, int], latest: Mapping[int, int], budget: int) -> dict[int, int]:
    """End offsets that read at most ``budget`` offsets in all from ``start``.

    Like the Kafka connector, the budget is split across partitions in proportion to
    what each has available; the rounding remainder goes to the lowest partition ids.
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
    for p in sorted(latest):
        if left <= 0:
            break
        extra = min(available[p] - share[p], left)
        share[p] += extra
        left -= extra
    return {p: begin[p] + share[p] for p in latest}
