"""The receive limit and the output cap of the HTTP/2 transports (see h2/limits.py)."""

from __future__ import annotations

import socket

import pytest

from liftbridge_sync import ClientOptions
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.channels import ChannelPool
from liftbridge_sync._transport.h2.framing import FRAME_HEADER, PREFIX
from liftbridge_sync._transport.h2.limits import max_message_size
from liftbridge_sync._transport.h2.outbound import frame_data
from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync._transport.h2.sockets import bound_unacknowledged
from liftbridge_sync._transport.h2.stalls import StallWatch
from liftbridge_sync.errors import ConfigurationError, LiftbridgeError
from tests.unit.h2_streams import open_stream


def _data(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8, 0, 1) + payload


def test_the_default_receive_limit_is_grpcs_and_options_change_it() -> None:
    assert max_message_size(ClientOptions(addresses=("a:1",))) == 4 << 20
    options = ClientOptions(addresses=("a:1",), max_receive_message_size=1 << 20)
    assert max_message_size(options) == 1 << 20
    # grpcio's own option still wins where it is set (as it does on the channels).
    legacy = options.replace(grpc_options=(("grpc.max_receive_message_length", 4096),))
    assert max_message_size(legacy) == 4096
    for bad in (0, 1023, True, 2.5, "big"):
        with pytest.raises(ConfigurationError, match="max_receive_message_size"):
            ClientOptions(addresses=("a:1",), max_receive_message_size=bad)  # type: ignore[arg-type]


def test_the_grpcio_channels_get_the_same_receive_limit() -> None:
    options = ClientOptions(addresses=("a:1",), max_receive_message_size=1 << 20)
    pool = ChannelPool(options)
    try:
        assert dict(pool._channel_options(False))["grpc.max_receive_message_length"] == 1 << 20
        legacy = ChannelPool(
            options.replace(grpc_options=(("grpc.max_receive_message_length", 5000),))
        )
        try:
            assert dict(legacy._channel_options(True))["grpc.max_receive_message_length"] == 5000
        finally:
            legacy.close()
    finally:
        pool.close()


@pytest.mark.parametrize("in_one_frame", [True, False])
def test_a_publish_response_over_the_limit_ends_the_stream(in_one_frame: bool) -> None:
    conn, _, headers = open_stream()
    reader = ResponseReader(conn, 1, max_message=2048)
    assert reader.receive(headers) == [] and not reader.ended
    body = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="c" * 3000)).SerializeToString()
    message = PREFIX.pack(0, len(body)) + body
    frames = _data(message) if in_one_frame else _data(message[:1000]) + _data(message[1000:])
    assert reader.receive(frames) == []
    assert reader.ended and isinstance(reader.error, LiftbridgeError)
    assert "limit 2048" in str(reader.error)


def test_under_the_limit_a_response_is_read() -> None:
    conn, _, headers = open_stream()
    reader = ResponseReader(conn, 1, max_message=4096)
    reader.receive(headers)
    body = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="c" * 3000)).SerializeToString()
    got = reader.receive(_data(PREFIX.pack(0, len(body)) + body))
    assert len(got) == 1 and not reader.ended


def test_framing_stops_at_the_output_cap() -> None:
    conn, _, _ = open_stream()
    out = bytearray(b"x" * 1000)
    data = bytearray(b"d" * 50_000)
    pos = frame_data(conn, 1, data, 0, out, limit=20_000)
    assert len(out) == 20_000  # headers included: exactly up to the cap
    assert 0 < pos < 20_000
    assert frame_data(conn, 1, data, pos, out, limit=20_000) == pos  # full: nothing more


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux only")
def test_unacknowledged_data_is_bounded_by_tcp_user_timeout() -> None:
    with socket.socket() as sock:
        bound_unacknowledged(sock, 2.5)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
        bound_unacknowledged(sock, 0.0001)  # never 0, which would mean "the default"
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 1


def test_a_stall_pings_once_per_answer_and_only_while_acks_are_due() -> None:
    watch = StallWatch(4.0)
    assert watch.wake_in() == 1.0
    assert watch.check(100.0, last_read=0.0, due=0) is None  # nothing owed: fine
    assert watch.check(101.0, last_read=0.0, due=3) is None  # owed for 1 s only
    assert watch.check(102.0, last_read=0.0, due=3) == 2.0  # 2 s silent: PING, wait 2 s
    assert watch.check(110.0, last_read=0.0, due=3) is None  # one PING per answer
    assert watch.check(111.0, last_read=110.5, due=3) is None
    watch.answered()  # an ack arrived: the broker lives, a new stall may PING again
    assert watch.check(112.0, last_read=111.0, due=2) is None
    assert watch.check(113.0, last_read=111.0, due=2) == 2.0
