"""The tenacity seam: fresh Retrying per call, retryable flag, limits."""

from __future__ import annotations

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
