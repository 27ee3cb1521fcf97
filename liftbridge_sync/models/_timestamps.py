"""Wire timestamps: Unix nanoseconds to aware datetimes and back.

Pure functions; thread-safe.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["datetime_from_ns", "ns_from_datetime"]

_NS_PER_SECOND = 1_000_000_000


def datetime_from_ns(ns: int) -> datetime | None:
    """Convert Unix nanoseconds to an aware UTC datetime; ``0`` (unset) gives ``None``."""
    if not ns:
        return None
    seconds, remainder = divmod(ns, _NS_PER_SECOND)
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=remainder // 1000)


def ns_from_datetime(value: datetime) -> int:
    """Convert a datetime to Unix nanoseconds; naive datetimes are taken as local time."""
    if value.tzinfo is None:
        value = value.astimezone()
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _NS_PER_SECOND + delta.microseconds * 1000
