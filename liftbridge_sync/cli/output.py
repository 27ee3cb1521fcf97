"""Writing to standard output without BrokenPipe tracebacks, and message formats."""

from __future__ import annotations

import sys
from typing import BinaryIO

from liftbridge_sync.cli.errors import PipeClosed
from liftbridge_sync.tail import FORMATS, format_message

__all__ = ["FORMATS", "Output", "format_message"]


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
