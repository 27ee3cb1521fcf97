"""``--start``/``--stop`` positions as click parameters."""

from __future__ import annotations

import click

from liftbridge_sync import ConfigurationError, StartAt, StopAt, tail

__all__ = ["START_HELP", "STOP_HELP", "parse_start", "parse_stop"]

# The CLI also takes last:N (the subscribe command reads each partition's newest
# offset for it), which is no StartAt: tail.START_HELP leaves it out.
START_HELP = tail.START_HELP.replace("offset:N |", "offset:N | last:N |", 1)
STOP_HELP = tail.STOP_HELP


def parse_start(text: str) -> StartAt:
    """:func:`liftbridge_sync.tail.parse_start`, failing with ``click.BadParameter``.

    Thread-safe: a pure function.
    """
    try:
        return tail.parse_start(text)
    except ConfigurationError as exc:
        message = str(exc).replace(tail.START_HELP, START_HELP)
        raise click.BadParameter(message, param_hint="--start") from None


def parse_stop(text: str) -> StopAt:
    """:func:`liftbridge_sync.tail.parse_stop`, failing with ``click.BadParameter``.

    Thread-safe: a pure function.
    """
    try:
        return tail.parse_stop(text)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--stop") from None
