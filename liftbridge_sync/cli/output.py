"""Writing to standard output without BrokenPipe tracebacks, and message formats."""

from __future__ import annotations

import base64
import json
import sys
from typing import BinaryIO

from liftbridge_sync import Message
from liftbridge_sync.cli.errors import PipeClosed

__all__ = ["FORMATS", "Output", "format_message"]

#: Output formats of ``subscribe``.
FORMATS = ("plain", "json", "raw")


class Output:
    """Binary standard output that turns a closed pipe into :class:`PipeClosed`.

    Not thread-safe: use it from the command's main thread.
    """

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer

    def write(self, data: bytes) -> None:
        """Write ``data`` (buffered)."""
        try:
            self._stream.write(data)
        except BrokenPipeError:
            raise PipeClosed() from None

    def flush(self) -> None:
        """Flush buffered output."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise PipeClosed() from None


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

    Thread-safe: a pure function.
    """
    if fmt == "raw":
        return message.value
    if fmt == "plain":
        return message.value + separator
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
