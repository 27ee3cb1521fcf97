"""Where a subscription starts and stops.

``StartAt`` and ``StopAt`` are immutable values built with class methods (built
directly, they check their fields the same way)::

    client.subscribe("orders", start=StartAt.earliest(), stop=StopAt.latest())
    client.subscribe("orders", start=StartAt.time_delta(3600))   # the last hour
    client.subscribe("orders", start=StartAt.cursor("billing"))  # after a stored cursor

Timestamps are accepted as aware (or local naive) datetimes or as Unix nanoseconds.
The class methods refuse an argument of a wrong type with
:class:`~liftbridge_sync.errors.ArgumentTypeError` and a value out of range with
:class:`~liftbridge_sync.errors.ConfigurationError`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from datetime import datetime

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._ids import check_id
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.models import ns_from_datetime

__all__ = ["StartAt", "StartKind", "StopAt", "StopKind"]

#: The wire's offsets and nanosecond timestamps are int64.
_INT64_MAX = 2**63 - 1
#: The longest time delta: what Unix nanoseconds in an int64 can hold (~292 years).
_MAX_DELTA_SECONDS = float(_INT64_MAX) / 1e9


class StartKind(enum.Enum):
    """How a :class:`StartAt` picks the first offset."""

    NEW_ONLY = "new_only"
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    TIME_DELTA = "time_delta"
    CURSOR = "cursor"


class StopKind(enum.Enum):
    """How a :class:`StopAt` picks the last offset."""

    OFFSET = "offset"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


def _to_ns(value: datetime | int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, datetime | int):
        raise ArgumentTypeError(
            f"{what} must be a datetime or Unix nanoseconds (int), got {type(value).__name__}"
        )
    try:
        ns = ns_from_datetime(value) if isinstance(value, datetime) else value
    except (ValueError, OverflowError, OSError):
        # A naive datetime is taken as local time, and the platform's conversion fails
        # near the ends of datetime's range (datetime(1, 1, 1): "year 0 is out of range").
        # Near the start of datetime's range that is before 1970, as the rest say.
        early = isinstance(value, datetime) and value.year < 1970
        raise ConfigurationError(
            f"{what} must not be before 1970" if early else f"{what} {value} is out of range"
        ) from None
    if ns < 0:
        raise ConfigurationError(f"{what} must not be before 1970")
    if ns > _INT64_MAX:  # the wire's int64 nanoseconds end in April 2262
        raise ConfigurationError(f"{what} must not be after 2262-04-11 (int64 nanoseconds)")
    return ns


def _check_ns(ns: int, what: str) -> int:
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise ArgumentTypeError(f"{what} must be Unix nanoseconds (int), got {type(ns).__name__}")
    if not 0 <= ns <= _INT64_MAX:
        raise ConfigurationError(f"{what} must be between 0 and {_INT64_MAX} ns, got {ns}")
    return ns


def _check_offset(offset: int, what: str) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ArgumentTypeError(f"{what} must be an int, got {type(offset).__name__}")
    if not 0 <= offset <= _INT64_MAX:
        raise ConfigurationError(f"{what} must be between 0 and {_INT64_MAX}, got {offset}")
    return offset


@dataclasses.dataclass(frozen=True, slots=True)
class StartAt:
    """Where a subscription begins.

    Immutable; safe to share between threads and to pickle.
    """

    kind: StartKind
    #: Offset for ``StartKind.OFFSET``.
    at_offset: int = 0
    #: Unix nanoseconds for ``StartKind.TIMESTAMP``.
    at_timestamp_ns: int = 0
    #: Seconds back from subscribe time for ``StartKind.TIME_DELTA``.
    delta_seconds: float = 0.0
    #: Cursor id for ``StartKind.CURSOR``.
    cursor_id: str = ""

    def __post_init__(self) -> None:
        # Built directly, not by a class method: the same checks, before the wire.
        if not isinstance(self.kind, StartKind):
            raise ArgumentTypeError(f"kind must be a StartKind, got {self.kind!r}")
        _check_offset(self.at_offset, "start offset")
        _check_ns(self.at_timestamp_ns, "start timestamp")
        delta = self.delta_seconds
        if isinstance(delta, bool) or not isinstance(delta, int | float):
            raise ArgumentTypeError(
                f"delta_seconds must be a number of seconds, got {type(delta).__name__}"
            )
        if not delta >= 0:  # NaN too
            raise ConfigurationError(f"delta_seconds must be >= 0, got {delta!r}")
        if _MAX_DELTA_SECONDS < delta < math.inf:  # as time_delta() refuses it
            raise ConfigurationError(
                f"delta_seconds must be at most {_MAX_DELTA_SECONDS:g} (what Unix "
                f"nanoseconds hold), or inf for every message; got {delta!r}"
            )
        if not isinstance(self.cursor_id, str):
            raise ArgumentTypeError(f"cursor_id must be a str, got {type(self.cursor_id).__name__}")
        if self.kind is StartKind.CURSOR:
            # The subscription's own check, at once: a bad id is the caller's mistake here.
            check_id("cursor_id", self.cursor_id)

    @classmethod
    def new_only(cls) -> StartAt:
        """Only messages published after the subscription starts (the server default)."""
        return cls(StartKind.NEW_ONLY)

    @classmethod
    def earliest(cls) -> StartAt:
        """The oldest retained message."""
        return cls(StartKind.EARLIEST)

    @classmethod
    def latest(cls) -> StartAt:
        """The newest message at subscribe time (then everything after it)."""
        return cls(StartKind.LATEST)

    @classmethod
    def offset(cls, offset: int) -> StartAt:
        """A given offset; below the oldest retained offset reading starts at the oldest."""
        return cls(StartKind.OFFSET, at_offset=_check_offset(offset, "start offset"))

    @classmethod
    def timestamp(cls, when: datetime | int) -> StartAt:
        """The first message received at or after ``when`` (datetime or Unix ns)."""
        return cls(StartKind.TIMESTAMP, at_timestamp_ns=_to_ns(when, "start timestamp"))

    @classmethod
    def time_delta(cls, seconds: float) -> StartAt:
        """Messages received in the last ``seconds``, counted from subscribe time.

        ``inf`` means every message (from the Unix epoch on); anything further back than
        the epoch starts there too.

        Raises:
            ConfigurationError: NaN, negative, or beyond what Unix nanoseconds can hold
                (about 292 years); ``ArgumentTypeError`` for a non-number.
        """
        delta = check_seconds("time_delta seconds", seconds, maximum=_MAX_DELTA_SECONDS)
        return cls(StartKind.TIME_DELTA, delta_seconds=math.inf if delta is None else delta)

    @classmethod
    def cursor(cls, cursor_id: str) -> StartAt:
        """Resume after the offset stored under ``cursor_id`` (earliest when none is stored).

        The cursor holds the last processed offset (Go client semantics), so reading
        resumes at cursor + 1. A cursor past the partition's newest offset (a stream
        deleted and created again under its name: v1.9.0 keeps its cursors) counts as
        none stored, with a WARNING.

        Raises:
            ArgumentTypeError: ``cursor_id`` is no ``str``.
            ConfigurationError: an id the server could not keep apart from another
                (empty, blank, with a comma or a control character, over 1 KiB).
        """
        return cls(StartKind.CURSOR, cursor_id=cursor_id)

    def resolve_timestamp_ns(self) -> int:
        """The start time in Unix ns for TIMESTAMP and TIME_DELTA positions."""
        if self.kind is StartKind.TIME_DELTA:
            delta = self.delta_seconds
            if delta > _MAX_DELTA_SECONDS:  # inf: every message
                return 0
            return max(0, time.time_ns() - int(delta * 1_000_000_000))
        return self.at_timestamp_ns

    def pinned(self) -> StartAt:
        """This position with a time-delta start fixed to one timestamp, taken now
        (itself for every other kind): what resolves it once for all its uses, where
        each use resolving it would start milliseconds apart."""
        if self.kind is StartKind.TIME_DELTA:
            return StartAt.timestamp(self.resolve_timestamp_ns())
        return self


@dataclasses.dataclass(frozen=True, slots=True)
class StopAt:
    """Where a subscription ends; the iterator then finishes with ``StopIteration``.

    Immutable; safe to share between threads and to pickle.
    """

    kind: StopKind
    #: Inclusive stop offset for ``StopKind.OFFSET``.
    at_offset: int = 0
    #: Unix nanoseconds for ``StopKind.TIMESTAMP``.
    at_timestamp_ns: int = 0

    def __post_init__(self) -> None:
        # Built directly, not by a class method: the same checks, before the wire.
        if not isinstance(self.kind, StopKind):
            raise ArgumentTypeError(f"kind must be a StopKind, got {self.kind!r}")
        _check_offset(self.at_offset, "stop offset")
        _check_ns(self.at_timestamp_ns, "stop timestamp")

    @classmethod
    def offset(cls, offset: int) -> StopAt:
        """Stop after the last message at or before ``offset`` (inclusive).

        The offset need not exist: compaction or retention may have removed it, and a
        later offset is then never delivered. An offset not written yet is waited for.
        """
        return cls(StopKind.OFFSET, at_offset=_check_offset(offset, "stop offset"))

    @classmethod
    def latest(cls) -> StopAt:
        """Stop after the newest message present at subscribe time."""
        return cls(StopKind.LATEST)

    @classmethod
    def timestamp(cls, when: datetime | int) -> StopAt:
        """Stop after the last message received at or before ``when``.

        Of the messages present at subscribe time: a ``when`` in the future stops at
        the newest message then, as ``latest()`` does.
        """
        return cls(StopKind.TIMESTAMP, at_timestamp_ns=_to_ns(when, "stop timestamp"))
