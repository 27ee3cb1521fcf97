"""The SBP v0.1 frame layer (shared/seeds/streaming-batch-protocol-v0.1.md)."""

from __future__ import annotations

import pickle
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError, LiftbridgeError
from liftbridge_sync.sbp import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_OVERHEAD,
    MAGIC,
    MAX_FRAME_SIZE_LIMIT,
    MAX_HEADER_LENGTH,
    MIN_FRAME_SIZE,
    SEQUENCE_OVERHEAD,
    DiscardedFrame,
    DiscardReason,
    Flags,
    Frame,
    FrameDecoder,
    FrameTooLargeError,
    FramingError,
    HeaderFormat,
    InvalidFrameError,
    MalformedFrameError,
    Opcode,
    Response,
    ResponseAssembler,
    ResponseSequenceError,
    ResponseTooLargeError,
    SBPError,
    SBPSystemError,
    TruncatedFrameError,
    decode_frame,
    encode_frame,
)

Event = Frame | DiscardedFrame

# Every @given test runs with deadline=None: a loaded CI machine must not make it flaky.

# The spec's table of frame types, as printed.
SPEC_TABLE = {
    0x0001: "PING",
    0x0002: "GOAWAY",
    0x0003: "HEARTBEAT",
    0x0004: "ALLOCATE_ID",
    0x1001: "APPEND",
    0x1002: "FETCH",
    0x2001: "LIST_RANGES",
    0x2002: "SEAL_RANGE",
    0x2003: "SYNC_RANGES",
    0x2004: "CRATE_RANGE",
    0x2005: "DESCRIBE_RANGE",
    0x3001: "CREATE_STREAMS",
    0x3002: "DELETE_STREAMS",
    0x3003: "UPDATE_STREAMS",
    0x3004: "DESCRIBE_STREAMS",
    0x3005: "TRIM_STREAMS",
    0x4001: "REPORT_METRICS",
    0x4002: "DESCRIBE_PD_CLUSTER",
}


def raw_frame(
    *,
    magic: int = MAGIC,
    opcode: int = 0x0001,
    flags: int = 0,
    stream_id: int = 0,
    fmt: int = 1,
    header: bytes = b"",
    payload: bytes = b"",
    length: int | None = None,
    header_length: int | None = None,
) -> bytes:
    """Build frame bytes by hand, field by field, independently of the code under test."""
    body = (
        bytes([magic])
        + opcode.to_bytes(2, "big")
        + bytes([flags])
        + stream_id.to_bytes(4, "big", signed=True)
        + bytes([fmt])
        + (len(header) if header_length is None else header_length).to_bytes(3, "big")
        + header
        + payload
    )
    size = 4 + len(body) if length is None else length
    return size.to_bytes(4, "big") + body


