"""Consumer arguments are checked before anything is sent; cursor ids follow Go's."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import ArgumentTypeError, Client, ConfigurationError, StartAt
from liftbridge_sync.consumer import Consumer, ConsumerStats, group_cursor_id


@pytest.mark.parametrize(
    ("group", "kwargs", "match"),
    [
        ("", {"streams": ["s"]}, "'group'"),
        ("g", {"streams": "s"}, "'streams'"),
        ("g", {"streams": []}, "'streams'"),
        ("g", {"streams": ["bad name"]}, "streams"),
        ("g", {"streams": ["s"], "start": StartAt.offset(3)}, "'start'"),
        ("g", {"streams": ["s"], "start": StartAt.cursor("c")}, "'start'"),
        ("g", {"streams": ["s"], "consumer_id": ""}, "'consumer_id'"),
    ],
)
def test_bad_arguments_raise_before_the_wire(
    group: str, kwargs: dict[str, Any], match: str
) -> None:
    # Port 1: nothing listens; an attempt to connect would fail differently and slowly.
    with Client("127.0.0.1:1") as client:
        with pytest.raises(ConfigurationError, match=match):
            client.consumer(group, auto_commit=None, **kwargs)


# inf is no interval: it used to pass as None, so nothing was ever committed, not even
# on revoke or close, which any interval promises.
# Under a millisecond the commit thread spun a core while idle (1e-9: 1.02 s of CPU a
# second).
@pytest.mark.parametrize("interval", [0, -1.0, float("nan"), float("inf"), 1e-9, 0.0009])
def test_auto_commit_must_be_a_positive_interval_or_none(interval: float) -> None:
    with Client("127.0.0.1:1") as client:
        with pytest.raises(ConfigurationError, match="auto_commit"):
            client.consumer("g", streams=["s"], auto_commit=interval)


def test_auto_commit_is_a_required_choice() -> None:
    with Client("127.0.0.1:1") as client:
        with pytest.raises(TypeError, match="auto_commit"):
            client.consumer("g", streams=["s"])  # type: ignore[call-arg]


def test_cursor_id_is_go_liftbridges() -> None:
    assert group_cursor_id("billing") == "__group:billing"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rejoin": 1},
        {"start": "earliest"},
        {"start": 0},
    ],
)
def test_arguments_of_the_wrong_type_raise_argument_type_error(kwargs: dict[str, Any]) -> None:
    with Client("127.0.0.1:1") as client:
        with pytest.raises(ArgumentTypeError, match=f"'{next(iter(kwargs))}'"):
            client.consumer("g", streams=["s"], auto_commit=None, **kwargs)


@pytest.mark.parametrize(("buffer", "error"), [("8", ArgumentTypeError), (0, ConfigurationError)])
def test_the_buffer_is_a_positive_int(buffer: Any, error: type[Exception]) -> None:
    with Client("127.0.0.1:1") as client:
        with pytest.raises(error, match="'buffer'"):
            Consumer(client._core, "g", ["s"], auto_commit=None, buffer=buffer)


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(-1, ConfigurationError), (float("nan"), ConfigurationError), ("1", ArgumentTypeError)],
)
def test_wait_for_assignment_checks_its_timeout(timeout: Any, error: type[Exception]) -> None:
    with Client("127.0.0.1:1") as client:
        consumer = Consumer(client._core, "g", ["s"], auto_commit=None)  # not joined
        with pytest.raises(error, match="timeout"):
            consumer.wait_for_assignment(timeout)


def test_wait_for_assignment_times_out_with_timeout_error() -> None:
    with Client("127.0.0.1:1") as client:
        consumer = Consumer(client._core, "g", ["s"], auto_commit=None)  # never answered
        with pytest.raises(TimeoutError, match="no assignment"):
            consumer.wait_for_assignment(0.05)
        assert consumer.stats() == ConsumerStats()
