"""Stream administration requests: every argument checked before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import ConfigurationError
from liftbridge_sync._wire.requests import (
    delete_stream_request,
    pause_stream_request,
    set_stream_readonly_request,
)


def test_requests_carry_the_checked_arguments() -> None:
    assert delete_stream_request("orders").name == "orders"
    paused = pause_stream_request("orders", (2, 0, 2), True)
    assert (paused.name, list(paused.partitions), paused.resumeAll) == ("orders", [0, 2], True)
    every = set_stream_readonly_request("orders", None, False)
    assert (every.name, list(every.partitions), every.readonly) == ("orders", [], False)


@pytest.mark.parametrize(
    ("build", "args", "field"),
    [
        (delete_stream_request, ("",), "name"),
        (delete_stream_request, (b"orders",), "name"),
        (pause_stream_request, ("orders", [], False), "partitions"),
        (pause_stream_request, ("orders", [-1], False), "partitions"),
        (pause_stream_request, ("orders", "01", False), "partitions"),
        (pause_stream_request, ("orders", None, 1), "resume_all"),
        (set_stream_readonly_request, ("orders", [2**40], True), "partitions"),
        (set_stream_readonly_request, ("orders", None, "yes"), "readonly"),
        (set_stream_readonly_request, (None, None, True), "name"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(
    build: Any, args: tuple[Any, ...], field: str
) -> None:
    with pytest.raises(ConfigurationError, match=field):
        build(*args)