def decode_all(chunks: list[bytes], *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> list[Event]:
    decoder = FrameDecoder(max_frame_size=max_frame_size)
    events: list[Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    decoder.close()
    return events


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


opcodes = st.sampled_from(list(Opcode))
stream_ids = st.integers(0, 2**31 - 1)
small_bytes = st.binary(max_size=64)


@st.composite
def frames(draw: st.DrawFn, *, response: bool | None = None) -> Frame:
    flags = draw(st.integers(0, 0xFF))
    if response is not None:
        flags = flags | Flags.RESPONSE if response else flags & ~Flags.RESPONSE
    is_response = bool(flags & Flags.RESPONSE)
    stream_id = draw(st.integers(-(2**31), 2**31 - 1) if is_response else stream_ids)
    return Frame(
        opcode=draw(opcodes),
        stream_id=stream_id,
        flags=Flags(flags),
        header=draw(small_bytes),
        payload=draw(small_bytes),
        header_format=draw(st.integers(0, 0xFF)),
    )


# --- encoding: the fixed header exactly as specified ------------------------------------


def test_known_vector() -> None:
    frame = Frame(Opcode.PING, 1, header=b"\x01\x02", payload=b"abc")
    expected = bytes.fromhex("000000151700010000000001010000020102616263")
    assert encode_frame(frame) == expected
    assert frame.length == 21 == 16 + 2 + 3
    assert decode_frame(expected) == frame


def test_fields_are_big_endian() -> None:
    frame = Frame(
        Opcode.FETCH,
        0x01020304,
        Flags.RESPONSE | Flags.RESPONSE_END,
        header=bytes(0x0102),
        header_format=0x7F,
    )
    data = encode_frame(frame)
    assert data[:4] == (16 + 0x0102).to_bytes(4, "big")
    assert data[4] == 23
    assert data[5:7] == b"\x10\x02"
    assert data[7] == 0x03
    assert data[8:12] == b"\x01\x02\x03\x04"
    assert data[12] == 0x7F
    assert data[13:16] == b"\x00\x01\x02"
    assert data == raw_frame(
        opcode=0x1002, flags=3, stream_id=0x01020304, fmt=0x7F, header=bytes(0x0102)
    )


def test_empty_frame_is_sixteen_octets() -> None:
    data = encode_frame(Frame(Opcode.HEARTBEAT, 0))
    assert len(data) == MIN_FRAME_SIZE == 16
    assert data == raw_frame(opcode=3)


def test_opcode_table_matches_the_spec() -> None:
    assert {int(op): name for name, op in Opcode.__members__.items() if name == op.name} == {
        **SPEC_TABLE,
        0x2004: "CREATE_RANGE",
    }
    assert Opcode(0x2004).name == "CREATE_RANGE"  # CRATE_RANGE is an alias
    assert Opcode(0x2004) is Opcode["CRATE_RANGE"] is Opcode["CREATE_RANGE"]
    for value, name in SPEC_TABLE.items():
        assert Opcode[name] == value
    assert (Flags.RESPONSE, Flags.RESPONSE_END, Flags.SYSTEM_ERROR) == (1, 2, 4)
    assert int(HeaderFormat.FLATBUFFERS) == 1


@settings(deadline=None)
@given(frames())
def test_round_trip(frame: Frame) -> None:
    data = encode_frame(frame)
    assert len(data) == frame.length == 16 + len(frame.header) + len(frame.payload)
    decoded = decode_frame(data)
    assert decoded == frame
    assert encode_frame(decoded) == data  # unused flag bits and the format survive


@settings(deadline=None)
@given(frames())
def test_encoding_matches_the_hand_built_frame(frame: Frame) -> None:
    assert encode_frame(frame) == raw_frame(
        opcode=frame.opcode,
        flags=frame.flags,
        stream_id=frame.stream_id,
        fmt=frame.header_format,
        header=frame.header,
        payload=frame.payload,
    )


def test_flag_properties() -> None:
    request = Frame(Opcode.PING, 1, Flags.RESPONSE_END | Flags.SYSTEM_ERROR | Flags(0xF0))
    assert not request.is_response and not request.is_response_end
    assert not request.is_system_error
    response = Frame(Opcode.PING, 1, Flags.RESPONSE | Flags.SYSTEM_ERROR)
    assert response.is_response and response.is_system_error and not response.is_response_end


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"opcode": 0x0005}, "unknown opcode"),
        ({"opcode": 0x10000}, "opcode must be in"),
        ({"opcode": "PING"}, "opcode must be an int"),
        ({"stream_id": 2**31}, "stream_id must be in"),
        ({"stream_id": -(2**31) - 1}, "stream_id must be in"),
        ({"stream_id": True}, "stream_id must be an int"),
        ({"flags": 0x100}, "flags must be in"),
        ({"header_format": -1}, "header_format must be in"),
        ({"header": "text"}, "header must be bytes-like"),
        ({"payload": None}, "payload must be bytes-like"),
        ({"header": bytes(MAX_HEADER_LENGTH + 1)}, "at most 16777215 fit"),
    ],
)
def test_invalid_fields_are_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"opcode": Opcode.PING, "stream_id": 0, **kwargs}
    with pytest.raises(InvalidFrameError, match=match):
        Frame(**args)  # type: ignore[arg-type]


def test_fields_are_normalised() -> None:
    frame = Frame(0x1001, 5, 3, bytearray(b"h"), memoryview(b"p"))  # type: ignore[arg-type]
    assert frame.opcode is Opcode.APPEND
    assert frame.flags is not None and type(frame.flags) is Flags
    assert type(frame.header) is bytes and type(frame.payload) is bytes
    assert frame == Frame(Opcode.APPEND, 5, Flags(3), b"h", b"p")
    assert Frame(0x2004, 0).opcode is Opcode.CREATE_RANGE  # type: ignore[arg-type]


