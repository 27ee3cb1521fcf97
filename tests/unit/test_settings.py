"""options_from_settings: every bad setting is a ConfigurationError naming it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from liftbridge_sync import (
    ArgumentTypeError,
    ClientOptions,
    ConfigurationError,
    RetryPolicy,
    TLSOptions,
)
from liftbridge_sync.settings import SETTING_NAMES, options_from_settings


def _label(name: str) -> str:
    return f"LIFTBRIDGE[{name!r}]"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"MAX_IN_FLIGHT": 2**63}, "MAX_IN_FLIGHT"),  # C speedups: OverflowError on publish
        ({"GRPC_OPTIONS": {"xy": 1}}, "GRPC_OPTIONS"),  # was read as (("x", "y"),)
        ({"GRPC_OPTIONS": ["ab"]}, "GRPC_OPTIONS"),  # likewise
        ({"GRPC_OPTIONS": "ab"}, "GRPC_OPTIONS"),
        ({"GRPC_OPTIONS": 5}, "GRPC_OPTIONS"),  # a bare TypeError's message
        ({"TLS": {"server_name": 5}}, "TLS"),
        ({"TLS": {"server_name": "a b"}}, "TLS"),
        ({"ADDRESSES": ["a:1,b:2"]}, "ADDRESSES"),  # was one host "[a:1,b]:2"
        ({"ADDRESSES": ["a:b:1"]}, "ADDRESSES"),
        ({"RETRY": {1: 2}}, "RETRY"),
        ({"RETRY": {"max_attempts": 2, "MAX_ATTEMPTS": 3}}, "RETRY"),
    ],
)
def test_bad_settings_name_the_setting(extra: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        options_from_settings({"ADDRESSES": "h:1", **extra}, label=_label)
    assert _label(named) in str(info.value)


def test_a_setting_name_that_is_not_a_str_is_refused() -> None:
    # sorted() of mixed keys raised a bare TypeError, which crashed `manage.py check`.
    with pytest.raises(ConfigurationError, match="setting names must be str"):
        options_from_settings({"ADDRESSES": "h:1", 1: 2})  # type: ignore[dict-item]


def test_nested_keys_may_be_upper_case() -> None:
    options = options_from_settings(
        {
            "ADDRESSES": ["h:1"],
            "RETRY": {"MAX_ATTEMPTS": 3, "jitter": 0},
            "TLS": {"SERVER_NAME": "lb.example"},
        }
    )
    assert options.retry == RetryPolicy(max_attempts=3, jitter=0)
    assert options.tls == TLSOptions(server_name="lb.example")


def test_good_settings_still_pass() -> None:
    options = options_from_settings(
        {
            "ADDRESSES": "a:1,b:2",
            "MAX_IN_FLIGHT": 2**63 - 1,
            "GRPC_OPTIONS": [["grpc.enable_retries", 0]],
        }
    )
    assert options == ClientOptions(
        addresses=("a:1", "b:2"),
        max_in_flight=2**63 - 1,
        grpc_options=(("grpc.enable_retries", 0),),
    )


def test_every_client_option_is_a_setting() -> None:
    # Options added after the settings were written (telemetry, keepalives, metadata
    # age, ...) were refused as "unknown Liftbridge settings": a Flask or Django app
    # could not turn telemetry off.
    grouped = {"addresses": "ADDRESSES", "tls": "TLS", "retry": "RETRY"}
    names = {grouped.get(f.name, f.name.upper()) for f in dataclasses.fields(ClientOptions)}
    assert set(SETTING_NAMES) == names
    options = options_from_settings(
        {
            "ADDRESSES": "h:1",
            "TELEMETRY": False,
            "TRACE_PROPAGATION": False,
            "KEEPALIVE_INTERVAL": None,
            "METADATA_MAX_AGE": 5,
            "SUBSCRIBE_TRANSPORT": "grpc",
        }
    )
    assert options == ClientOptions(
        addresses=("h:1",),
        telemetry=False,
        trace_propagation=False,
        keepalive_interval=None,
        metadata_max_age=5,
        subscribe_transport="grpc",
    )
    with pytest.raises(ConfigurationError) as info:
        options_from_settings({"ADDRESSES": "h:1", "KEEPALIVE_TIMEOUT": -1}, label=_label)
    assert _label("KEEPALIVE_TIMEOUT") in str(info.value)


@pytest.mark.parametrize("settings", [None, "ADDRESSES", ["ADDRESSES"]])
def test_settings_that_are_no_mapping_are_an_argument_type_error(settings: object) -> None:
    """``None`` raised a bare TypeError; a str was read as settings named by its letters."""
    with pytest.raises(ArgumentTypeError, match="must be a mapping of name to value"):
        options_from_settings(settings)  # type: ignore[arg-type]
