"""Reading a stream for people: positions written as text, and messages rendered as lines.

Shared by the ``liftbridge-sync`` command line and the Django ``liftbridge_tail``
command. Positions::

    parse_start("offset:100"), parse_start("ago:3600"), parse_stop("latest")
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.positions import StartAt, StopAt

if TYPE_CHECKING:  # annotations only: formatting options parse without protobuf
    from liftbridge_sync.models import Message

__all__ = [
    "FORMATS",
    "START_HELP",
    "STOP_HELP",
    "TEMPLATE_HELP",
    "Template",
    "format_message",
    "parse_last",
    "parse_start",
    "parse_stop",
]

#: Output formats of :func:`format_message`.
FORMATS = ("plain", "json", "raw")

#: The start positions :func:`parse_start` takes (the CLI adds its ``last:N``: see
#: :func:`parse_last`).
START_HELP = (
    "earliest | latest | new | offset:N | time:ISO-8601 | ago:SECONDS | cursor:ID "
    "(default: earliest; new with --follow)"
)
TEMPLATE_HELP = (
    "Print each message by this template (like kcat -f): %s or %v value, %k key, %o offset, "
    "%p partition, %t stream, %T timestamp (ms), %h headers (name=value,... by name), "
    "%S value size, %K key size, %% a percent sign; \\n \\t \\r \\\\ escapes."
)
STOP_HELP = (
    "latest | offset:N | time:ISO-8601 (default: latest, or never with --follow; "
    "offset:N past the newest offset waits for N to be written)"
)


def _check_text(name: str, value: object) -> str:
    """``value``, a ``str``: the text forms are parsed as text, never bytes or None."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name!r} must be a str, got {type(value).__name__}")
    return value


#: Digits of the longest number an offset, count or time could be (2**63 has 19).
_MAX_DIGITS = 30


def _int(text: str, what: str) -> int:
    # ASCII digits only: int() also takes " 5", "1_000" and other scripts' digits,
    # which no one types as an offset on purpose.
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ConfigurationError(f"{what} must be an integer (digits 0-9), got {text!r}")
    if len(digits) > _MAX_DIGITS:  # int() refuses more than 4300 (ValueError)
        raise ConfigurationError(f"{what} must be below 2**63, got {len(digits)} digits")
    value = int(text)
    if value < 0:
        raise ConfigurationError(f"{what} must be >= 0, got {value}")
    if value >= 2**63:  # an offset or a count of them is an int64 on the wire
        raise ConfigurationError(f"{what} must be below 2**63, got {value}")
    return value


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(f"not an ISO-8601 time: {text!r}") from None


def parse_start(text: str) -> StartAt:
    """A :class:`StartAt` from its text form (see ``START_HELP``).

    Raises:
        ArgumentTypeError: if ``text`` is not a ``str``.
        ConfigurationError: if ``text`` is not a start position.

    Thread-safe: a pure function.
    """
    kind, _, arg = _check_text("text", text).partition(":")
    simple = {"earliest": StartAt.earliest, "latest": StartAt.latest, "new": StartAt.new_only}
    if kind in simple and not arg:
        return simple[kind]()
    if kind == "offset":
        return StartAt.offset(_int(arg, "start offset"))
    if kind == "time":
        return StartAt.timestamp(_time(arg))
    if kind == "ago":
        try:
            if not arg.isascii() or arg != arg.strip() or "_" in arg:
                raise ValueError(arg)  # float() takes them; a typo more likely
            seconds = float(arg)
        except ValueError:
            raise ConfigurationError(f"ago: needs seconds, got {arg!r}") from None
        if not seconds >= 0:
            raise ConfigurationError("ago: seconds must be >= 0")
        if math.isinf(seconds) and arg.lower().lstrip("+") not in ("inf", "infinity"):
            # float("1e400") is inf: a number that large is a typo, not "every message".
            raise ConfigurationError(
                f"ago:{arg} reaches back further than a timestamp holds (about 292 years); "
                "ago:inf reads every message"
            )
        try:
            return StartAt.time_delta(seconds)
        except ConfigurationError:
            # Its message names the Python API ('time_delta seconds', "use None or inf").
            raise ConfigurationError(
                f"ago:{arg} reaches back further than a timestamp holds (about 292 years); "
                "ago:inf reads every message"
            ) from None
    if kind == "cursor" and arg:
        return StartAt.cursor(arg)
    raise ConfigurationError(f"unknown start position {text!r}; use {START_HELP}")


def parse_last(text: str) -> int | None:
    """N of a ``last:N`` start position (the newest N offsets), or None for another form.

    Raises:
        ArgumentTypeError: if ``text`` is not a ``str``.
        ConfigurationError: if ``text`` is ``last:`` with something but a positive integer.

    Thread-safe: a pure function.
    """
    kind, sep, arg = _check_text("text", text).partition(":")
    if kind != "last" or not sep:
        return None
    count = _int(arg, "last:N")
    if count < 1:
        raise ConfigurationError("last:N needs N >= 1")
    return count


