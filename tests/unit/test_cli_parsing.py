"""Command-line parsing and rendering that need no server."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import click
import pytest

from liftbridge_sync import (
    AckTimeoutError,
    ArgumentTypeError,
    BrokerUnavailableError,
    ConfigurationError,
    Message,
    NoSuchPartitionError,
    ServerError,
    StartAt,
    StopAt,
    StreamExistsError,
    tail,
)
from liftbridge_sync.cli.errors import ExitCode, exit_code_for
from liftbridge_sync.cli.positions import parse_start, parse_stop
from liftbridge_sync.tail import Template, format_message, parse_last
from tests.messages import make_message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", StartAt.earliest()),
        ("latest", StartAt.latest()),
        ("new", StartAt.new_only()),
        ("offset:7", StartAt.offset(7)),
        ("ago:1.5", StartAt.time_delta(1.5)),
        ("cursor:billing", StartAt.cursor("billing")),
        ("time:1970-01-01T00:00:01+00:00", StartAt.timestamp(1_000_000_000)),
    ],
)
def test_start_positions(text: str, expected: StartAt) -> None:
    assert parse_start(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "offset:",
        "offset:-1",
        "offset:x",
        "cursor:",
        "soon",
        "ago:x",
        # int() and float() take these; a position typed so is a typo, not a number.
        "offset: 5",
        "offset:1_000",
        "offset:\u0665",  # ARABIC-INDIC DIGIT FIVE
        "offset:+5",
        "ago: 5",
        "ago:1_0",
    ],
)
def test_bad_start_positions(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_start(text)


def test_ago_further_back_than_a_timestamp_holds_is_worded_for_the_command_line() -> None:
    """It said "'time_delta seconds' must be at most ...; use None or inf": the names of
    the Python API, not of ``ago:``."""
    with pytest.raises(click.BadParameter, match="ago:1e300 reaches back") as info:
        parse_start("ago:1e300")
    assert "time_delta" not in str(info.value) and "None" not in str(info.value)
    assert "ago:inf" in str(info.value)
    assert parse_start("ago:inf") == StartAt.time_delta(float("inf"))


def test_stop_positions() -> None:
    assert parse_stop("latest") == StopAt.latest()
    assert parse_stop("offset:3") == StopAt.offset(3)
    with pytest.raises(click.BadParameter):
        parse_stop("earliest")
    for typo in ("offset: 3", "offset:3 ", "offset:1_0", "offset:\u0663"):
        with pytest.raises(click.BadParameter, match="digits 0-9"):
            parse_stop(typo)


def _message(value: bytes, key: bytes | None, headers: dict[str, bytes]) -> Message:
    return make_message(4, value, key=key, partition=1, headers=headers, timestamp_ns=5)


def test_formats() -> None:
    text = _message(b"hello", b"k", {"h": b"v"})
    assert format_message(text, "plain") == b"hello\n"
    assert format_message(text, "raw") == b"hello"
    record = json.loads(format_message(text, "json"))
    assert record == {
        "stream": "s",
        "partition": 1,
        "offset": 4,
        "timestamp_ns": 5,
        "key": "k",
        "value": "hello",
        "headers": {"h": "v"},
    }
    binary = json.loads(format_message(_message(b"\xff", None, {"h": b"\xfe"}), "json"))
    assert binary["value"] == "/w==" and binary["value_base64"] is True
    assert binary["headers"] == {"h": "/g=="} and binary["headers_base64"] is True
    assert binary["key"] is None


def test_templates_render_like_kcat() -> None:
    message = _message(b"hello", b"k", {"h": b"v", "g": b"w"})
    assert Template("%k %s %v %o %p %t %T %S %K %%\\n").render(message) == (
        b"k hello hello 4 1 s 0 5 1 %\n"
    )
    assert Template("%h\\t|").render(message) == b"g=w,h=v\t|"
    assert Template("[%k]").render(_message(b"x", None, {})) == b"[]"
    assert Template("%K").render(_message(b"x", None, {})) == b"-1"
    assert Template("plain text").render(message) == b"plain text"


def test_template_bytes_that_are_not_utf8_are_written_as_given() -> None:
    """Python decodes a command-line argument that is not UTF-8 with surrogate escapes
    (``-f $'%s\\xff'``); encoding the template as strict UTF-8 raised a bare
    UnicodeEncodeError (a traceback from ``subscribe -f``). The bytes go out as given."""
    message = _message(b"v", b"k", {})
    assert Template(os.fsdecode(b"%k\xff%s\xfe")).render(message) == b"k\xffv\xfe"
    # A lone surrogate that no argument can carry is refused as a bad template.
    with pytest.raises(ConfigurationError):
        Template("%s\ud800")


@pytest.mark.parametrize("text", ["%q", "%", "abc\\", "\\x"])
def test_bad_templates_are_configuration_errors(text: str) -> None:
    with pytest.raises(ConfigurationError):
        Template(text)


def test_last_n() -> None:
    assert parse_last("last:10") == 10
    assert parse_last("earliest") is None and parse_last("lastly") is None
    assert parse_last(f"last:{2**63 - 1}") == 2**63 - 1
    for bad in ("last:0", "last:x", "last:-1", "last:", "last: 2", "last:1_0"):
        with pytest.raises(ConfigurationError):
            parse_last(bad)
    # ago:1e400 was read as inf (every message); ago:inf still is.
    with pytest.raises(ConfigurationError, match="further than a timestamp holds"):
        tail.parse_start("ago:1e400")
    assert tail.parse_start("ago:inf") == tail.parse_start("ago:+Infinity")
    # 26 digits were taken, where the error for 31 said "must be below 2**63".
    for huge in (f"last:{2**63}", "last:" + "9" * 26, "last:" + "9" * 31):
        with pytest.raises(ConfigurationError, match="must be below 2\\*\\*63"):
            parse_last(huge)


def test_only_the_command_line_offers_last_n() -> None:
    # tail.parse_start (the Django command's) does not take last:N, so its help and its
    # refusals do not offer it; the CLI's, which does, offers it in both.
    assert "last:N" not in tail.START_HELP
    with pytest.raises(ConfigurationError, match="unknown start position 'last:2'") as plain:
        tail.parse_start("last:2")
    assert "last:N" not in str(plain.value)
    with pytest.raises(click.BadParameter, match=r"offset:N \| last:N \|"):
        parse_start("soon")


@pytest.mark.parametrize(
    "call",
    [
        lambda: tail.parse_start(None),  # type: ignore[arg-type]
        lambda: tail.parse_start(b"earliest"),  # type: ignore[arg-type]
        lambda: tail.parse_stop(5),  # type: ignore[arg-type]
        lambda: tail.parse_last(b"last:3"),  # type: ignore[arg-type]
        lambda: Template(None),  # type: ignore[arg-type]
        lambda: Template(b"%s"),  # type: ignore[arg-type]
        lambda: format_message(_message(b"v", None, {}), None),  # type: ignore[arg-type]
        lambda: format_message(_message(b"v", None, {}), "plain", "\n"),  # type: ignore[arg-type]
        lambda: format_message(None, "plain"),  # type: ignore[arg-type]
        lambda: Template("%v").render(b"v"),  # type: ignore[arg-type]
    ],
)
def test_text_helpers_refuse_a_wrong_type_with_a_typed_error(call: Callable[[], object]) -> None:
    """They raised AttributeError or a bare TypeError from inside (``None.partition``,
    ``len(None)``, ``bytes + str``): the library's errors are LiftbridgeErrors."""
    with pytest.raises(ArgumentTypeError):
        call()


def test_exit_codes() -> None:
    assert exit_code_for(NoSuchPartitionError("x")) is ExitCode.NOT_FOUND
    assert exit_code_for(StreamExistsError("x")) is ExitCode.EXISTS
    assert exit_code_for(BrokerUnavailableError("x")) is ExitCode.UNAVAILABLE
    assert exit_code_for(AckTimeoutError("x")) is ExitCode.PUBLISH_FAILED
    assert exit_code_for(ServerError("x")) is ExitCode.ERROR