def test_request_with_negative_stream_id_is_not_sent() -> None:
    with pytest.raises(InvalidFrameError, match="non-negative stream identifier"):
        encode_frame(Frame(Opcode.PING, -1))
    data = encode_frame(Frame(Opcode.PING, -1, Flags.RESPONSE))
    assert decode_frame(data) == Frame(Opcode.PING, -1, Flags.RESPONSE)
    # A peer's request with a negative identifier is still decoded and reported as is.
    assert decode_frame(raw_frame(stream_id=-7)) == Frame(Opcode.PING, -7)


def test_encoding_refuses_frames_over_the_limit() -> None:
    frame = Frame(Opcode.APPEND, 1, payload=bytes(100))
    assert len(encode_frame(frame, max_frame_size=116)) == 116
    with pytest.raises(FrameTooLargeError) as info:
        encode_frame(frame, max_frame_size=115)
    assert (info.value.length, info.value.limit) == (116, 115)


@pytest.mark.parametrize("bad", [15, 0, MAX_FRAME_SIZE_LIMIT + 1, -1])
def test_max_frame_size_is_checked(bad: int) -> None:
    # A ConfigurationError (the library's own error, and a ValueError) as the assembler's.
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        FrameDecoder(max_frame_size=bad)
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        encode_frame(Frame(Opcode.PING, 0), max_frame_size=bad)
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        decode_frame(b"", max_frame_size=bad)


@pytest.mark.parametrize("bad", [True, 16.0, "64", None])
def test_a_max_frame_size_of_a_wrong_type_is_an_argument_type_error(bad: object) -> None:
    with pytest.raises(ArgumentTypeError, match="max_frame_size"):
        FrameDecoder(max_frame_size=bad)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="max_frame_size"):
        encode_frame(Frame(Opcode.PING, 0), max_frame_size=bad)  # type: ignore[arg-type]


# --- the incremental decoder ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(frames(), max_size=8), st.lists(st.integers(0, 2000), max_size=30))
def test_any_chunking_gives_the_same_frames(frame_list: list[Frame], cuts: list[int]) -> None:
    data = b"".join(encode_frame(f) for f in frame_list)
    assert decode_all(split(data, cuts)) == frame_list


def test_every_split_point_and_every_octet_alone() -> None:
    frame_list = [
        Frame(Opcode.PING, 1, header=b"hh", payload=b"ping"),
        Frame(Opcode.HEARTBEAT, 0),
        Frame(Opcode.FETCH, 2**31 - 1, Flags.RESPONSE, payload=bytes(range(40))),
        Frame(Opcode.FETCH, 2**31 - 1, Flags.RESPONSE | Flags.RESPONSE_END, header=b"x"),
    ]
    data = b"".join(encode_frame(f) for f in frame_list)
    for cut in range(len(data) + 1):
        assert decode_all([data[:cut], data[cut:]]) == frame_list, cut
    for first in range(0, len(data), 7):
        for second in range(first, len(data) + 1, 5):
            assert decode_all(split(data, [first, second])) == frame_list
    assert decode_all([data[i : i + 1] for i in range(len(data))]) == frame_list


