"""Received headers against the real server: a read-only mapping, missing keys absent."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_sync import Client, StartAt, StopAt

from .conftest import StreamFactory

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_received_headers_are_a_read_only_dict(
    liftbridge_address: str, new_stream: StreamFactory, transport: str
) -> None:
    name = new_stream()
    sent = [{"trace": b"t-1", "bin": b"\x00\xff", "empty": b""}, {}]
    with Client(
        liftbridge_address, publish_transport=transport, subscribe_transport=transport
    ) as client:
        for headers in sent:
            client.publish(name, b"v", headers=headers)
        got = list(client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()))
        metadata = client.fetch_metadata(name)
    assert len(got) == 2
    for msg, headers in zip(got, sent, strict=True):
        # The server adds the NATS subject and reply subject to every message.
        expected = {**headers, "subject": name.encode(), "reply": b""}
        assert dict(msg.headers) == expected
        h = msg.headers
        missing: Any
        for missing in ("missing", "Trace", "", b"trace", 1):
            assert h.get(missing) is None
            assert h.get(missing, b"default") == b"default"
            assert missing not in h
            with pytest.raises(KeyError):
                h[missing]
        assert h.get("subject") == name.encode() and "subject" in h
        if headers:
            assert h["empty"] == b"" and "empty" in h and h.get("empty", b"x") == b""
        # No lookup added a key: the message still has exactly what was stored.
        assert dict(msg.headers) == expected and len(msg.headers) == len(expected)
        assert msg.headers == expected
    assert "no-such-stream" not in metadata.streams
    assert metadata.streams.get("no-such-stream") is None
    assert 7 not in metadata.streams[name].partitions
    with pytest.raises(KeyError):
        metadata.streams[name].partitions[7]
    assert list(metadata.streams[name].partitions) == [0]


def test_a_header_name_the_server_cannot_log_is_refused() -> None:
    """The server logs a header name with an int16 length: a 32768-byte name panicked the
    partition leader (own server: it died). The longest it holds is stored and read back."""
    from liftbridge_sync import ConfigurationError
    from liftbridge_sync.testing import LiftbridgeServer

    longest = "é" * (2**14 - 1) + "x"  # 32767 bytes of UTF-8, 16384 characters
    too_long = "é" * 2**14  # 32768 bytes, fewer characters than the longest
    with LiftbridgeServer() as server, Client(server.address, ack_timeout=10) as client:
        client.create_stream("long-header", "long-header")
        with pytest.raises(ConfigurationError, match="32768 bytes"):
            client.publish("long-header", b"v", headers={too_long: b"x"})
        with pytest.raises(ConfigurationError, match="32768 bytes"):
            client.publish_to_subject("long-header", b"v", headers={too_long: b"x"})
        ack = client.publish("long-header", b"v", headers={longest: b"x"})
        assert ack is not None and ack.offset == 0
        [msg] = client.subscribe("long-header", start=StartAt.earliest(), stop=StopAt.latest())
        assert msg.headers[longest] == b"x"
        assert server.running


def test_more_headers_than_the_server_counts_are_refused(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    """The server counts headers in 16 bits with its own two: 65534 of ours were stored
    and read back as none at all. The most it holds are read back whole."""
    from liftbridge_sync import ConfigurationError

    name = new_stream()
    most = {f"h{i}": b"" for i in range(65533)}
    with pytest.raises(ConfigurationError, match="too many"):
        liftbridge_client.publish(name, b"v", headers={**most, "one-more": b""})
    liftbridge_client.publish(name, b"v", headers=most)
    got = list(liftbridge_client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()))
    assert [len(m.headers) for m in got] == [65535]


def test_the_server_replaces_published_subject_and_reply_headers(
    liftbridge_client: Client, new_stream: StreamFactory
) -> None:
    # As the docstrings say: a message read back can be published again with its
    # headers as they are, and the copy carries its own stream's subject.
    source, copy = new_stream(), new_stream()
    liftbridge_client.publish(source, b"v", headers={"subject": b"mine", "reply": b"x", "h": b"1"})
    with liftbridge_client.subscribe(source, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        (first,) = list(sub)
    assert dict(first.headers) == {"subject": source.encode(), "reply": b"", "h": b"1"}
    liftbridge_client.publish(copy, first.value, headers=first.headers)
    with liftbridge_client.subscribe(copy, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        (copied,) = list(sub)
    assert dict(copied.headers) == {"subject": copy.encode(), "reply": b"", "h": b"1"}
