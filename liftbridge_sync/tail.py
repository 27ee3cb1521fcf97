"""Reading a stream for people: positions written as text, and messages rendered as lines.

Shared by the ``liftbridge-sync`` command line and the Django ``liftbridge_tail``
command. Positions::

    parse_start("offset:100"), parse_start("ago:3600"), parse_stop("latest")
"""

from __future__ import annotations

import base64
import json
from datetime import datetime

from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt, StopAt

__all__ = ["FORMATS", "START_HELP", "STOP_HELP", "format_message", "parse_start", "parse_stop"]

#: Output formats of :func:`format_message`.
FORMATS = ("plain", "json", "raw")

START_HELP = (
    "earliest | latest | new | offset:N | time:ISO-8601 | ago:SECONDS | cursor:ID "
    "(default: earliest; new with --follow)"
)
STOP_HELP = "latest | offset:N | time:ISO-8601 (default: latest, or never with --follow)"


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{what} must be an integer, got {text!r}") from None
    if value < 0:
        raise ConfigurationError(f"{what} must be >= 0, got {value}")
    return value


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"not an ISO-8601 time: {text!r}") from None


def parse_start(text: str) -> StartAt:
    """A :class:`StartAt` from its text form (see ``START_HELP``).

    Raises:
        ConfigurationError: if ``text`` is not a start position.

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
            raise ConfigurationError(f"ago: needs seconds, got {arg!r}") from None
        if not seconds >= 0:
            raise ConfigurationError("ago: seconds must be >= 0")
        return StartAt.time_delta(seconds)
    if kind == "cursor" and arg:
        return StartAt.cursor(arg)
    raise ConfigurationError(f"unknown start position {text!r}; use {START_HELP}")


def parse_stop(text: str) -> StopAt:
    """A :class:`StopAt` from its text form (see ``STOP_HELP``).

    Raises:
        ConfigurationError: if ``text`` is not a stop position.

    Thread-safe: a pure function.
    """
    kind, _, arg = text.partition(":")
    if kind == "latest" and not arg:
        return StopAt.latest()
    if kind == "offset":
        return StopAt.offset(_int(arg, "stop offset"))
    if kind == "time":
        return StopAt.timestamp(_time(arg))
    raise ConfigurationError(f"unknown stop position {text!r}; use {STOP_HELP}")


def _text_or_b64(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def format_message(message: Message, fmt: str, separator: bytes = b"\n") -> bytes:
    """Render one message: ``plain`` (the value), ``json`` (one JSON object) or ``raw``.

    ``json`` has ``stream``, ``partition``, ``offset``, ``timestamp_ns``, ``key``,
    ``value`` and ``headers``; bytes that are not UTF-8 are base64 and flagged with
    ``"key_base64"``/``"value_base64"``/``"headers_base64"`` set to ``true``.
    ``raw`` is the value bytes alone, without a separator.

    Raises:
        ConfigurationError: if ``fmt`` is not one of :data:`FORMATS`.

    Thread-safe: a pure function.
    """
    if fmt == "raw":
        return message.value
    if fmt == "plain":
        return message.value + separator
    if fmt != "json":
        raise ConfigurationError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    record: dict[str, object] = {
        "stream": message.stream,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp_ns": message.timestamp_ns,
    }
    if message.key is None:
        record["key"] = None
    else:
        record["key"], key_b64 = _text_or_b64(message.key)
        if key_b64:
            record["key_base64"] = True
    record["value"], value_b64 = _text_or_b64(message.value)
    if value_b64:
        record["value_base64"] = True
    headers: dict[str, str] = {}
    headers_b64 = False
    for name, raw in message.headers.items():
        headers[name], flagged = _text_or_b64(raw)
        headers_b64 = headers_b64 or flagged
    if headers_b64:
        headers = {n: base64.b64encode(v).decode("ascii") for n, v in message.headers.items()}
        record["headers_base64"] = True
    record["headers"] = headers
    return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