def test_events_come_back_as_soon_as_a_frame_is_whole() -> None:
    data = encode_frame(Frame(Opcode.PING, 3, payload=b"abc"))
    decoder = FrameDecoder()
    assert decoder.feed(data[:-1]) == []
    assert decoder.buffered == len(data) - 1
    assert decoder.feed(data[-1:] + data[:3]) == [Frame(Opcode.PING, 3, payload=b"abc")]
    assert (decoder.buffered, decoder.offset) == (3, len(data))
    assert decoder.feed(b"") == []


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (raw_frame(magic=22, payload=b"not sbp"), DiscardReason.BAD_MAGIC),
        (raw_frame(magic=0, opcode=0x9999), DiscardReason.BAD_MAGIC),
        (
            raw_frame(opcode=0x0005, flags=1, stream_id=9, payload=b"?"),
            DiscardReason.UNKNOWN_OPCODE,
        ),
        (raw_frame(opcode=0x0000), DiscardReason.UNKNOWN_OPCODE),
        # A frame discarded for its magic or opcode is not checked any further.
        (raw_frame(magic=24, header_length=0xFFFFFF), DiscardReason.BAD_MAGIC),
        (raw_frame(opcode=0xFFFF, header_length=500), DiscardReason.UNKNOWN_OPCODE),
    ],
)
def test_discarded_frames_are_reported_and_skipped(bad: bytes, reason: DiscardReason) -> None:
    before = Frame(Opcode.APPEND, 1, payload=b"before")
    after = Frame(Opcode.APPEND, 2, payload=b"after")
    data = encode_frame(before) + bad + encode_frame(after)
    offset = before.length
    magic, opcode, flags, stream_id = struct.unpack_from(">BHBi", bad, 4)
    report = DiscardedFrame(reason, offset, len(bad), magic, opcode, flags, stream_id)
    for cut in range(len(data) + 1):
        assert decode_all([data[:cut], data[cut:]]) == [before, report, after]


def test_unknown_header_format_is_not_discarded() -> None:
    assert decode_frame(raw_frame(fmt=0xEE, header=b"?")) == Frame(
        Opcode.PING, 0, header=b"?", header_format=0xEE
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            frames(),
            st.builds(
                lambda magic, payload: raw_frame(magic=magic, payload=payload),
                st.integers(0, 255).filter(lambda m: m != MAGIC),
                small_bytes,
            ),
            st.builds(
                lambda opcode, payload: raw_frame(opcode=opcode, payload=payload),
                st.integers(0, 0xFFFF).filter(lambda op: op not in SPEC_TABLE),
                small_bytes,
            ),
        ),
        max_size=8,
    ),
    st.lists(st.integers(0, 2000), max_size=20),
)
def test_discards_in_any_chunking(items: list[Frame | bytes], cuts: list[int]) -> None:
    data = b"".join(encode_frame(i) if isinstance(i, Frame) else i for i in items)
    events = decode_all(split(data, cuts))
    assert len(events) == len(items)
    offset = 0
    for item, event in zip(items, events, strict=True):
        if isinstance(item, Frame):
            assert event == item
            offset += item.length
        else:
            assert isinstance(event, DiscardedFrame)
            assert (event.offset, event.length) == (offset, len(item))
            offset += len(item)


def test_oversized_frame_is_refused_from_its_length_field_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    ok = encode_frame(Frame(Opcode.PING, 1))
    assert decoder.feed(ok) == [Frame(Opcode.PING, 1)]
    assert decoder.feed((1025).to_bytes(4, "big")[:3]) == []
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(b"\x01")  # the last octet of the length field
    error = info.value
    assert (error.length, error.limit, error.offset) == (1025, 1024, 16)
    assert decoder.buffered == 4
    with pytest.raises(FramingError, match="failed earlier"):
        decoder.feed(b"")
    with pytest.raises(FramingError, match="failed earlier"):
        decoder.close()


def test_frames_before_a_fatal_error_travel_with_it() -> None:
    good = [Frame(Opcode.PING, 1), Frame(Opcode.PING, 2)]
    data = b"".join(map(encode_frame, good)) + raw_frame(length=15)
    with pytest.raises(MalformedFrameError, match="below the minimum 16") as info:
        FrameDecoder().feed(data)
    assert info.value.events == tuple(good)
    assert info.value.offset == 32


def test_length_equal_to_the_limit_is_accepted() -> None:
    frame = Frame(Opcode.APPEND, 0, payload=bytes(84))
    assert decode_all([encode_frame(frame)], max_frame_size=100) == [frame]
    with pytest.raises(FrameTooLargeError):
        decode_all([encode_frame(frame)], max_frame_size=99)


@pytest.mark.parametrize("length", [0, 4, 15])
def test_lengths_below_sixteen_are_malformed(length: int) -> None:
    with pytest.raises(MalformedFrameError):
        decode_all([raw_frame(length=length)])


