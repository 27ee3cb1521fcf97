"""The publish stream's reader adds WINDOW_UPDATE increments to h2's windows itself.

h2 parses a WINDOW_UPDATE frame in tens of microseconds and the broker sends them all
the time, so the C reader sums them; the reader adds the sums as h2 would, and leaves
the frames to h2 where h2 would do more than add (closed streams, overflowing windows).
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync._transport.h2.framing import window_update
from liftbridge_sync._transport.h2.responses import MAX_WINDOW, ResponseReader
from liftbridge_sync._wire import speedups

_HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "a")]


def _opened() -> tuple[h2.connection.H2Connection, bytes]:
    """A client with stream 1 open, and the server's answer (SETTINGS and response
    headers) still to be received."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    client.send_headers(1, _HEADERS)
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
    return client, server.data_to_send()


@pytest.fixture(params=[True, False], ids=["c-scanner", "pure-python"])
def ack_scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs a test with the C ack scanner and again on the pure Python reader (the fast
    paths read DATA h2 never sees, so both must keep the windows as h2 would)."""
    from liftbridge_sync._transport.h2 import responses

    if request.param and speedups.scan_acks is None:
        pytest.skip("C speedups not built or disabled")
    if not request.param:
        monkeypatch.setattr(responses, "scan_acks", None)


def _reading() -> tuple[h2.connection.H2Connection, ResponseReader]:
    """An opened stream's connection and a reader that took the response headers."""
    conn, answer = _opened()
    reader = ResponseReader(conn, 1)
    reader.receive(answer)
    return conn, reader


def _pair() -> tuple[h2.connection.H2Connection, bytes]:
    """A client with stream 1 open and answered."""
    client, answer = _opened()
    client.receive_data(answer)
    client.data_to_send()
    return client, answer


def _windows(conn: h2.connection.H2Connection) -> tuple[int, int]:
    return conn.outbound_flow_control_window, conn.streams[1].outbound_flow_control_window


def test_increments_are_added_as_h2_adds_them() -> None:
    ours, _ = _pair()
    twin, _ = _pair()
    frames = window_update(0, 70_000) + window_update(1, 5) + window_update(0, 3)
    ResponseReader(ours, 1)._add_windows(70_003, 5, frames)
    twin.receive_data(frames)
    assert _windows(ours) == _windows(twin) == (65_535 + 70_003, 65_535 + 5)


def test_a_stream_that_is_no_longer_open_leaves_the_frames_to_h2() -> None:
    conn, _ = _pair()
    conn.reset_stream(1)
    reader = ResponseReader(conn, 1)
    before = conn.outbound_flow_control_window
    # h2 takes a late WINDOW_UPDATE on a reset stream quietly and adds nothing to it.
    reader._add_windows(10, 7, window_update(0, 10) + window_update(1, 7))
    assert conn.outbound_flow_control_window == before + 10
    assert not reader.ended


def test_a_connection_window_overflow_is_h2s_protocol_error() -> None:
    conn, _ = _pair()
    increment = MAX_WINDOW - conn.outbound_flow_control_window + 1
    with pytest.raises(h2.exceptions.FlowControlError):
        ResponseReader(conn, 1)._add_windows(increment, 0, window_update(0, increment))


def test_a_stream_window_overflow_resets_the_stream() -> None:
    conn, _ = _pair()
    increment = MAX_WINDOW - conn.streams[1].outbound_flow_control_window + 1
    reader = ResponseReader(conn, 1)
    reader._add_windows(0, increment, window_update(1, increment))
    assert reader.ended and reader.error is not None
    assert conn.streams[1].outbound_flow_control_window == 65_535  # not added


@pytest.mark.skipif(speedups.scan_acks is None, reason="C speedups not built or disabled")
def test_received_window_updates_open_the_windows_through_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn, answer = _opened()
    reader = ResponseReader(conn, 1)
    assert reader.receive(answer) == []  # the response headers: the C path is open
    before = _windows(conn)
    given_to_h2: list[bytes] = []
    receive_data = conn.receive_data

    def watched(data: bytes) -> object:
        given_to_h2.append(data)
        return receive_data(data)

    monkeypatch.setattr(conn, "receive_data", watched)
    assert reader.receive(window_update(0, 1000) + window_update(1, 2000)) == []
    assert _windows(conn) == (before[0] + 1000, before[1] + 2000)
    assert given_to_h2 == []  # added by the reader, not parsed by h2
    assert not reader.ended


@settings(max_examples=300, deadline=None)
@given(
    updates=st.lists(
        st.tuples(st.sampled_from([0, 1]), st.integers(1, MAX_WINDOW)), min_size=1, max_size=6
    ),
    closed=st.booleans(),
)
def test_the_sums_end_where_h2_frame_by_frame_ends(
    updates: list[tuple[int, int]], closed: bool
) -> None:
    # Whatever the increments (overflowing or not) and the stream's state, adding the
    # sums leaves the windows, the stream and the errors as h2's own handling does.
    ours, _ = _pair()
    twin, _ = _pair()
    if closed:
        ours.reset_stream(1)
        twin.reset_stream(1)
        ours.data_to_send()
        twin.data_to_send()
    frames = b"".join(window_update(sid, inc) for sid, inc in updates)
    connection = sum(inc for sid, inc in updates if sid == 0)
    stream = sum(inc for sid, inc in updates if sid == 1)
    reader = ResponseReader(ours, 1)
    our_error = twin_error = None
    try:
        reader._add_windows(connection, stream, frames)
    except h2.exceptions.ProtocolError as exc:
        our_error = type(exc)
    try:
        twin.receive_data(frames)
    except h2.exceptions.ProtocolError as exc:
        twin_error = type(exc)
    assert our_error is twin_error
    assert ours.outbound_flow_control_window == twin.outbound_flow_control_window
    assert ours.streams[1].outbound_flow_control_window == (
        twin.streams[1].outbound_flow_control_window
    )
    assert ours.streams[1].state_machine.state == twin.streams[1].state_machine.state


