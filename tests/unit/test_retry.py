"""The tenacity seam: fresh Retrying per call, retryable flag, limits."""

from __future__ import annotations

import time

import pytest

from liftbridge_sync import BrokerUnavailableError, NoSuchStreamError, RetryPolicy
from liftbridge_sync._transport.retry import build_retrying, call_with_retry

FAST = RetryPolicy(max_attempts=4, max_delay=5.0, initial=0.0, maximum=0.0, jitter=0.0)


def test_retries_retryable_errors_until_success() -> None:
    calls: list[int] = []

    def attempt(number: int) -> str:
        calls.append(number)
        if number < 3:
            raise BrokerUnavailableError("down")
        return "ok"

    assert call_with_retry(FAST, "op", attempt) == "ok"
    assert calls == [1, 2, 3]


def test_gives_up_after_max_attempts_with_the_last_error() -> None:
    calls: list[int] = []

    def attempt(number: int) -> None:
        calls.append(number)
        raise BrokerUnavailableError(f"down {number}")

    with pytest.raises(BrokerUnavailableError, match="down 4"):
        call_with_retry(FAST, "op", attempt)
    assert calls == [1, 2, 3, 4]


def test_non_retryable_errors_are_raised_at_once() -> None:
    calls: list[int] = []

    def attempt(number: int) -> None:
        calls.append(number)
        raise NoSuchStreamError("gone")

    with pytest.raises(NoSuchStreamError):
        call_with_retry(FAST, "op", attempt)
    assert calls == [1]


def test_each_call_gets_its_own_retrying() -> None:
    assert build_retrying(FAST, label="a") is not build_retrying(FAST, label="a")


def test_no_attempt_starts_after_max_delay() -> None:
    # The sleep before a third attempt would carry it past max_delay: it is not made.
    policy = RetryPolicy(max_attempts=10, max_delay=0.25, initial=0.2, maximum=0.2, jitter=0.0)
    started: list[float] = []
    begin = time.monotonic()

    def attempt(number: int) -> None:
        started.append(time.monotonic() - begin)
        raise BrokerUnavailableError(f"down {number}")

    with pytest.raises(BrokerUnavailableError, match="down 2"):
        call_with_retry(policy, "op", attempt)
    assert len(started) == 2
    assert all(at < policy.max_delay for at in started)
