"""Client-side argument checks (the server crashes on some bad inputs)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from liftbridge_sync import ArgumentTypeError, Client, ConfigurationError, RetryPolicy
from liftbridge_sync._wire.publish_codec import head
from liftbridge_sync._wire.requests import (
    check_publish_stream,
    create_stream_request,
    publish_to_subject_request,
)
from liftbridge_sync._wire.validate import (
    check_bytes,
    check_headers,
    check_id,
    check_name,
    check_partitions,
    check_publish_subject,
    check_stream_subject,
    check_subject,
    check_timeout,
    duration_ms,
)
from liftbridge_sync.models import AckPolicy


@pytest.mark.parametrize("bad", ["", " ", "a b", "tab\t", "nl\n", "\x00", "__cursors", 3])
def test_bad_stream_names(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        check_name("name", bad)


@pytest.mark.parametrize("bad", ["", "a..b", ".a", "a.", "a b"])
def test_bad_subjects(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        check_subject("subject", bad)


@pytest.mark.parametrize(
    ("subject", "partitions", "valid"),
    [
        ("a.*", 3, True),  # "a.*.1" and "a.*.2" are valid subjects
        ("*", 2, True),
        ("a.>", 1, True),
        ("a.b.>", 1, True),
        ("a.>", 2, False),
        ("a.>.b", 1, False),
        (">.a", 1, False),
        (">", 1, False),
    ],
)
def test_stream_subject_wildcards(subject: str, partitions: int, valid: bool) -> None:
    if valid:
        assert check_stream_subject("subject", subject, partitions=partitions) == subject
    else:
        with pytest.raises(ConfigurationError, match="'>'"):
            check_stream_subject("subject", subject, partitions=partitions)


@pytest.mark.parametrize("reserved", ["__cursors", "__activity"])
def test_the_servers_own_streams_are_refused_as_publish_targets(reserved: str) -> None:
    with pytest.raises(ConfigurationError, match="is reserved by the server"):
        check_publish_stream(reserved)
    with pytest.raises(ConfigurationError, match="is reserved by the server"):
        head(reserved, 0, AckPolicy.LEADER)


# Each of these killed a v1.9.0 server for good (panic in its Raft apply, again on restart).
SERVER_KILLING_NAMES = [".", "..", ".a", "a.", "a..b", "../x", "orders.", "*", "a.>", "n" * 256]


@pytest.mark.parametrize("bad", SERVER_KILLING_NAMES)
def test_names_the_server_cannot_store_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="'name'"):
        check_name("name", bad)
    # Nothing listens on port 1: reaching the wire would raise BrokerUnavailableError.
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        with pytest.raises(ConfigurationError):
            client.create_stream("s", bad)


@pytest.mark.parametrize(
    "bad",
    [
        "liftbridge-default.raft.metadata.bootstrap",
        "raft.metadata.bootstrap",
        "a.b.raft.metadata.bootstrap.reply",
    ],
)
def test_the_bootstrap_subject_is_refused_where_messages_would_reach_it(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="'subject'.*raft.metadata.bootstrap"):
        check_subject("subject", bad)
    with pytest.raises(ConfigurationError, match="raft.metadata.bootstrap"):
        check_publish_subject("subject", bad)
    # A queue group's name carries no message.
    assert check_subject("group", bad, carries_messages=False) == bad
    # Nothing listens on port 1: reaching the wire would raise BrokerUnavailableError.
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        with pytest.raises(ConfigurationError):
            client.create_stream(bad, "s")
        with pytest.raises(ConfigurationError):
            client.publish_to_subject(bad, b"x")


def test_subjects_with_only_some_bootstrap_tokens_are_allowed() -> None:
    for good in ["raft.metadata", "raft.metadata.bootstraps", "x.raft.meta.bootstrap"]:
        assert check_subject("subject", good) == good


@pytest.mark.parametrize("bad", ["a/b", "..\\x", "/abs"])
def test_path_separators_are_refused_at_creation_only(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="outside its own directory|token"):
        check_name("name", bad, creating=True)


def test_longest_names_and_subjects_allowed() -> None:
    assert check_name("name", "n" * 255) == "n" * 255
    assert check_name("name", "é" * 127)  # 254 bytes
    with pytest.raises(ConfigurationError, match="255 bytes"):
        check_name("name", "é" * 128)  # 256 bytes
    assert check_subject("subject", "s" * 1024)
    with pytest.raises(ConfigurationError, match="1024 bytes"):
        check_subject("subject", "s" * 1025)


@pytest.mark.parametrize("bad", ["*", ">", "orders.*", "orders.>", "*.eu"])
def test_wildcards_are_refused_where_a_subject_is_published_to(bad: str) -> None:
    assert check_subject("subject", bad) == bad  # a stream may listen on it
    assert check_publish_subject("subject", "a*b.c>") == "a*b.c>"  # not whole tokens
    with pytest.raises(ConfigurationError, match="wildcards"):
        check_publish_subject("subject", bad)
    with pytest.raises(ConfigurationError, match="'subject'.*wildcards"):
        publish_to_subject_request(
            bad,
            b"v",
            key=None,
            headers=None,
            ack_policy=AckPolicy.LEADER,
            ack_inbox=None,
            correlation_id=None,
        )
    with pytest.raises(ConfigurationError, match="'ack_inbox'.*wildcards"):
        publish_to_subject_request(
            "orders",
            b"v",
            key=None,
            headers=None,
            ack_policy=AckPolicy.LEADER,
            ack_inbox=bad,
            correlation_id=None,
        )


def test_good_subject_and_reserved_name_when_allowed() -> None:
    assert check_subject("subject", "orders.eu.*") == "orders.eu.*"
    assert check_name("stream", "__cursors", allow_reserved=True) == "__cursors"


def test_durations_in_milliseconds() -> None:
    assert duration_ms("d", 1.5) == 1500
    # The longest a server duration holds (int64 nanoseconds of milliseconds).
    assert duration_ms("d", 9_223_372_036.0) == 9_223_372_036_000
    assert duration_ms("d", float("inf"), inf_is_zero=True) == 0
    assert duration_ms("d", timedelta(minutes=1)) == 60_000
    assert duration_ms("d", 0) == 0
    assert duration_ms("d", None) is None
    for bad in (0.0001, -1, float("inf"), "5s", True):
        with pytest.raises(ConfigurationError):
            duration_ms("d", bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        duration_ms("d", 0, allow_zero=False)


def test_partition_lists() -> None:
    assert check_partitions("p", None) == []
    assert check_partitions("p", [2, 0, 2]) == [0, 2]
    for bad in ([], [-1], ["0"], "01", [2**31]):
        with pytest.raises(ConfigurationError):
            check_partitions("p", bad)  # type: ignore[arg-type]


def test_payloads_must_be_bytes_like() -> None:
    assert check_bytes("value", bytearray(b"x")) == b"x"
    assert check_bytes("value", memoryview(b"y")) == b"y"
    assert check_bytes("key", None, optional=True) is None
    with pytest.raises(TypeError, match=r"encode\(\)"):
        check_bytes("value", "text")
    with pytest.raises(TypeError):
        check_bytes("value", 5)
    assert check_headers({"a": b"1"}) == {"a": b"1"}
    with pytest.raises(TypeError):
        check_headers({"a": "1"})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="must not be empty"):
        check_headers({"": b"1"})
    # protobuf would raise a bare ValueError on a name that is not valid UTF-8.
    with pytest.raises(ConfigurationError, match="UTF-8"):
        check_headers({"\ud800": b"1"})


def test_header_names_are_at_most_32767_bytes_of_utf8() -> None:
    # The server logs a name with an int16 length and panics on a longer one.
    assert check_headers({"a" * 32767: b""}) == {"a" * 32767: b""}
    with pytest.raises(ConfigurationError, match="32768 bytes"):
        check_headers({"a" * 32768: b""})
    with pytest.raises(ConfigurationError, match="32769 bytes"):
        check_headers({"€" * 10923: b""})  # 10923 characters, 32769 bytes


def _request(**changes: object) -> object:
    args: dict[str, object] = dict(
        subject="s",
        name="n",
        partitions=1,
        replication_factor=1,
        group=None,
        retention_max_bytes=None,
        retention_max_messages=None,
        retention_max_age=None,
        cleaner_interval=None,
        segment_max_bytes=None,
        segment_max_age=None,
        compact_enabled=None,
        compact_max_goroutines=None,
        auto_pause_time=None,
        auto_pause_disable_if_subscribers=None,
        min_isr=None,
        optimistic_concurrency_control=None,
        encryption=None,
    )
    args.update(changes)
    return create_stream_request(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"partitions": 0},
        {"partitions": -3},
        {"partitions": 2**31},
        # The server allocates the partition list before any check: a broker's memory.
        {"partitions": 1_001},  # and files and memory on every replica
        # NATS allows '>' last only: the server's connection broke, and it never restarted.
        {"subject": "a.>.b"},
        {"subject": "a.>", "partitions": 2},  # partition 1 listens on "a.>.1"
        {"subject": ">"},  # every message of the NATS server, the server's own too
        # Longer than Go's int64 nanoseconds hold: wraps negative, every broker panics.
        {"cleaner_interval": 1e10},
        {"retention_max_age": timedelta.max},
        {"segment_max_age": timedelta(days=999_999_999)},
        {"auto_pause_time": 9_223_372_037.0},
        {"partitions": 1.0},
        {"replication_factor": 0},
        {"replication_factor": -2},
        {"retention_max_bytes": -1},
        {"retention_max_messages": -5},
        {"segment_max_bytes": 0},
        {"cleaner_interval": 0},
        {"compact_max_goroutines": 0},
        {"min_isr": 0},
        {"min_isr": 3, "replication_factor": 2},
        {"encryption": "yes"},
        {"group": ""},
        {"name": ""},
    ],
)
def test_create_stream_rejects_bad_arguments(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        _request(**changes)


def test_create_stream_options_map_to_nullable_wrappers() -> None:
    req = _request(
        partitions=4,
        replication_factor=-1,
        retention_max_age=timedelta(hours=1),
        segment_max_age=0,
        compact_enabled=False,
        min_isr=2,
        optimistic_concurrency_control=True,
    )
    assert req.partitions == 4 and req.replicationFactor == -1  # type: ignore[attr-defined]
    assert req.retentionMaxAge.value == 3_600_000  # type: ignore[attr-defined]
    # An explicit zero/false is sent (wrapper present); None leaves the wrapper out.
    assert req.HasField("segmentMaxAge") and req.segmentMaxAge.value == 0  # type: ignore[attr-defined]
    assert req.HasField("compactEnabled") and not req.compactEnabled.value  # type: ignore[attr-defined]
    assert not req.HasField("retentionMaxBytes")  # type: ignore[attr-defined]
    assert req.minIsr.value == 2 and req.optimisticConcurrencyControl.value  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [object(), type("NotCallable", (), {"partition": 5})()])
def test_partitioner_without_a_callable_partition_is_refused(bad: object) -> None:
    from liftbridge_sync import Client

    # Nothing listens on port 1: reaching the network would raise something else.
    with Client("127.0.0.1:1") as client:
        with pytest.raises(ConfigurationError, match="partitioner"):
            client.publish_async("s", b"v", partitioner=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("nan"), -1, -0.5, 3e6, float("-inf")])
def test_timeouts_that_could_break_a_timer_are_refused(bad: float) -> None:
    with pytest.raises(ConfigurationError):
        check_timeout("timeout", bad)
    before = set(threading.enumerate())
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        with pytest.raises(ConfigurationError):
            client.publish_async("s", b"x", timeout=bad)
        with pytest.raises(ConfigurationError):
            client.flush(bad)
        # Refused before anything started: no publisher thread.
        assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("lift")]


def test_infinite_waits_mean_no_limit_but_never_for_acks() -> None:
    assert check_timeout("timeout", float("inf")) is None
    assert check_timeout("timeout", 0) == 0.0
    with pytest.raises(ConfigurationError, match="finite"):
        with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
            client.publish_async("s", b"x", timeout=float("inf"))
    with pytest.raises(ConfigurationError):
        check_timeout("timeout", "1")


def test_ids_are_utf8_text_and_cursor_keys_stay_unambiguous() -> None:
    """protobuf raises a bare UnicodeEncodeError on a str that is not UTF-8 (a surrogate
    from a bytes-decoded argument), and the server keys a cursor by
    "<cursor id>,<stream>,<partition>": ids "a" + stream "b,c" and "a,b" + "c" met."""
    from liftbridge_sync._wire.validate import check_id

    assert check_id("cursor_id", "orders-reader") == "orders-reader"
    assert check_id("consumer_id", None, optional=True) is None
    for bad, error in (
        ("\ud800", ConfigurationError),
        ("a,b", ConfigurationError),
        ("", ConfigurationError),
        (7, ArgumentTypeError),
        (None, ArgumentTypeError),
    ):
        with pytest.raises(error):
            check_id("cursor_id", bad)
    # A required id's type error does not offer None, which is refused too.
    with pytest.raises(ArgumentTypeError, match="'group' must be a str, got int"):
        check_id("group", 5)
    with pytest.raises(ConfigurationError, match="^'cursor_id' must be a non-empty str$"):
        check_id("cursor_id", "")  # nor does its empty-string error (a checkpoint's)
    with Client("127.0.0.1:1") as client:  # refused before anything is sent
        with pytest.raises(ConfigurationError, match="'cursor_id' must not contain ','"):
            client.set_cursor("a,b", "c", 0, 1)
        with pytest.raises(ConfigurationError, match="'group' is not valid UTF-8"):
            client.consumer("\ud800", streams=["s"], auto_commit=None)
        with pytest.raises(ArgumentTypeError, match="'streams' must be a sequence"):
            client.consumer("g", streams=1.5, auto_commit=None)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="'correlation_id' is not valid UTF-8"):
            client.publish_async("s", b"v", correlation_id="\ud800")


def test_a_call_that_lost_the_race_with_close_says_the_client_closed() -> None:
    """The stub is looked up, then another thread's close() closes its channel, then the
    call is made: grpcio raises a bare ValueError ("Channel closed!"), and an RPC under
    way ends CANCELLED, which read as the server's doing."""
    from liftbridge_sync import ClientClosedError
    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync._wire import rpcs
    from liftbridge_sync._wire.status import CallContext

    client = Client("127.0.0.1:1")
    core = client._core
    stub = core.pool.stub("127.0.0.1:1")
    client.close()
    core.pool.stub = lambda address, **_: stub  # type: ignore[method-assign,assignment,misc]
    with pytest.raises(ClientClosedError, match="FetchMetadata: the client was closed"):
        core.invoke(
            "127.0.0.1:1",
            rpcs.FETCH_METADATA,
            api_pb2.FetchMetadataRequest(),
            context=CallContext.GENERIC,
            timeout=1.0,
        )


