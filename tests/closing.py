"""Closing a client while another thread's call sleeps a retry back-off: the tests of
close() waking back-offs share how they start the call, wait for the back-off and time
the close."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from liftbridge_sync import Client
from tests.waiting import wait_until

__all__ = ["close_during_back_off"]


def close_during_back_off(
    client: Client, call: Callable[[], object], logged: str, caplog: pytest.LogCaptureFixture
) -> tuple[float, list[BaseException], threading.Thread]:
    """Run ``call`` on a thread, close ``client`` once ``logged`` (the retry log line
    written just before a back-off starts) is in ``caplog``, and return the seconds the
    thread took to end after close(), what it raised, and the thread.

    ``caplog`` must capture ``liftbridge_sync.retry`` at WARNING.
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - what ended it is the test's question
            errors.append(exc)

    caller = threading.Thread(target=run, name="liftbridge-test-caller", daemon=True)
    caller.start()
    try:
        wait_until(lambda: logged in caplog.text, 10, "a back-off")
        closed = time.monotonic()
        client.close()
        caller.join(5)
        ended = time.monotonic() - closed
    finally:
        client.close()
        caller.join(15)
    return ended, errors, caller
