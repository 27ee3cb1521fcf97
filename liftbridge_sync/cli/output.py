"""Writing to standard output without BrokenPipe tracebacks, and message formats."""

from __future__ import annotations

import io
import os
import sys
from typing import BinaryIO

from liftbridge_sync.cli.errors import CommandFailed, ExitCode, PipeClosed
from liftbridge_sync.tail import FORMATS, format_message

__all__ = [
    "FORMATS",
    "ClosedStdio",
    "Output",
    "format_message",
    "silence_stdout",
    "stand_in_for_closed_stdio",
]


def silence_stdout() -> None:
    """Send further writes to standard output, the interpreter's final flush of what
    could not be written included, to ``/dev/null``: its reader is gone or its disk
    full, and a second failure at exit would change the exit status to 120.

    Not thread-safe: call it once nothing else writes to standard output.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class ClosedStdio(io.RawIOBase):
    """Stands in for a standard stream whose descriptor was closed (``>&-``, ``<&-``).

    Python leaves ``sys.stdout``/``sys.stdin`` ``None`` then, and the first use was an
    ``AttributeError`` traceback, even in a command that prints nothing on stdout. Using
    this one fails with a one-line :class:`CommandFailed`, as ``cat`` fails.

    Thread-safe: it has no state but its message.
    """

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__()
        self._message = message
        self._code = code

    def _fail(self) -> CommandFailed:
        return CommandFailed(self._message, self._code)

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        raise self._fail()

    def readinto(self, buffer: object) -> int:
        raise self._fail()

    def write(self, data: object) -> int:
        raise self._fail()


def stand_in_for_closed_stdio() -> list[tuple[str, object]]:
    """Put a :class:`ClosedStdio` in place of a closed standard input or output.

    Returns the ``(name, previous)`` pairs to put back. Not thread-safe: call it from
    the main thread before the command runs.
    """
    replaced: list[tuple[str, object]] = []
    if sys.stdin is None:
        replaced.append(("stdin", None))
        sys.stdin = io.TextIOWrapper(
            io.BufferedReader(
                ClosedStdio("standard input is closed: give VALUES or --file", ExitCode.USAGE)
            )
        )
    if sys.stdout is None:
        replaced.append(("stdout", None))
        # write_through: the failure comes at the write, and nothing is left buffered
        # for the interpreter's final flush to fail on again.
        sys.stdout = io.TextIOWrapper(
            ClosedStdio("standard output is closed: nothing can be printed", ExitCode.ERROR),
            write_through=True,
        )
    return replaced


class Output:
    """Binary standard output that turns a closed pipe into :class:`PipeClosed`.

    Not thread-safe: use it from the command's main thread.
    """

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        if isinstance(self._stream, ClosedStdio):
            raise self._stream._fail()  # before the command does anything

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
