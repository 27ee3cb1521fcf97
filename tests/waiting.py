"""Waiting on conditions with deadlines (tests never sleep to synchronise)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import AnyStr

import pytest


def wait_until(
    condition: Callable[[], bool],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds.

    ``what`` names the condition in the failure; a callable is asked only then, so it
    can describe the state that kept the condition from holding.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout}s waiting for {described}")
        time.sleep(0.01)


def interrupt(process: subprocess.Popen[AnyStr], timeout: float = 30.0) -> tuple[AnyStr, AnyStr]:
    """SIGINT ``process`` and return its remaining ``(stdout, stderr)``; fail the test if
    it has not exited after ``timeout`` seconds, with every thread's stack in the message
    (the process must run with ``PYTHONFAULTHANDLER=1``: SIGABRT makes it print them)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        _, err = process.communicate(timeout=30)
        stacks = err.decode(errors="replace") if isinstance(err, bytes) else str(err)
        pytest.fail(f"still running {timeout}s after SIGINT; its threads:\n{stacks[-8000:]}")
