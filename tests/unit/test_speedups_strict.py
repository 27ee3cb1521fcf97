"""The C ack decoder (``scan_acks``, and ``decode_ack`` on its own) against protobuf on
hostile encodings.

``scan_acks`` reads the broker's successful acks straight into ``Ack`` objects and leaves
every other response to the Python reader, which parses it with protobuf (upb) and ends
the stream with a typed ``INTERNAL`` error where protobuf raises ``DecodeError``. So the
C decoder may take only what protobuf reads the same way: an ack it returns must equal
protobuf's parse of the same bytes, and bytes protobuf rejects must never come out of it
as an ack. The differential tests build responses from random tags (field numbers up to
and past 2^32, every wire type, over-long varints, truncated lengths, bad UTF-8), check
both rules, and the end-to-end test shows the typed error the reader raises instead.
"""

from __future__ import annotations

import threading

import h2.config
import h2.connection
import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2.framing import FRAME_HEADER
from liftbridge_sync._transport.h2.responses import ResponseReader
from liftbridge_sync._wire import speedups
from liftbridge_sync._wire.publish_codec import ack_from_proto, decode_ack
from liftbridge_sync.errors import LiftbridgeError
from liftbridge_sync.models import Ack

pytestmark = pytest.mark.skipif(not speedups.ACTIVE, reason="C speedups not built or disabled")


def varint(value: int) -> bytes:
    """``value`` as a protobuf varint (shortest form)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def padded_varint(value: int, extra: int) -> bytes:
    """``value`` as a varint with ``extra`` redundant continuation bytes (over-long)."""
    short = bytearray(varint(value))
    if extra:
        short[-1] |= 0x80
        short += b"\x80" * (extra - 1) + b"\x00"
    return bytes(short)


def tag(field: int, wire_type: int, extra: int = 0) -> bytes:
    return padded_varint(field << 3 | wire_type, extra)


def delimited(field: int, data: bytes) -> bytes:
    return tag(field, 2) + varint(len(data)) + data


def grpc_frame(message: bytes, stream_id: int = 1) -> bytearray:
    """One HTTP/2 DATA frame of stream ``stream_id`` holding one gRPC message."""
    payload = len(message).to_bytes(5, "big") + message
    return bytearray(FRAME_HEADER.pack(len(payload) << 8, 0, stream_id) + payload)


def c_decode(message: bytes) -> Ack | None:
    """The Ack ``scan_acks`` reads from a response (``None``: left to Python), which
    the codec's ``decode_ack`` (C) reads the same."""
    assert speedups.scan_acks is not None
    data = grpc_frame(message)
    pos, acks, _, _, _, _ = speedups.scan_acks(data, 0, 1, 1 << 24)
    alone = decode_ack(message)
    if not acks:
        assert pos == 0  # the frame is left whole to the Python reader
        assert alone is None
        return None
    assert pos == len(data) and len(acks) == 1
    ack = acks[0]
    assert isinstance(ack, Ack)
    assert alone == ack
    return ack


def check_against_protobuf(message: bytes) -> None:
    """The differential rule for one encoded PublishResponse."""
    got = c_decode(message)
    try:
        parsed = api_pb2.PublishResponse.FromString(message)
    except DecodeError:
        assert got is None, f"C accepted what protobuf rejects: {message!r}"
        return
    if got is not None:
        assert got == ack_from_proto(parsed.ack, -1)


