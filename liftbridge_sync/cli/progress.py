"""Progress bars on standard error, shown only when standard output is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["Progress", "Silent", "progress"]


class Progress(Protocol):
    """Something to report progress to.

    Not thread-safe: advance it from one thread.
    """

    def advance(self, amount: float) -> None:
        """Count ``amount`` more units done."""


class Silent:
    """Progress that shows nothing.

    Thread-safe: it has no state.
    """

    def advance(self, amount: float) -> None:
        pass


class _Bar:
    def __init__(self, bar: object, task: object) -> None:
        self._bar = bar
        self._task = task

    def advance(self, amount: float) -> None:
        self._bar.advance(self._task, amount)  # type: ignore[attr-defined]


@contextmanager
def progress(description: str, total: float | None) -> Iterator[Progress]:
    """A progress bar on stderr while the block runs, if stdout is a terminal.

    Not thread-safe: advance it from one thread.
    """
    if not sys.stdout.isatty() or not sys.stderr.isatty():
        yield Silent()
        return
    from rich.console import Console
    from rich.progress import Progress as RichProgress

    with RichProgress(console=Console(stderr=True), transient=True) as bar:
        yield _Bar(bar, bar.add_task(description, total=total))
