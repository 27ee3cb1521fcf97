"""Waiting on conditions with deadlines (tests never sleep to synchronise)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import AnyStr

import pytest


def wait_until(
    condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
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
