"""Refusals of publishes nothing waits for: said in a WARNING, a flood of them not."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from liftbridge_sync._publishing.answers import AckRouter
from liftbridge_sync._wire.publish_codec import Refusal
from liftbridge_sync.errors import IncorrectOffsetError


def _refusal(number: int) -> Refusal:
    return Refusal(
        correlation_id=f"id-{number}",
        error=IncorrectOffsetError(f"refused {number}"),
        async_code=5,
        transient=False,
    )


def test_the_first_is_logged_at_once_and_the_next_ones_counted_into_the_next_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    none = cast(Any, None)
    router = AckRouter(none, none, none, lambda: None)
    with caplog.at_level("WARNING", logger="liftbridge_sync.publisher"):
        for number in range(3):
            router.unclaimed(_refusal(number))
        assert [r.getMessage() for r in caplog.records] == [
            "the broker refused 1 publish(es) nothing waits for any more (AckPolicy.NONE "
            "publishes, ones failed before, or copies sent again after the first was "
            "answered); the last, id-0: refused 0"
        ]
        router._unclaimed_logged = -math.inf  # as if UNCLAIMED_LOG_EVERY had passed
        router.unclaimed(_refusal(3))
    assert len(caplog.records) == 2
    assert "refused 3 publish(es)" in caplog.records[1].getMessage()
    assert "the last, id-3: refused 3" in caplog.records[1].getMessage()