def test_at_most_65535_headers_with_the_servers_subject_and_reply() -> None:
    # The server writes the count in 16 bits and adds "subject" and "reply".
    most = {f"h{i}": b"" for i in range(65533)}
    assert len(check_headers(most)) == 65533
    with pytest.raises(ConfigurationError, match="65534 headers are too many"):
        check_headers({**most, "one-more": b""})
    # Names the server overwrites count once.
    assert len(check_headers({**most, "subject": b"s", "reply": b"r"})) == 65535
    with pytest.raises(ConfigurationError, match="65536 headers are too many"):
        check_headers({**most, "subject": b"s", "reply": b"r", "x": b""})


@pytest.mark.parametrize("bad", [" ", "\t", "a\nb", "\x00", "a\x7fb", "x" * 1025, "é" * 513])
def test_blank_control_and_overlong_ids_are_refused(bad: str) -> None:
    """A probe found these taken silently as cursor, group and consumer ids (a 100,000
    character cursor id rode in the key of every cursor message)."""
    with Client("127.0.0.1:1") as client:  # refused before anything is sent
        with pytest.raises(ConfigurationError, match="'cursor_id' must"):
            client.set_cursor(bad, "s", 0, 1)
        with pytest.raises(ConfigurationError, match="'cursor_id' must"):
            client.fetch_cursor(bad, "s", 0)
        with pytest.raises(ConfigurationError, match="'group' must"):
            client.consumer(bad, streams=["s"], auto_commit=None)
        with pytest.raises(ConfigurationError, match="'consumer_id' must"):
            client.consumer("g", streams=["s"], auto_commit=None, consumer_id=bad)
    # Spaces inside an id, other scripts, and up to 1,024 bytes stay valid.
    for good in ("orders reader", "lecteur-é", "x" * 1024):
        assert check_id("cursor_id", good) == good