_texts = st.one_of(
    st.text(max_size=12).map(lambda s: s.encode()),
    st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"a\x00b", b"\xf4\x90\x80\x80"]),
)
_field_numbers = st.one_of(
    st.integers(0, 12),
    st.sampled_from([2**29 - 1, 2**29, 2**32 + 1, 2**32 + 6, 2**35 + 1, 2**61 + 1]),
    st.integers(13, 2**64 // 8 - 1),
)


@st.composite
def _fields(draw: st.DrawFn, depth: int = 0) -> bytes:
    """One field of any number and wire type, well formed or not."""
    field = draw(_field_numbers)
    wire_type = draw(st.integers(0, 7))
    head = tag(field, wire_type, draw(st.sampled_from([0, 0, 0, 1, 4, 6])))
    if wire_type == 0:
        value = draw(st.integers(0, 2**64 - 1))
        extra = draw(st.sampled_from([0, 0, 1, 3, 10]))
        body = padded_varint(value, extra)
        if draw(st.booleans()) and extra == 0:
            body = b"\xff" * draw(st.integers(9, 11)) + bytes([draw(st.integers(0, 0x7F))])
    elif wire_type == 1:
        body = draw(st.binary(min_size=6, max_size=8))
    elif wire_type == 5:
        body = draw(st.binary(min_size=2, max_size=4))
    elif wire_type == 2:
        if depth == 0 and draw(st.booleans()):
            data = b"".join(draw(st.lists(_fields(depth=1), max_size=6)))  # type: ignore[call-arg]
        else:
            data = draw(_texts)
        length = len(data) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        body = padded_varint(max(length, 0), draw(st.sampled_from([0, 0, 0, 1, 5]))) + data
    else:  # groups (3 and 4) and the invalid wire types 6 and 7
        body = draw(st.binary(max_size=3))
    return head + body


def _known_ack_field(field: int, text: bytes, number: int) -> bytes:
    if field in (1, 2, 3, 5, 6):
        return delimited(field, text)
    return tag(field, 0) + varint(number)


_ack_fields = st.builds(
    _known_ack_field,
    st.integers(1, 10),
    _texts,
    st.one_of(st.integers(0, 5), st.integers(0, 2**64 - 1)),
)


@st.composite
def _responses(draw: st.DrawFn) -> bytes:
    """A PublishResponse that mostly parses: an ack with a correlation id, known and
    random fields around it, sometimes corrupted."""
    inner = [delimited(6, draw(st.text(min_size=1, max_size=8)).encode())]
    inner += draw(st.lists(st.one_of(_ack_fields, _fields(depth=1)), max_size=6))  # type: ignore[call-arg]
    inner = draw(st.permutations(inner))
    outer = [delimited(1, b"".join(inner))]
    outer += draw(
        st.lists(st.one_of(_fields(), st.builds(delimited, st.just(3), _texts)), max_size=3)
    )  # type: ignore[call-arg]
    message = b"".join(draw(st.permutations(outer)))
    if draw(st.integers(0, 4)) == 0 and message:
        index = draw(st.integers(0, len(message) - 1))
        message = message[:index] + bytes([draw(st.integers(0, 255))]) + message[index + 1 :]
    if draw(st.integers(0, 6)) == 0:
        message = message[: draw(st.integers(0, len(message)))]
    return message


_CID = delimited(6, b"c1")
_ACK = delimited(1, _CID)


@settings(max_examples=1500, deadline=None)
@given(message=_responses())
@example(message=tag(2**32 + 1, 2) + varint(len(_CID)) + _CID)  # the field 1
@example(message=_ACK + tag(2**29, 0) + b"\x01")
@example(message=_ACK + tag(2**29 - 1, 0) + b"\x01")
@example(message=_ACK + tag(20, 0, extra=4) + b"\x01")  # a tag of 6 bytes
@example(message=_ACK + tag(20, 2) + padded_varint(0, 5))  # a length of 6 bytes
@example(message=delimited(1, delimited(1, b"\xff") + delimited(1, b"s") + _CID))
@example(message=_ACK + delimited(3, b"\xed\xa0\x80"))
@example(message=_ACK + tag(20, 0) + b"\xff" * 10 + b"\x01")  # an 11-byte varint
def test_an_ack_the_c_decoder_takes_is_protobufs_parse(message: bytes) -> None:
    check_against_protobuf(message)


@settings(max_examples=1000, deadline=None)
@given(message=st.binary(max_size=64))
def test_random_bytes_are_never_read_differently(message: bytes) -> None:
    check_against_protobuf(_ACK + message)
    check_against_protobuf(message)


@pytest.mark.parametrize(
    "message",
    [
        tag(2**32 + 1, 2) + varint(len(_CID)) + _CID,
        _ACK + tag(2**29, 0) + b"\x01",
        _ACK + tag(0, 0) + b"\x01",
        _ACK + tag(20, 0, extra=4) + b"\x01",
        _ACK + tag(20, 2) + padded_varint(0, 5),
        delimited(1, _CID + tag(2**29, 0) + b"\x01"),
        delimited(1, delimited(1, b"\xff") + delimited(1, b"s") + _CID),
        _ACK + delimited(3, b"\xff"),
        _ACK + tag(20, 6),
        _ACK[:-1],
    ],
)
def test_the_reader_raises_a_typed_error_for_what_protobuf_rejects(message: bytes) -> None:
    """Left to Python by the C decoder, the response ends the stream with INTERNAL."""
    with pytest.raises(DecodeError):
        api_pb2.PublishResponse.FromString(message)
    assert c_decode(message) is None
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(
        1, [(":method", "POST"), (":path", "/p"), (":scheme", "http"), (":authority", "x")]
    )
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
    reader = ResponseReader(client, 1)
    assert reader.receive(server.data_to_send()) == []
    assert not reader.ended
    assert reader.receive(bytes(grpc_frame(message))) == []
    assert reader.ended
    assert isinstance(reader.error, LiftbridgeError)
    assert "bad response" in str(reader.error)


def test_settle_acks_tolerates_an_entry_gone_while_it_looks_at_the_future() -> None:
    """Found by ``make fuzz``: Python code run from inside settle_acks (here a future's
    attribute hook; in the wild a finalizer) took the entry out: no KeyError escapes."""
    from typing import Any

    from liftbridge_sync._publishing.futures import PublishFuture
    from liftbridge_sync._publishing.pending import Entry

    pending: dict[str, Any] = {}

    class Meddling(PublishFuture[Any]):
        def __getattribute__(self, name: str) -> Any:
            if name == "_state":
                pending.pop("c1", None)
            return object.__getattribute__(self, name)

    future = Meddling()
    pending["c1"] = Entry(b"", "c1", 4, True, future, 0.0, 0.0)
    ack = c_decode(delimited(1, _CID))
    assert ack is not None
    assert speedups.settle_acks is not None
    count, ready = speedups.settle_acks([ack], pending, threading.Lock(), True)
    assert count == 1 and ready == [] and not pending
    assert future.result(0) is ack and ack.partition == 4


def test_settle_acks_holds_the_state_it_compares_until_the_comparison_is_over() -> None:
    """A future's state that is not the interned "FINISHED" is compared with ``==``,
    which may run Python code: here it replaces the state, dropping the future's
    reference to the object being compared. settle_acks must keep that object alive until
    the comparison is over (CPython reads it again after ``__eq__`` returns, e.g. for
    the reflected comparison after ``NotImplemented``): its finalizer runs after the
    truth test of the comparison's result, not in between."""
    from typing import Any

    from liftbridge_sync._publishing.futures import PublishFuture
    from liftbridge_sync._publishing.pending import Entry

    events: list[str] = []
    future: PublishFuture[Any] = PublishFuture()

    class Verdict:
        def __bool__(self) -> bool:
            events.append("truth test")
            return False

    class State(str):
        __hash__ = str.__hash__

        def __eq__(self, other: object) -> Any:
            future._state = "RUNNING"  # type: ignore[attr-defined]
            return Verdict()

        def __del__(self) -> None:
            events.append("state freed")

    future._state = State("FIN" + "ISHED")  # type: ignore[attr-defined]
    pending = {"c1": Entry(b"", "c1", 4, True, future, 0.0, 0.0)}
    ack = c_decode(delimited(1, _CID))
    assert ack is not None
    assert speedups.settle_acks is not None
    count, ready = speedups.settle_acks([ack], pending, threading.Lock(), True)
    assert events == ["truth test", "state freed"]
    assert count == 1 and ready == [] and not pending
    assert future.result(0) is ack


def test_empty_settings_are_answered_like_pings_and_the_rest_left_to_h2() -> None:
    """An empty SETTINGS asks only for an ACK (answered by the C reader, so a flood of
    them costs what a PING flood does); a SETTINGS ACK or one with values goes to h2."""
    assert speedups.scan_acks is not None
    empty = FRAME_HEADER.pack(4, 0, 0)
    settings_ack = FRAME_HEADER.pack(4, 1, 0)
    valued = FRAME_HEADER.pack(6 << 8 | 4, 0, 0) + b"\x00\x04\x00\x01\x00\x00"
    data = bytearray(empty + settings_ack + empty + valued)
    pos, _, _, control, pongs, _ = speedups.scan_acks(data, 0, 1, 16384)
    assert pos == len(data)
    assert pongs == settings_ack * 2
    assert control == settings_ack + valued
