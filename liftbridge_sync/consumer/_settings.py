"""A consumer's arguments, checked: what :meth:`Client.consumer` was given.

Thread-safe: :class:`Settings` is immutable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from liftbridge_sync._durations import check_seconds
from liftbridge_sync._wire.validate import (
    check_bool,
    check_id,
    check_int,
    check_label,
    check_name,
)
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.positions import StartAt, StartKind

__all__ = ["Settings"]

_START_KINDS = (StartKind.EARLIEST, StartKind.LATEST, StartKind.NEW_ONLY)


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """A consumer's checked arguments.

    Attributes:
        group: The group id.
        streams: The streams whose partitions the group spreads over its members.
        consumer_id: The member id the user chose, or ``None`` (one is generated).
        start: Where partitions without a committed cursor begin.
        auto_commit: Seconds between automatic commits, or ``None``: manual only.
        buffer: Messages buffered between the partition readers and the iterator.
        rejoin: Whether a member the server dropped joins again.

    Immutable; safe to share between threads.
    """

    group: str
    streams: tuple[str, ...]
    consumer_id: str | None
    start: StartAt
    auto_commit: float | None
    buffer: int
    rejoin: bool

    @classmethod
    def check(
        cls,
        group: str,
        streams: Sequence[str],
        *,
        consumer_id: str | None,
        start: StartAt | None,
        auto_commit: float | None,
        buffer: int,
        rejoin: bool,
    ) -> Settings:
        """The settings of :class:`~liftbridge_sync.consumer.Consumer`'s arguments.

        Raises:
            ArgumentTypeError, ConfigurationError: on a bad argument.
        """
        check_id("group", group)  # its cursors are keyed "__group:<group>,<stream>,..."
        if isinstance(streams, str | bytes) or not isinstance(streams, Iterable):
            raise ArgumentTypeError(
                f"'streams' must be a sequence of stream names, got {type(streams).__name__}"
            )
        names = tuple(check_name("streams", s) for s in streams)
        if not names:
            raise ConfigurationError("'streams' must be a non-empty sequence of stream names")
        check_label("consumer_id", consumer_id, optional=True)
        start = StartAt.new_only() if start is None else start
        if not isinstance(start, StartAt):
            raise ArgumentTypeError(
                f"'start' must be a StartAt (StartAt.earliest(), StartAt.latest() or "
                f"StartAt.new_only()), got {type(start).__name__}"
            )
        if start.kind not in _START_KINDS:
            raise ConfigurationError(
                "'start' must be StartAt.earliest(), StartAt.latest() or StartAt.new_only(): "
                "where partitions without a committed cursor begin"
            )
        # None: manual commits only. inf is no interval (check_timeout would read it as
        # None, and nothing would be committed at all, not even on revoke or close).
        interval = (
            None
            if auto_commit is None
            else check_seconds(
                "auto_commit", auto_commit, allow_zero=False, unlimited=False, minimum=0.001
            )
        )
        check_int("buffer", buffer, minimum=1)
        check_bool("rejoin", rejoin)
        return cls(group, names, consumer_id, start, interval, buffer, rejoin)