@pytest.mark.usefixtures("ack_scanner")
def test_data_bytes_counts_only_the_responses_frames() -> None:
    # The ack gatherer sizes its wait by this: the broker's PING and WINDOW_UPDATE in
    # the same read must not make an ack look larger than it is.
    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync._transport.h2.framing import PREFIX, data_frame_header, ping_frame

    conn, reader = _reading()
    ack = api_pb2.PublishResponse(
        ack=api_pb2.Ack(stream="s", partitionSubject="s", msgSubject="s", correlationId="7"),
        correlationId="7",
    ).SerializeToString()
    message = PREFIX.pack(0, len(ack)) + ack
    data = (
        data_frame_header(1, len(message))
        + message
        + ping_frame(b"12345678")
        + window_update(0, 30)
        + data_frame_header(1, len(message))
        + message
    )
    assert len(reader.receive(data)) == 2
    assert reader.data_bytes == 2 * len(message)


@pytest.mark.usefixtures("ack_scanner")
def test_data_beyond_the_window_we_gave_is_a_flow_control_error() -> None:
    # The fast paths read DATA that h2 never sees, so they count it against the window
    # themselves: a broker that sends more than we allowed ends the connection with
    # GOAWAY(FLOW_CONTROL_ERROR) and a retryable error, as h2 would for frames it saw.
    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync._transport.h2.framing import PREFIX, data_frame_header, split_frames
    from liftbridge_sync.errors import BrokerUnavailableError

    conn, reader = _reading()  # our windows: h2's default 65,535 bytes
    reader.credit_frames.clear()
    ack = api_pb2.PublishResponse(
        ack=api_pb2.Ack(stream="s", partitionSubject="s", msgSubject="s", correlationId="7"),
        correlationId="c" * 1000,
    ).SerializeToString()
    message = PREFIX.pack(0, len(ack)) + ack
    frame = data_frame_header(1, len(message)) + message
    fit = 65_535 // len(message)
    assert len(reader.receive(frame * fit)) == fit  # all within the window
    assert not reader.ended and not reader.credit_frames
    # One frame more than the window allows (no WINDOW_UPDATE of ours came between).
    assert len(reader.receive(frame)) == 1  # read before the end: still an answer
    assert reader.ended
    assert isinstance(reader.error, BrokerUnavailableError) and reader.error.retryable
    assert "beyond the flow-control window" in str(reader.error)
    frames, _ = split_frames(reader.credit_frames)
    goaways = [(s, e) for kind, _, _, s, e in frames if kind == 7]
    assert len(goaways) == 1
    start, _ = goaways[0]
    assert int.from_bytes(reader.credit_frames[start + 4 : start + 8], "big") == 0x3


def _reserved(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE with its reserved bit set (RFC 9113 §6.9: to be ignored)."""
    frame = bytearray(window_update(stream_id, increment))
    frame[9] |= 0x80
    return bytes(frame)


@pytest.mark.usefixtures("ack_scanner")
def test_the_reserved_bit_of_a_window_update_is_ignored() -> None:
    # The C scanner masked the bit and added the increment; the frames the pure Python
    # reader hands to h2 made h2 (hyperframe) fail the connection with a ProtocolError.
    conn, reader = _reading()
    before = _windows(conn)
    assert reader.receive(_reserved(0, 1000) + _reserved(1, 2000)) == []
    assert not reader.ended, reader.error
    assert _windows(conn) == (before[0] + 1000, before[1] + 2000)


@pytest.mark.usefixtures("ack_scanner")
def test_a_zero_increment_with_the_reserved_bit_is_still_an_error() -> None:
    # Ignoring the bit leaves an increment of 0: a PROTOCOL_ERROR (RFC 9113 §6.9) on
    # both paths, as without the bit.
    outcomes: list[type[BaseException] | None] = []
    for frame in (window_update(0, 0), _reserved(0, 0)):
        conn, reader = _reading()
        try:
            reader.receive(frame)
        except h2.exceptions.ProtocolError as exc:
            outcomes.append(type(exc))
        else:
            outcomes.append(None if reader.error is None else type(reader.error))
    assert outcomes[0] is not None and outcomes[0] is outcomes[1], outcomes


def test_frames_left_to_h2_have_their_reserved_bit_ignored() -> None:
    # The C scanner's sums with the frames for h2 (a stream no longer open): h2 must
    # add what the sums say, not refuse the frames.
    conn, _ = _pair()
    conn.reset_stream(1)
    reader = ResponseReader(conn, 1)
    before = conn.outbound_flow_control_window
    reader._add_windows(10, 7, _reserved(0, 10) + _reserved(1, 7))
    assert conn.outbound_flow_control_window == before + 10
    assert not reader.ended