def test_header_past_the_end_of_the_frame_is_malformed() -> None:
    assert decode_frame(raw_frame(header_length=3, payload=b"abc")) == Frame(
        Opcode.PING, 0, header=b"abc"
    )
    with pytest.raises(MalformedFrameError, match="overruns"):
        decode_frame(raw_frame(header_length=4, payload=b"abc"))


@settings(deadline=None)
@given(st.lists(frames(), min_size=1, max_size=5), st.data())
def test_truncated_stream_is_a_clean_error(frame_list: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(map(encode_frame, frame_list))
    bounds = {0}
    for frame in frame_list:
        bounds.add(max(bounds) + frame.length)
    cut = data.draw(st.integers(0, len(stream) - 1).filter(lambda c: c not in bounds))
    decoder = FrameDecoder()
    events = decoder.feed(stream[:cut])
    assert events == frame_list[: len(events)]
    with pytest.raises(TruncatedFrameError) as info:
        decoder.close()
    assert info.value.offset == sum(f.length for f in events)
    decoder.close()  # closing twice is harmless


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=10), st.data())
def test_garbage_gives_clean_errors_and_bounded_buffering(
    garbage: bytes, cuts: list[int], data: st.DataObject
) -> None:
    limit = data.draw(st.sampled_from([16, 64, 1024, DEFAULT_MAX_FRAME_SIZE]))
    decoder = FrameDecoder(max_frame_size=limit)
    try:
        for chunk in split(garbage, cuts):
            for event in decoder.feed(chunk):
                assert isinstance(event, Frame | DiscardedFrame)
            assert decoder.buffered < limit  # never more than one partial frame
        decoder.close()
    except SBPError as error:
        assert isinstance(error, FramingError)


def test_feed_refuses_text_and_closed_decoder_refuses_data() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ArgumentTypeError, match="bytes-like"):
        decoder.feed("text")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="bytes-like"):
        decode_frame(None)  # type: ignore[arg-type]
    decoder.close()
    with pytest.raises(FramingError, match="closed"):
        decoder.feed(b"")


def test_any_bytes_like_view_is_fed_as_its_octets() -> None:
    wire = encode_frame(Frame(Opcode.PING, 7, payload=b"hi"))
    spread = bytearray(2 * len(wire))
    spread[::2] = wire
    strided = memoryview(spread)[::2]  # bytes-like, but not contiguous
    assert FrameDecoder().feed(strided) == [Frame(Opcode.PING, 7, payload=b"hi")]
    assert decode_frame(strided) == Frame(Opcode.PING, 7, payload=b"hi")
    assert Frame(Opcode.PING, 7, payload=strided).payload == wire  # type: ignore[arg-type]


def test_a_released_view_is_an_argument_type_error() -> None:
    released = memoryview(b"\x00" * 16)
    released.release()
    decoder = FrameDecoder()
    with pytest.raises(ArgumentTypeError, match="released"):
        decoder.feed(released)
    assert decoder.feed(encode_frame(Frame(Opcode.PING, 1))) == [Frame(Opcode.PING, 1)]
    with pytest.raises(InvalidFrameError, match="released"):
        Frame(Opcode.PING, 1, payload=released)  # type: ignore[arg-type]


def test_decode_frame_wants_exactly_one_frame() -> None:
    one = encode_frame(Frame(Opcode.PING, 0))
    with pytest.raises(MalformedFrameError, match="found 2"):
        decode_frame(one + one)
    with pytest.raises(MalformedFrameError, match="found 0"):
        decode_frame(b"")
    with pytest.raises(TruncatedFrameError):
        decode_frame(one[:-1])
    assert decode_frame(raw_frame(magic=1)) == DiscardedFrame(
        DiscardReason.BAD_MAGIC, 0, 16, 1, 1, 0, 0
    )


# --- response sequences ------------------------------------------------------------------


def response(opcode: Opcode, sid: int, payload: bytes = b"", *, end: bool = False) -> Frame:
    flags = Flags.RESPONSE | (Flags.RESPONSE_END if end else Flags(0))
    return Frame(opcode, sid, flags, header=b"h", payload=payload)


