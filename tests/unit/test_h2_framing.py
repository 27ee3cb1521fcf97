"""The h2 transport's frame and message decoders, fed valid, truncated, oversized and garbage
bytes (property-based): they return whole frames or fail with a typed error, never anything
else."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync._transport.h2.framing import (
    FRAME_HEADER,
    MAX_FRAME_SIZE,
    FrameError,
    grpc_status,
    split_frames,
    split_messages,
)
from liftbridge_sync.errors import BrokerUnavailableError, LiftbridgeError


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload


def _message(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


_valid_frames = st.one_of(
    st.builds(lambda p, s: _frame(0, 0, s, p), st.binary(max_size=64), st.integers(1, 99)),
    st.builds(lambda p: _frame(6, 0, 0, p), st.binary(min_size=8, max_size=8)),
    st.builds(lambda n: _frame(4, 0, 0, b"\0" * 6 * n), st.integers(0, 3)),
    st.builds(
        lambda i, s: _frame(8, 0, s, struct.pack(">I", i)),
        st.integers(1, 1 << 30),
        st.integers(0, 9),
    ),
)


@settings(deadline=None)  # no timing in tests; a loaded machine is slow
@given(st.lists(_valid_frames, max_size=20), st.data())
def test_valid_frames_split_whole_and_truncation_waits(
    frames: list[bytes], data: st.DataObject
) -> None:
    buf = b"".join(frames)
    parsed, used = split_frames(buf)
    assert used == len(buf) and len(parsed) == len(frames)
    for (kind, _, stream, start, end), raw in zip(parsed, frames, strict=True):
        assert buf[start - 9 : end] == raw
        assert (kind, stream) == (raw[3], int.from_bytes(raw[5:9], "big"))
    # Any cut leaves the partial frame for later: only whole frames come back.
    cut = data.draw(st.integers(0, len(buf)))
    parsed_cut, used_cut = split_frames(buf[:cut])
    assert used_cut <= cut and parsed_cut == parsed[: len(parsed_cut)]
    assert used_cut == sum(len(f) for f in frames[: len(parsed_cut)])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_frames_fail_cleanly(garbage: bytes) -> None:
    try:
        parsed, used = split_frames(garbage)
    except FrameError as exc:
        assert isinstance(exc, BrokerUnavailableError) and exc.retryable
        return
    assert 0 <= used <= len(garbage)
    for _, _, _, start, end in parsed:
        assert 9 <= start <= end <= used


@settings(deadline=None)  # no timing in tests; a loaded machine is slow
@given(st.integers(MAX_FRAME_SIZE + 1, (1 << 24) - 1), st.integers(0, 9))
def test_oversized_frames_are_refused_before_their_payload_arrives(length: int, kind: int) -> None:
    header = FRAME_HEADER.pack(length << 8 | kind, 0, 1)
    with pytest.raises(FrameError, match="limit"):
        split_frames(header)


@pytest.mark.parametrize(
    ("kind", "flags", "stream", "payload"),
    [
        (0, 0, 0, b"x"),  # DATA on stream 0
        (6, 0, 1, b"\0" * 8),  # PING on a stream
        (6, 0, 0, b"\0" * 7),  # PING of the wrong length
        (4, 0, 0, b"\0" * 5),  # SETTINGS not a multiple of 6
        (7, 0, 0, b"\0" * 4),  # GOAWAY too short
        (3, 0, 1, b"\0" * 3),  # RST_STREAM of the wrong length
        (0, 0x8, 1, b"\x05abc"),  # padding longer than the frame
        # HEADERS (END_STREAM, END_HEADERS, PADDED, PRIORITY): padding reaching into the
        # 5 bytes of priority fields (h2 took it for an empty header block, trailers
        # without grpc-status), and a frame too short for those fields
        (1, 0x2D, 1, b"\x03" + b"\0" * 5 + b"\x88"),
        (1, 0x25, 1, b"\0" * 4),
    ],
)
def test_frames_breaking_the_rules_are_typed_errors(
    kind: int, flags: int, stream: int, payload: bytes
) -> None:
    with pytest.raises(FrameError):
        split_frames(_frame(kind, flags, stream, payload))


@settings(deadline=None)  # no timing in tests; a loaded machine is slow
@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_messages_split_whole(payloads: list[bytes], data: st.DataObject) -> None:
    buf = b"".join(_message(p) for p in payloads)
    messages, used = split_messages(buf)
    assert messages == payloads and used == len(buf)
    cut = data.draw(st.integers(0, len(buf)))
    partial, used_cut = split_messages(buf[:cut])
    assert partial == payloads[: len(partial)] and used_cut <= cut


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_messages_fail_cleanly(garbage: bytes) -> None:
    try:
        messages, used = split_messages(garbage, max_size=1 << 16)
    except FrameError as exc:
        assert isinstance(exc, LiftbridgeError) and exc.code in ("INTERNAL", "RESOURCE_EXHAUSTED")
        return
    assert used <= len(garbage) and sum(len(m) + 5 for m in messages) == used


def test_compressed_and_oversized_messages_are_refused() -> None:
    with pytest.raises(FrameError, match="compressed"):
        split_messages(b"\x01\0\0\0\x01x")
    with pytest.raises(FrameError, match="limit"):
        split_messages(struct.pack(">BI", 0, 100), max_size=99)


def test_grpc_status_decodes_percent_encoded_messages() -> None:
    assert grpc_status({b"grpc-status": b"14", b"grpc-message": b"no%20leader"}) == (
        14,
        "no leader",
    )
    assert grpc_status({b"grpc-status": b"x"}) == (2, "")
    # Only ASCII digits are a status: what int() would also read is UNKNOWN, not 14.
    for loose in (b"1_4", b"+14", b" 14", b"14 ", b"\xd9\xa1\xd9\xa4", b"", b"9" * 5000):
        assert grpc_status({b"grpc-status": loose}) == (2, ""), loose
    assert grpc_status({b"grpc-status": b"0"}) == (0, "")
    assert grpc_status({}) == (None, "")
