"""Start and stop positions refuse a wrong type as every other argument does.

One error per mistake across the library: a wrong type is an
:class:`~liftbridge_sync.errors.ArgumentTypeError` (a ``ConfigurationError`` and a
``TypeError``), a value out of range a plain ``ConfigurationError``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from liftbridge_sync import ArgumentTypeError, ConfigurationError, StartAt, StopAt
from liftbridge_sync.subscription.opening import check_positions

WRONG_TYPES: list[tuple[str, Callable[[], object]]] = [
    ("start offset", lambda: StartAt.offset(1.5)),  # type: ignore[arg-type]
    ("start offset", lambda: StartAt.offset("3")),  # type: ignore[arg-type]
    ("start offset", lambda: StartAt.offset(True)),
    ("stop offset", lambda: StopAt.offset(None)),  # type: ignore[arg-type]
    ("start timestamp", lambda: StartAt.timestamp("2024-01-01")),  # type: ignore[arg-type]
    ("start timestamp", lambda: StartAt.timestamp(1.5e18)),  # type: ignore[arg-type]
    ("stop timestamp", lambda: StopAt.timestamp(False)),
    ("cursor_id", lambda: StartAt.cursor(5)),  # type: ignore[arg-type]
    ("'start'", lambda: check_positions("earliest", None)),  # type: ignore[arg-type]
    ("'stop'", lambda: check_positions(None, 3)),  # type: ignore[arg-type]
    ("'stop'", lambda: check_positions(None, StartAt.earliest())),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "call"), WRONG_TYPES)
def test_a_wrong_type_is_an_argument_type_error(name: str, call: Callable[[], object]) -> None:
    with pytest.raises(ArgumentTypeError, match=name) as raised:
        call()
    assert isinstance(raised.value, TypeError)


BAD_VALUES: list[Callable[[], Any]] = [
    lambda: StartAt.offset(-1),
    lambda: StopAt.offset(2**63),
    lambda: StartAt.timestamp(-1),
    lambda: StopAt.timestamp(datetime(2300, 1, 1, tzinfo=UTC)),
    lambda: StartAt.cursor(""),
]


@pytest.mark.parametrize("call", BAD_VALUES)
def test_a_bad_value_of_the_right_type_is_a_configuration_error(call: Callable[[], Any]) -> None:
    with pytest.raises(ConfigurationError) as raised:
        call()
    assert not isinstance(raised.value, TypeError)


def test_a_start_built_directly_is_checked_as_the_class_methods_check_it() -> None:
    """``StartAt(TIME_DELTA, delta_seconds=1e300)`` was taken (``time_delta(1e300)`` is
    refused), and a cursor id with a comma or a control character only failed at
    ``subscribe()``."""
    from liftbridge_sync.positions import StartKind

    with pytest.raises(ConfigurationError, match="delta_seconds must be at most"):
        StartAt(StartKind.TIME_DELTA, delta_seconds=1e300)
    assert StartAt(StartKind.TIME_DELTA, delta_seconds=float("inf")).resolve_timestamp_ns() == 0
    for bad in ("a,b", "a\nb", " ", "x" * 1025):
        with pytest.raises(ConfigurationError, match="'cursor_id' must"):
            StartAt.cursor(bad)
        with pytest.raises(ConfigurationError, match="'cursor_id' must"):
            StartAt(StartKind.CURSOR, cursor_id=bad)
    assert StartAt.cursor("orders reader").cursor_id == "orders reader"