@st.composite
def interleaved_sequences(draw: st.DrawFn) -> tuple[list[Frame], dict[int, list[Frame]]]:
    sids = draw(st.lists(st.integers(-5, 5), unique=True, max_size=5))
    sequences: dict[int, list[Frame]] = {}
    for sid in sids:
        opcode = draw(opcodes)
        payloads = draw(st.lists(small_bytes, min_size=1, max_size=5))
        sequences[sid] = [
            response(opcode, sid, p, end=i == len(payloads) - 1) for i, p in enumerate(payloads)
        ]
    order = draw(st.permutations([sid for sid, seq in sequences.items() for _ in seq]))
    cursors = dict.fromkeys(sequences, 0)
    stream = []
    for sid in order:
        stream.append(sequences[sid][cursors[sid]])
        cursors[sid] += 1
    return stream, sequences


@settings(max_examples=200, deadline=None)
@given(interleaved_sequences())
def test_interleaved_sequences_are_reassembled(
    case: tuple[list[Frame], dict[int, list[Frame]]],
) -> None:
    stream, sequences = case
    assembler = ResponseAssembler()
    done: dict[int, Response] = {}
    for frame in stream:
        result = assembler.add(frame)
        if result is not None:
            assert result.stream_id not in done
            done[result.stream_id] = result
    assert assembler.pending_stream_ids == frozenset()
    assert assembler.pending_bytes == 0
    assert done.keys() == sequences.keys()
    for sid, frames_ in sequences.items():
        assert done[sid] == Response(sid, frames_[0].opcode, tuple(frames_))
        assert done[sid].payload == b"".join(f.payload for f in frames_)
        assert done[sid].headers == (b"h",) * len(frames_)


def test_sequences_over_the_wire() -> None:
    frames_ = [
        response(Opcode.FETCH, 7, b"a"),
        response(Opcode.APPEND, 8, b"x", end=True),
        response(Opcode.FETCH, 7, b"b"),
        response(Opcode.FETCH, 7, b"c", end=True),
    ]
    data = b"".join(map(encode_frame, frames_))
    assembler = ResponseAssembler()
    results = [assembler.add(f) for f in decode_all([data]) if isinstance(f, Frame)]
    assert results == [
        None,
        Response(8, Opcode.APPEND, (frames_[1],)),
        None,
        Response(7, Opcode.FETCH, (frames_[0], frames_[2], frames_[3])),
    ]
    # The stream identifier is free again for the next request.
    assert assembler.add(response(Opcode.PING, 7, end=True)) is not None


@pytest.mark.parametrize("end", [False, True])
def test_system_error_flag_is_a_typed_error_and_ends_the_sequence(end: bool) -> None:
    assembler = ResponseAssembler()
    first = response(Opcode.FETCH, 3, b"part")
    assert assembler.add(first) is None
    assert assembler.add(response(Opcode.FETCH, 4, b"other")) is None
    flags = Flags.RESPONSE | Flags.SYSTEM_ERROR | (Flags.RESPONSE_END if end else Flags(0))
    error_frame = Frame(Opcode.FETCH, 3, flags, header=b"flatbuffers status")
    with pytest.raises(SBPSystemError) as info:
        assembler.add(error_frame)
    error = info.value
    assert (error.stream_id, error.frame, error.partial) == (3, error_frame, (first,))
    assert isinstance(error, LiftbridgeError)
    assert assembler.pending_stream_ids == frozenset({4})
    other = response(Opcode.FETCH, 4, b"other").length
    assert assembler.pending_bytes == other + FRAME_OVERHEAD + SEQUENCE_OVERHEAD
    # The system error frame of another opcode (a request-agnostic error) ends it too.
    with pytest.raises(SBPSystemError):
        assembler.add(Frame(Opcode.PING, 4, Flags.RESPONSE | Flags.SYSTEM_ERROR))
    assert assembler.pending_stream_ids == frozenset()


def test_system_error_flag_on_a_request_is_ignored() -> None:
    request = Frame(Opcode.PING, 1, Flags.SYSTEM_ERROR)
    assert not request.is_system_error
    with pytest.raises(ResponseSequenceError, match="not a response"):
        ResponseAssembler().add(request)


