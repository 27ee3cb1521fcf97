"""The context-manager life cycle shared by the harness's servers and clusters."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["Lifecycle"]


class Lifecycle:
    """``with server:`` starts it, and closes it on exit or when starting fails.

    Subclasses define :meth:`start` (returning ``self``) and :meth:`close`. Not
    thread-safe; the harness's objects are driven from one thread.
    """

    def start(self) -> Self:
        """Start; overridden."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop and release everything; overridden."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def remove_run_dir(run_dir: Path | None) -> None:
        """Delete a temporary run directory (ignoring what is already gone)."""
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
