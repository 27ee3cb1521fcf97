"""``Client.close()`` ends the back-off of a call retrying under the retry policy at once:
the back-off slept for up to ``RetryPolicy.maximum``, and the calling thread outlived
close() by that long before it found the client closed."""

from __future__ import annotations

import logging

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, ClientOptions, RetryPolicy
from tests.closing import close_during_back_off

#: Long back-offs: a call is nearly always asleep between its attempts.
_SLOW = RetryPolicy(max_attempts=1_000_000, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)


def test_close_ends_a_retried_call_in_its_back_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="liftbridge_sync.retry")
    client = Client.from_options(ClientOptions(addresses=("127.0.0.1:1",), retry=_SLOW))
    # The refused attempt is logged just before its back-off starts.
    ended, errors, caller = close_during_back_off(
        client, client.fetch_metadata, "retrying in", caplog
    )
    assert not caller.is_alive()
    assert ended < 0.5
    assert len(errors) == 1 and isinstance(errors[0], lb.ClientClosedError), errors