def test_opcode_change_inside_a_sequence_is_rejected() -> None:
    assembler = ResponseAssembler()
    first = response(Opcode.FETCH, 1, b"a")
    assembler.add(first)
    with pytest.raises(ResponseSequenceError, match="APPEND frame inside a FETCH") as info:
        assembler.add(response(Opcode.APPEND, 1, end=True))
    assert info.value.stream_id == 1
    last = response(Opcode.FETCH, 1, b"b", end=True)
    assert assembler.add(last) == Response(1, Opcode.FETCH, (first, last))


def test_pending_bytes_are_bounded() -> None:
    frame = response(Opcode.FETCH, 1, bytes(83))  # 16 + 1 + 83 = 100 octets
    first = 100 + FRAME_OVERHEAD + SEQUENCE_OVERHEAD
    assembler = ResponseAssembler(max_pending_bytes=first + (100 + FRAME_OVERHEAD) + 100)
    assembler.add(frame)
    assembler.add(frame)
    assert assembler.pending_bytes == first + 100 + FRAME_OVERHEAD
    # A frame that ends its sequence is never held, so it always fits.
    assert assembler.add(response(Opcode.PING, 2, bytes(1000), end=True)) is not None
    other = response(Opcode.FETCH, 3, bytes(83))
    with pytest.raises(ResponseTooLargeError) as info:
        assembler.add(frame)
    assert info.value.stream_id == 1
    assert assembler.pending_bytes == 0
    assert assembler.add(other) is None
    # The rest of the dropped sequence is swallowed, up to and including its end.
    assert assembler.add(frame) is None
    assert assembler.add(response(Opcode.FETCH, 1, end=True)) is None
    assert assembler.pending_stream_ids == frozenset({3})
    fresh = response(Opcode.FETCH, 1, end=True)
    assert assembler.add(fresh) == Response(1, Opcode.FETCH, (fresh,))


def _fragment(sid: int) -> Frame:
    """The cheapest frame to hold: 16 octets that do not end their sequence."""
    return Frame(Opcode.FETCH, sid, Flags.RESPONSE)


