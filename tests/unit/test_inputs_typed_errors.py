"""Inputs that let an untyped error out of the library (a hunt against the public API):
each now gets a typed error before anything reaches the wire."""

from __future__ import annotations

import math
from typing import Any

import pytest

from liftbridge_sync import (
    ArgumentTypeError,
    Client,
    ConfigurationError,
    RetryPolicy,
    StartAt,
    StopAt,
)
from liftbridge_sync.envelope import new_message
from liftbridge_sync.options import ClientOptions, TLSOptions
from liftbridge_sync.positions import StartKind, StopKind
from liftbridge_sync.tail import parse_start, parse_stop

_LONG = "9" * 5000  # int() refuses more than 4300 digits with a ValueError
#: Values of the wrong type, as an untyped caller passes them.
_TEXT: Any = "1"
_FLOAT: Any = 1.5
_NUMBER: Any = 5
_NO_PARTITIONER: Any = object()


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: StartAt(StartKind.OFFSET, at_offset=2**64), ConfigurationError),
        (lambda: StartAt(StartKind.OFFSET, at_offset=-1), ConfigurationError),
        (lambda: StartAt(StartKind.OFFSET, at_offset=_TEXT), ArgumentTypeError),
        (lambda: StartAt(StartKind.OFFSET, at_offset=_FLOAT), ArgumentTypeError),
        (lambda: StartAt(StartKind.TIME_DELTA, delta_seconds=math.nan), ConfigurationError),
        (lambda: StartAt(StartKind.TIME_DELTA, delta_seconds=-1.0), ConfigurationError),
        (lambda: StartAt(StartKind.TIME_DELTA, delta_seconds=_TEXT), ArgumentTypeError),
        (lambda: StartAt(StartKind.TIMESTAMP, at_timestamp_ns=2**70), ConfigurationError),
        (lambda: StartAt(StartKind.TIMESTAMP, at_timestamp_ns=-5), ConfigurationError),
        (lambda: StartAt(StartKind.CURSOR), ConfigurationError),
        (lambda: StartAt(_TEXT), ArgumentTypeError),
        (lambda: StopAt(StopKind.OFFSET, at_offset=2**64), ConfigurationError),
        (lambda: StopAt(StopKind.TIMESTAMP, at_timestamp_ns=2**70), ConfigurationError),
        (lambda: StopAt(StopKind.OFFSET, at_offset=True), ArgumentTypeError),
    ],
)
def test_positions_built_directly_are_checked_as_the_class_methods_check(
    build: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        build()


def test_positions_built_directly_with_good_fields_still_work() -> None:
    assert StartAt(StartKind.OFFSET, at_offset=7) == StartAt.offset(7)
    assert StopAt(StopKind.OFFSET, at_offset=7) == StopAt.offset(7)
    assert StartAt.time_delta(math.inf).delta_seconds == math.inf


def test_a_port_of_thousands_of_digits_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="port"):
        Client(f"localhost:{_LONG}")
    with pytest.raises(ConfigurationError, match="port"):
        ClientOptions(addresses=(f"localhost:{_LONG}",))
    with pytest.raises(ConfigurationError, match="port outside"):
        Client("localhost:000065536")


@pytest.mark.parametrize("parse", [parse_start, parse_stop])
def test_tail_positions_of_thousands_of_digits_are_configuration_errors(parse: Any) -> None:
    with pytest.raises(ConfigurationError, match="2\\*\\*63"):
        parse(f"offset:{_LONG}")


@pytest.mark.parametrize("path", ["a\x00b", "\ud800"])
@pytest.mark.parametrize("field", ["ca_cert", "client_cert", "client_key"])
def test_tls_paths_that_no_file_system_takes_are_configuration_errors(
    field: str, path: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"{field}.*cannot read"):
        TLSOptions(**{field: path})


@pytest.mark.parametrize("addresses", [None, 9292, b"127.0.0.1:1", {"a": 1}.keys()])
def test_addresses_of_a_wrong_type_are_argument_type_errors(addresses: Any) -> None:
    with pytest.raises(ArgumentTypeError, match="'addresses'"):
        Client(addresses)


def test_a_comma_separated_address_str_is_a_seed_list() -> None:
    with Client("127.0.0.1:1, 127.0.0.1:2") as client:
        assert "127.0.0.1:1,127.0.0.1:2" in repr(client)


def test_a_released_memoryview_is_an_argument_type_error_wherever_bytes_go() -> None:
    released: Any = memoryview(b"x")
    released.release()
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        calls = [
            lambda: client.publish("s", released),
            lambda: client.publish_async("s", released),
            lambda: client.publish_batch("s", [released]),
            lambda: client.publish_batch("s", [(b"k", released)]),
            lambda: client.publish("s", b"v", key=released),
            lambda: client.publish("s", b"v", headers={"h": released}),
            lambda: client.publish_to_subject("s", released),
            lambda: new_message(released),
        ]
        for call in calls:
            with pytest.raises(ArgumentTypeError, match="released memoryview"):
                call()


def test_arguments_of_the_wrong_type_are_argument_type_errors_before_the_wire() -> None:
    # Port 1: nothing listens, and RetryPolicy.no_retry() fails at once if anything
    # tried to reach it (a ConnectionError, not the ArgumentTypeError asserted).
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        calls: list[tuple[Any, str]] = [
            (lambda: client.publish("s", b"v", correlation_id=_NUMBER), "'correlation_id'"),
            (lambda: client.publish_async("s", b"v", correlation_id=_NUMBER), "'correlation_id'"),
            (lambda: client.publish("s", b"v", partitioner=_TEXT), "'partitioner'"),
            (lambda: client.publish("s", b"v", partitioner=_NO_PARTITIONER), "'partitioner'"),
            (lambda: client.pause_stream("s", partitions=_TEXT), "'partitions'"),
            (lambda: client.set_stream_readonly("s", partitions=_NUMBER), "'partitions'"),
        ]
        for call, name in calls:
            with pytest.raises(ArgumentTypeError, match=name):
                call()
        # The right type with a bad value stays a plain ConfigurationError.
        with pytest.raises(ConfigurationError, match="'correlation_id'") as info:
            client.publish("s", b"v", correlation_id="")
        assert not isinstance(info.value, ArgumentTypeError)