def parse_stop(text: str) -> StopAt:
    """A :class:`StopAt` from its text form (see ``STOP_HELP``).

    Raises:
        ArgumentTypeError: if ``text`` is not a ``str``.
        ConfigurationError: if ``text`` is not a stop position.

    Thread-safe: a pure function.
    """
    kind, _, arg = _check_text("text", text).partition(":")
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


def _check_message(message: object) -> None:
    # Imported here: the formatting options parse without protobuf, which it needs.
    from liftbridge_sync.models import Message

    if not isinstance(message, Message):
        raise ArgumentTypeError(f"'message' must be a Message, got {type(message).__name__}")


def format_message(message: Message, fmt: str, separator: bytes = b"\n") -> bytes:
    """Render one message: ``plain`` (the value), ``json`` (one JSON object) or ``raw``.

    ``json`` has ``stream``, ``partition``, ``offset``, ``timestamp_ns``, ``key``,
    ``value`` and ``headers``; bytes that are not UTF-8 are base64 and flagged with
    ``"key_base64"``/``"value_base64"``/``"headers_base64"`` set to ``true``.
    ``raw`` is the value bytes alone, without a separator.

    Raises:
        ArgumentTypeError: if ``message`` is not a :class:`Message`, ``fmt`` not a
            ``str`` or ``separator`` not ``bytes``.
        ConfigurationError: if ``fmt`` is not one of :data:`FORMATS`.

    Thread-safe: a pure function.
    """
    _check_message(message)
    _check_text("fmt", fmt)
    if not isinstance(separator, bytes):
        raise ArgumentTypeError(f"'separator' must be bytes, got {type(separator).__name__}")
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


_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


def _headers_text(message: Message) -> bytes:
    # Sorted by name: the wire's map order is not the publisher's and varies by run.
    return b",".join(
        name.encode("utf-8") + b"=" + value for name, value in sorted(message.headers.items())
    )


_FIELDS: dict[str, Callable[[Message], bytes]] = {
    "s": lambda m: m.value,
    "v": lambda m: m.value,
    "k": lambda m: m.key or b"",
    "o": lambda m: str(m.offset).encode(),
    "p": lambda m: str(m.partition).encode(),
    "t": lambda m: m.stream.encode("utf-8"),
    "T": lambda m: str(m.timestamp_ns // 1_000_000).encode(),
    "h": _headers_text,
    "S": lambda m: str(len(m.value)).encode(),
    "K": lambda m: str(len(m.key) if m.key is not None else -1).encode(),
}


class Template:
    """A kcat-style output template (``-f '%k %o %s\\n'``), checked once, rendered per message.

    See :data:`TEMPLATE_HELP` for the fields. Values and keys are written as their bytes,
    and so is the text of an argument that is not UTF-8 (decoded with surrogate escapes).

    Raises:
        ArgumentTypeError: from the constructor, for a ``text`` that is not a ``str``.
        ConfigurationError: from the constructor, for an unknown ``%`` field or escape.

    Immutable; safe to share between threads.
    """

    def __init__(self, text: str) -> None:
        _check_text("text", text)
        parts: list[bytes | Callable[[Message], bytes]] = []
        literal = bytearray()
        index = 0
        while index < len(text):
            char = text[index]
            if char in "%\\":
                if index + 1 >= len(text):
                    raise ConfigurationError(f"template ends with a lone {char!r}")
                code = text[index + 1]
                index += 2
                if char == "\\":
                    if code not in _ESCAPES:
                        raise ConfigurationError(f"unknown escape \\{code} in template")
                    literal += _ESCAPES[code]
                elif code == "%":
                    literal += b"%"
                elif code in _FIELDS:
                    if literal:
                        parts.append(bytes(literal))
                        literal.clear()
                    parts.append(_FIELDS[code])
                else:
                    raise ConfigurationError(f"unknown field %{code} in template; {TEMPLATE_HELP}")
                continue
            try:
                # An argument that is not UTF-8 arrives with surrogate escapes: its bytes.
                literal += char.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise ConfigurationError(f"template has a lone surrogate {char!r}") from None
            index += 1
        if literal:
            parts.append(bytes(literal))
        self._parts = tuple(parts)

    def render(self, message: Message) -> bytes:
        """The bytes of ``message`` by this template.

        Raises:
            ArgumentTypeError: ``message`` is not a :class:`Message`.
        """
        _check_message(message)
        return b"".join(p if isinstance(p, bytes) else p(message) for p in self._parts)