def test_held_frames_are_charged_what_they_cost_in_memory() -> None:
    """One-frame sequences of 16-octet frames on fresh stream ids: the worst case."""
    count = 2000
    assembler = ResponseAssembler(
        max_pending_bytes=count * (16 + FRAME_OVERHEAD + SEQUENCE_OVERHEAD)
    )
    fragments = [_fragment(sid) for sid in range(count + 1)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for frame in fragments[:count]:
            assert assembler.add(frame) is None
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= assembler.pending_bytes  # it used to be about 19 times the charge
    with pytest.raises(ResponseTooLargeError):
        assembler.add(fragments[count])


def test_stream_ids_being_dropped_are_bounded() -> None:
    assembler = ResponseAssembler(max_pending_bytes=1, max_pending_sequences=8)
    for sid in range(100):
        with pytest.raises(ResponseTooLargeError) as info:
            assembler.add(_fragment(sid))
        assert info.value.stream_id == sid
    assert len(assembler.pending_stream_ids) == 8
    # The ones remembered are still dropped up to their end.
    assert assembler.add(response(Opcode.FETCH, 0, end=True)) is None
    assert len(assembler.pending_stream_ids) == 7


def test_unfinished_sequences_are_bounded() -> None:
    assembler = ResponseAssembler(max_pending_sequences=4)
    for sid in range(4):
        assert assembler.add(_fragment(sid)) is None
    for sid in range(4, 10):
        with pytest.raises(ResponseTooLargeError, match="max_pending_sequences") as info:
            assembler.add(_fragment(sid))
        assert info.value.stream_id == sid
    assert assembler.pending_stream_ids == frozenset(range(4))
    # Frames of the sequences tracked go on; one-frame responses are never held.
    assert assembler.add(_fragment(0)) is None
    assert assembler.add(response(Opcode.PING, 99, end=True)) is not None
    assert assembler.add(response(Opcode.FETCH, 3, end=True)) is not None
    assert assembler.add(_fragment(4)) is None
    assert assembler.pending_stream_ids == frozenset({0, 1, 2, 4})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_pending_bytes": 0}, ConfigurationError),
        ({"max_pending_sequences": 0}, ConfigurationError),
        ({"max_pending_sequences": -1}, ConfigurationError),
        ({"max_pending_sequences": 1.5}, ArgumentTypeError),
        ({"max_pending_bytes": True}, ArgumentTypeError),
    ],
)
def test_assembler_bounds_are_checked(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        ResponseAssembler(**kwargs)  # type: ignore[arg-type]


# What is not a frame: bytes, nothing, and the discard reports the decoder returns
# alongside frames.
_NOT_FRAMES: list[object] = [
    b"\x00" * 16,
    None,
    DiscardedFrame(DiscardReason.BAD_MAGIC, 0, 16, 22, 1, 1, 1),
    DiscardedFrame(DiscardReason.UNKNOWN_OPCODE, 0, 16, MAGIC, 9, 3, 1),
]


@pytest.mark.parametrize("bad", _NOT_FRAMES)
def test_encoding_refuses_what_is_not_a_frame(bad: object) -> None:
    # A proxy re-encoding what its decoder returned meets discard reports too.
    with pytest.raises(ArgumentTypeError, match="frame must be a Frame"):
        encode_frame(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", _NOT_FRAMES)
def test_the_assembler_refuses_what_is_not_a_frame(bad: object) -> None:
    # A discard report fed by mistake (the decoder returns both) is refused by type,
    # not with an AttributeError from inside, and changes nothing.
    assembler = ResponseAssembler()
    with pytest.raises(ArgumentTypeError, match="Frame"):
        assembler.add(bad)  # type: ignore[arg-type]
    assert (assembler.pending_bytes, assembler.pending_stream_ids) == (0, frozenset())


def test_discard_forgets_a_sequence() -> None:
    assembler = ResponseAssembler()
    frame = response(Opcode.FETCH, 1, b"a")
    assembler.add(frame)
    assert assembler.discard(1) == (frame,)
    assert assembler.discard(1) == ()
    assert (assembler.pending_bytes, assembler.pending_stream_ids) == (0, frozenset())
    with pytest.raises(ValueError):
        ResponseAssembler(max_pending_bytes=0)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        InvalidFrameError("bad"),
        FramingError("x", offset=3, events=(Frame(Opcode.PING, 1),)),
        FrameTooLargeError("big", length=10, limit=5, offset=0),
        MalformedFrameError("m", offset=1),
        TruncatedFrameError("t", offset=2),
        ResponseSequenceError("s", stream_id=4),
        ResponseTooLargeError("l", stream_id=5),
        SBPSystemError("e", stream_id=6, frame=Frame(Opcode.PING, 6, Flags(5)), partial=()),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_are_liftbridge_errors_and_pickle(error: SBPError) -> None:
    assert isinstance(error, SBPError) and isinstance(error, LiftbridgeError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.__dict__ == error.__dict__
    assert str(copy) == str(error)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(frames(), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.lists(st.integers(0, 2000), max_size=10),
)
def test_corrupted_streams_give_clean_errors(
    frame_list: list[Frame], flips: list[tuple[int, int]], cuts: list[int]
) -> None:
    data = bytearray(b"".join(map(encode_frame, frame_list)))
    for position, value in flips:
        data[position % len(data)] = value
    decoder = FrameDecoder(max_frame_size=4096)
    events: list[Event] = []
    try:
        for chunk in split(bytes(data), cuts):
            events.extend(decoder.feed(chunk))
            assert decoder.buffered < 4096
        decoder.close()
    except FramingError as error:
        events.extend(error.events)  # type: ignore[arg-type]
    assert len(events) <= len(frame_list) + len(data) // 16


@pytest.mark.parametrize("stream_id", [True, "1", 1.0, None])
def test_discard_takes_only_an_int_stream_id(stream_id: object) -> None:
    # discard(True) forgot stream 1's sequence (a bool is an int to Python).
    assembler = ResponseAssembler()
    held = response(Opcode.FETCH, 1, b"part")
    assert assembler.add(held) is None
    with pytest.raises(ArgumentTypeError, match="stream_id must be an int"):
        assembler.discard(stream_id)  # type: ignore[arg-type]
    assert assembler.pending_stream_ids == frozenset({1})
    assert assembler.discard(1) == (held,)
