"""Parsing ``--start``/``--stop`` positions given on the command line."""

from __future__ import annotations

from datetime import datetime

import click

from liftbridge_sync import StartAt, StopAt

__all__ = ["START_HELP", "STOP_HELP", "parse_start", "parse_stop"]

START_HELP = (
    "earliest | latest | new | offset:N | time:ISO-8601 | ago:SECONDS | cursor:ID "
    "(default: earliest; new with --follow)"
)
STOP_HELP = "latest | offset:N | time:ISO-8601 (default: latest, or never with --follow)"


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise click.BadParameter(f"{what} must be an integer, got {text!r}") from None
    if value < 0:
        raise click.BadParameter(f"{what} must be >= 0, got {value}")
    return value


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not an ISO-8601 time: {text!r}") from None


def parse_start(text: str) -> StartAt:
    """A :class:`StartAt` from its command-line form (see ``START_HELP``).

    Thread-safe: a pure function.
    """
    kind, _, arg = text.partition(":")
    simple = {"earliest": StartAt.earliest, "latest": StartAt.latest, "new": StartAt.new_only}
    if kind in simple and not arg:
        return simple[kind]()
    if kind == "offset":
        return StartAt.offset(_int(arg, "start offset"))
    if kind == "time":
        return StartAt.timestamp(_time(arg))
    if kind == "ago":
        try:
            seconds = float(arg)
        except ValueError:
            raise click.BadParameter(f"ago: needs seconds, got {arg!r}") from None
        if seconds < 0:
            raise click.BadParameter("ago: seconds must be >= 0")
        return StartAt.time_delta(seconds)
    if kind == "cursor" and arg:
        return StartAt.cursor(arg)
    raise click.BadParameter(f"unknown start position {text!r}; use {START_HELP}")


def parse_stop(text: str) -> StopAt:
    """A :class:`StopAt` from its command-line form (see ``STOP_HELP``).

    Thread-safe: a pure function.
    """
    kind, _, arg = text.partition(":")
    if kind == "latest" and not arg:
        return StopAt.latest()
    if kind == "offset":
        return StopAt.offset(_int(arg, "stop offset"))
    if kind == "time":
        return StopAt.timestamp(_time(arg))
    raise click.BadParameter(f"unknown stop position {text!r}; use {STOP_HELP}")
