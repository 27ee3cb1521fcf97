"""A frame on a stream neither side opened is a connection error (RFC 9113 §5.1).

On an idle stream only HEADERS and PRIORITY may arrive; ``h2`` refuses the others but
for RST_STREAM and WINDOW_UPDATE, which it took without a word: a broker sending them
is confused about the streams of the connection, and its answers are not to be trusted.
"""

from __future__ import annotations

import struct

import pytest

from liftbridge_sync._transport.h2.framing import (
    FRAME_HEADER,
    GOAWAY,
    split_frames,
    window_update,
)
from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync.errors import BrokerUnavailableError
from tests.unit.h2_streams import open_stream

_RST_STREAM, _PRIORITY = 3, 2


def _rst_stream(stream: int) -> bytes:
    return FRAME_HEADER.pack(4 << 8 | _RST_STREAM, 0, stream) + struct.pack(">I", 8)


@pytest.mark.parametrize("stream", [3, 2, 101])
@pytest.mark.parametrize("kind", ["RST_STREAM", "WINDOW_UPDATE"])
def test_a_frame_on_an_idle_stream_ends_the_connection(kind: str, stream: int) -> None:
    client, _, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    frame = _rst_stream(stream) if kind == "RST_STREAM" else window_update(stream, 10)
    reader.receive(frame)
    assert reader.ended
    assert isinstance(reader.error, BrokerUnavailableError)
    out = bytes(reader.credit_frames)
    frames, _ = split_frames(out)
    goaways = [out[start:end] for kind, _, _, start, end in frames if kind == GOAWAY]
    assert [payload[4:8] for payload in goaways] == [struct.pack(">I", 0x1)]  # PROTOCOL_ERROR


def test_priority_on_an_idle_stream_and_frames_of_our_own_stream_are_taken() -> None:
    client, _, answer = open_stream()
    reader = ResponseReader(client, 1)
    reader.receive(answer)
    priority = FRAME_HEADER.pack(5 << 8 | _PRIORITY, 0, 3) + struct.pack(">IB", 0, 16)
    reader.receive(priority + window_update(1, 10) + window_update(0, 10))
    assert not reader.ended
