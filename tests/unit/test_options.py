"""Option groups validate on construction and stay immutable and picklable."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any, cast

import pytest

from liftbridge_sync import Client, ClientOptions, ConfigurationError, RetryPolicy, TLSOptions
from liftbridge_sync.options import parse_addresses


def test_defaults_are_sane_and_picklable() -> None:
    options = ClientOptions(addresses=("localhost:9292",))
    # Long enough for a leader failover on a server with default settings (15 s leader
    # timeout); a full window never fails a publish before the oldest one times out.
    assert options.ack_timeout == 30.0
    assert options.enqueue_timeout is not None
    assert options.enqueue_timeout >= options.ack_timeout
    assert options.resend_after == 1.0
    assert options.ack_read_delay == 0.001
    assert options.max_in_flight == 1024
    assert options.resubscribe_wait == 30.0
    assert options.metadata_max_age == 30.0
    assert pickle.loads(pickle.dumps(options)) == options
    assert hash(options) == hash(pickle.loads(pickle.dumps(options)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.ack_timeout = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a:1", ("a:1",)),
        ("a:1, b:2", ("a:1", "b:2")),
        (["a:1", "a:1", " b:2 "], ("a:1", "b:2")),
        (["[::1]:9292"], ("[::1]:9292",)),
        (["[fe80::1%eth0]:9292"], ("[fe80::1%eth0]:9292",)),
        (["[2001:db8::1:2]:9292"], ("[2001:db8::1:2]:9292",)),
    ],
)
def test_addresses_are_normalised(raw: object, expected: tuple[str, ...]) -> None:
    assert parse_addresses(raw) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", [], ["nohost"], ["h:0"], ["h:70000"], ["h:x"], [":9292"], 5])
def test_bad_addresses_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        parse_addresses(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ambiguous",
    [
        "::1:9292",  # [::1]:9292, or the address ::1:9292 with no port
        "fe80::1:9292",
        "2001:db8::1:2",
        "fe80::1%eth0:9292",  # the zone may be "eth0:9292"
        "::1",
        "[::1]",
    ],
)
def test_an_ipv6_host_without_brackets_is_refused_before_the_client_dials(
    ambiguous: str,
) -> None:
    # Read up to the last colon, "::1:9292" became host ::1, port 9292: a guess, and a
    # wrong one for a user who meant the address ::1:9292 (a port given elsewhere).
    with pytest.raises(ConfigurationError, match="brackets"):
        parse_addresses([ambiguous])
    with pytest.raises(ConfigurationError, match="brackets"):
        Client([ambiguous])


@pytest.mark.parametrize("bad", ["[lb1]:9292", "lb1]:9292", "[lb1:9292", "[127.0.0.1]:9292"])
def test_brackets_hold_only_an_ipv6_address(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_addresses([bad])


@pytest.mark.parametrize(
    "changes",
    [
        {"rpc_timeout": 0},
        {"rpc_timeout": float("inf")},
        {"ack_timeout": -1},
        {"max_in_flight": 0},
        {"max_in_flight": True},
        {"enqueue_timeout": 0},
        {"resubscribe_wait": float("nan")},
        {"resend_after": 0},
        {"resend_after": -1.0},
        {"resend_after": float("nan")},
        {"resend_after": "1"},
        {"resend_after": True},
        {"metadata_max_age": 0},
        {"metadata_max_age": -5.0},
        {"metadata_max_age": float("nan")},
        {"ack_read_delay": 0},
        {"ack_read_delay": -0.001},
        {"ack_read_delay": float("inf")},
        {"ack_read_delay": "0.001"},
        {"ack_read_delay": float("nan")},
        {"ack_read_delay": 1e30},  # a select() timeout that overflows in the I/O thread
        {"ack_timeout": 3e6},
        {"keepalive_interval": 1e12},
        {"retry": "fast"},
        {"tls": {}},
        {"grpc_options": (("only-a-name",),)},
        {"telemetry": 1},
        {"trace_propagation": "no"},
        {"batch_create_spans": None},
    ],
)
def test_bad_client_options_name_the_field(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        ClientOptions(addresses=("h:1",), **changes)  # type: ignore[arg-type]
    field = next(iter(changes))
    assert field in str(info.value)


def test_enqueue_timeout_none_means_forever() -> None:
    assert ClientOptions(addresses=("h:1",), enqueue_timeout=None).enqueue_timeout is None


@pytest.mark.parametrize(
    "field", ["enqueue_timeout", "resend_after", "keepalive_interval", "metadata_max_age"]
)
def test_inf_means_no_limit_where_none_does(field: str) -> None:
    options = ClientOptions(addresses=("h:1",), **{field: float("inf")})  # type: ignore[arg-type]
    assert getattr(options, field) is None


def test_replace_validates_again() -> None:
    options = ClientOptions(addresses=("h:1",))
    assert options.replace(ack_timeout=2.0).ack_timeout == 2.0
    with pytest.raises(ConfigurationError):
        options.replace(ack_timeout=0)


@pytest.mark.parametrize(
    "changes",
    [{"max_attempts": 0}, {"max_delay": -1}, {"initial": 2.0, "maximum": 1.0}, {"jitter": -0.1}],
)
def test_bad_retry_policy(changes: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**changes)  # type: ignore[arg-type]


def test_no_retry_policy_makes_one_attempt() -> None:
    assert RetryPolicy.no_retry().max_attempts == 1


def test_tls_reads_pem_paths_once(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nx\n")
    tls = TLSOptions(ca_cert=str(ca), server_name="liftbridge.local")
    assert tls.ca_cert == ca.read_bytes()
    assert pickle.loads(pickle.dumps(tls)) == tls
    # A pathlib.Path is a file path too (it was refused: "must be PEM bytes or a path str").
    assert TLSOptions(ca_cert=ca, server_name="liftbridge.local") == tls
    with pytest.raises(ConfigurationError, match="must be PEM bytes or a file path"):
        TLSOptions(ca_cert=42)  # type: ignore[arg-type]


def test_tls_rejects_half_a_client_identity_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="together"):
        TLSOptions(client_cert=b"cert")
    with pytest.raises(ConfigurationError, match="cannot read"):
        TLSOptions(ca_cert=str(tmp_path / "missing.pem"))


def test_single_threaded_reads_can_be_switched_off() -> None:
    from liftbridge_sync._transport.channels import ChannelPool

    key = "SingleThreadedUnaryStream"
    default = ChannelPool(ClientOptions(addresses=("h:1",)))
    assert key in dict(default._channel_options(streaming_reads=True))
    assert key not in dict(default._channel_options(streaming_reads=False))
    off = ChannelPool(ClientOptions(addresses=("h:1",), grpc_options=((key, 0),)))
    assert key not in dict(off._channel_options(streaming_reads=True))


@pytest.mark.parametrize("streaming_reads", [False, True])
def test_grpc_channels_ping_within_grpc_gos_default_enforcement(streaming_reads: bool) -> None:
    # grpc-go answers PINGs more often than every 5 minutes without data, or PINGs with
    # no call in progress, with GOAWAY too_many_pings.
    from liftbridge_sync._transport.channels import ChannelPool

    merged = dict(ChannelPool(ClientOptions(addresses=("h:1",)))._channel_options(streaming_reads))
    assert merged["grpc.keepalive_time_ms"] >= 300_000
    assert merged["grpc.keepalive_permit_without_calls"] == 0
    assert merged["grpc.http2.max_pings_without_data"] == 2
    # keepalive_interval drives it; None turns keepalive PINGs off; grpc_options win.
    off = ChannelPool(ClientOptions(addresses=("h:1",), keepalive_interval=None))
    assert "grpc.keepalive_time_ms" not in dict(off._channel_options(streaming_reads))
    mine = ChannelPool(
        ClientOptions(addresses=("h:1",), grpc_options=(("grpc.keepalive_time_ms", 600_000),))
    )
    assert dict(mine._channel_options(streaming_reads))["grpc.keepalive_time_ms"] == 600_000


@pytest.mark.parametrize("field", ["keepalive_interval", "keepalive_timeout"])
@pytest.mark.parametrize("value", [0.0009, 1e-9])
def test_keepalive_under_a_millisecond_is_refused_not_zero(field: str, value: float) -> None:
    # gRPC takes both in whole milliseconds: int(value * 1000) made them 0, which gRPC
    # documents no meaning for (the "h2" transports read it in grpc_options as "off").
    with pytest.raises(ConfigurationError, match=f"'{field}' must be at least 0.001 s"):
        ClientOptions(addresses=("h:1",), **cast(dict[str, Any], {field: value}))
    from liftbridge_sync._transport.channels import ChannelPool

    least = ChannelPool(ClientOptions(addresses=("h:1",), **cast(dict[str, Any], {field: 0.001})))
    merged = dict(least._channel_options(streaming_reads=False))
    assert min(merged["grpc.keepalive_time_ms"], merged["grpc.keepalive_timeout_ms"]) == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"addresses": ("a\x00b:1",)},  # gRPC cut the host at the NUL and dialled "a"
        {"addresses": ("\udc80x:1",)},  # UnicodeEncodeError on every call
        {"addresses": ("a b:1",)},
        {"addresses": ("a:1_0",)},  # int() took it
        {"addresses": ("a:\u0661\u0662",)},  # Arabic-Indic digits: int() took them
        {"max_receive_message_size": 2**31},  # OverflowError on every call
        {"grpc_options": (("grpc.foo", object()),)},  # TypeError on every call
        {"grpc_options": (("grpc.foo", 2**70),)},  # OverflowError on every call
        {"grpc_options": (("grpc.\ud800", 1),)},
        {"max_in_flight": 2**63},  # the C pending table's ssize_t: OverflowError on publish
        {"grpc_options": 5},  # a bare TypeError
        {"grpc_options": {"grpc.foo": 1}},  # iterated into (("g", "r", ...),)
        {"grpc_options": ["ab"]},  # was (("a", "b"),)
        {"grpc_options": "ab"},
        {"addresses": ("a:1,b:2",)},  # was the one host "[a:1,b]:2"
        {"addresses": ("a:b:1",)},
        # Python's socket module refuses these names (UnicodeError from its idna codec):
        # the h2 publisher thread died of it, and the client could never publish again.
        {"addresses": ("a..b:1",)},
        {"addresses": (".:1",)},
        {"addresses": ("a" * 64 + ".example:1",)},
        {"addresses": ("[]:1",)},  # was the address ":1"
    ],
)
def test_options_grpc_would_fail_on_untyped_are_refused_at_once(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ClientOptions(**{"addresses": ("h:1",), **changes})


@pytest.mark.parametrize(
    "name", [5, b"lb", "a b", "lb\x00x", "\udc80", "a..b", ".", "a" * 64 + ".example"]
)
def test_a_server_name_that_is_not_a_host_name_is_refused(name: object) -> None:
    with pytest.raises(ConfigurationError, match="server_name"):
        TLSOptions(server_name=name)  # type: ignore[arg-type]


def test_options_grpc_takes_still_pass() -> None:
    options = ClientOptions(
        addresses=("[::1]:9292", "host-1.example:65535"),
        max_receive_message_size=2**31 - 1,
        grpc_options=(("grpc.lb_policy_name", "pick_first"), ("grpc.enable_retries", 0)),
    )
    assert options.max_receive_message_size == 2**31 - 1


def test_every_option_is_a_typed_keyword_of_client() -> None:
    """``Client(addresses, **options)`` accepts every ClientOptions field, typed."""
    from typing import get_type_hints

    from liftbridge_sync.options import ClientKwargs

    fields = {field.name for field in dataclasses.fields(ClientOptions)} - {"addresses"}
    assert set(ClientKwargs.__annotations__) == fields
    hints = get_type_hints(ClientOptions)
    kwargs = get_type_hints(ClientKwargs)
    assert {name: kwargs[name] for name in fields} == {name: hints[name] for name in fields}


@pytest.mark.parametrize("url", ["http://127.0.0.1:9292", "grpc://lb:9292", "nats://lb:4222"])
def test_an_address_with_a_scheme_says_so(url: str) -> None:
    """It was called an IPv6-looking host without brackets (the colon after the scheme)."""
    with pytest.raises(ConfigurationError, match=r"has a scheme \(\w+://\): give 'host:port'"):
        Client(url)
