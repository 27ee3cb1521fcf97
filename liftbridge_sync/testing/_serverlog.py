"""A server's log file: its tail, what the current run wrote, and why it died."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ServerLog"]

#: How much of the end of the log :meth:`ServerLog.tail` reads (a goroutine dump can
#: make a log large).
_TAIL_BYTES = 256 * 1024


class ServerLog:
    """Reading one process's log, appended across its runs.

    Not thread-safe: one owner (the process object) marks each run's start.

    Args:
        path: The log file (it need not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._run_start = 0

    def mark_run_start(self, offset: int) -> None:
        """A new run starts writing at byte ``offset``."""
        self._run_start = offset

    def tail(self, n: int = 40) -> str:
        """The last ``n`` lines (all runs)."""
        try:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - _TAIL_BYTES))
                data = fh.read()
        except FileNotFoundError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])

    def since_run_start(self) -> str:
        """What the current (or last) run wrote."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._run_start)
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def crash_reason(self) -> str:
        """The lines that say why the server died: a Go ``panic:`` or ``fatal error:``
        with the two lines after it, or a fatal log entry (the goroutine dump that
        follows a panic runs to thousands of lines); the last three such. "" if none."""
        try:
            lines = self.path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        reasons = [
            "\n".join(lines[i : i + 3])
            for i, line in enumerate(lines)
            if line.startswith(("panic:", "fatal error:")) or "level=fatal" in line
        ]
        return "\n".join(reasons[-3:])
