"""Frames of streams that are not ours, and frames inside an open header block.

h2, as a client, takes a stream the broker opens without complaint, and the publish
stream's reader used to act on every event h2 gave back: another stream's DATA went into
our messages and its end ended our stream. A gRPC server never opens a stream (push is
off): that is a connection error (RFC 9113 §5.1.1).
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.exceptions
import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2.framing import FRAME_HEADER, PREFIX
from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync.models import Ack
from tests.unit.h2_streams import open_stream

_HEADERS, _DATA, _CONTINUATION, _PING = 1, 0, 9, 6
_END_STREAM, _END_HEADERS = 0x1, 0x4


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload


def _ack_data(correlation_id: str, stream: int = 1) -> bytes:
    body = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId=correlation_id))
    raw = body.SerializeToString()
    return _frame(_DATA, 0, stream, PREFIX.pack(0, len(raw)) + raw)


def test_a_stream_the_broker_opens_ends_the_connection() -> None:
    client, server, answer = open_stream()
    reader = ResponseReader(client, 1)
    assert reader.receive(answer) == [] and not reader.ended
    block = server.encoder.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", "/x"), (":authority", "a")]
    )
    opened = _frame(_HEADERS, _END_HEADERS, 2, block)
    foreign = _frame(_DATA, _END_STREAM, 2, PREFIX.pack(0, 3) + b"abc")
    assert reader.receive(opened + foreign) == []
    assert reader.ended and reader.error is not None
    assert "opened stream 2" in str(reader.error)
    assert b"\x00\x00\x08\x07" in bytes(reader.credit_frames)  # a GOAWAY went out


def test_our_own_acks_still_arrive() -> None:
    client, _, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    got = reader.receive(_ack_data("a") + _ack_data("b"))
    assert [a.correlation_id for a in got if isinstance(a, Ack)] == ["a", "b"]
    assert not reader.ended


def test_frames_inside_an_open_header_block_are_a_connection_error() -> None:
    """Trailers begun without END_HEADERS: until their CONTINUATION, any other frame
    is a connection error (RFC 9113 §6.10), not a message, a PING to answer or a
    GOAWAY to act on."""
    client, server, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    block = server.encoder.encode([("grpc-status", "0")])
    begun = _frame(_HEADERS, _END_STREAM, 1, block[:1])
    ping = _frame(_PING, 0, 0, b"12345678")
    with pytest.raises(h2.exceptions.ProtocolError, match="during header block"):
        reader.receive(begun + _ack_data("inside") + ping)  # the connection ends with it
    assert b"12345678" not in bytes(reader.credit_frames)  # the PING was not answered
    # Split across reads, the same: the frame after the begun block goes to h2 too.
    client, server, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    assert reader.receive(begun) == []
    with pytest.raises(h2.exceptions.ProtocolError, match="during header block"):
        reader.receive(_ack_data("inside"))


def test_trailers_split_by_a_continuation_still_end_the_stream() -> None:
    client, server, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    block = server.encoder.encode([("grpc-status", "0")])
    split = _frame(_HEADERS, _END_STREAM, 1, block[:1]) + _frame(
        _CONTINUATION, _END_HEADERS, 1, block[1:]
    )
    assert [a.correlation_id for a in reader.receive(_ack_data("a") + split)] == ["a"]
    assert reader.ended and reader.error is None
