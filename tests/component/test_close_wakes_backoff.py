"""``Client.close()`` ends the back-off of a call retrying under the retry policy at once:
the back-off slept for up to ``RetryPolicy.maximum``, and the calling thread outlived
close() by that long before it found the client closed."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, ClientOptions, RetryPolicy
from tests.waiting import wait_until

#: Long back-offs: a call is nearly always asleep between its attempts.
_SLOW = RetryPolicy(max_attempts=1_000_000, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)


def test_close_ends_a_retried_call_in_its_back_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="liftbridge_sync.retry")
    client = Client.from_options(ClientOptions(addresses=("127.0.0.1:1",), retry=_SLOW))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.fetch_metadata()
        except BaseException as exc:  # noqa: BLE001 - what ended it is the test's question
            errors.append(exc)

    caller = threading.Thread(target=call, name="liftbridge-test-caller", daemon=True)
    caller.start()
    try:
        # The refused attempt is logged just before its back-off starts.
        wait_until(lambda: "retrying in" in caplog.text, 10, "a back-off")
        closed = time.monotonic()
        client.close()
        caller.join(5)
        ended = time.monotonic() - closed
    finally:
        client.close()
        caller.join(15)
    assert not caller.is_alive()
    assert ended < 0.5
    assert len(errors) == 1 and isinstance(errors[0], lb.ClientClosedError), errors
