"""The optional C speedups (liftbridge_sync/_speedups.c) against their Python equivalents.

Run with the extension built (``setup.py build_ext --inplace`` or ``pip install -e .``
with a C compiler) to compare both; without it, the C-only tests are skipped and the
fallback is what the rest of the suite runs on. ``LIFTBRIDGE_SYNC_NO_SPEEDUPS=1`` forces
the fallback for a whole run; ``make test`` sets ``LIFTBRIDGE_SYNC_REQUIRE_SPEEDUPS=1``, which
fails the run if the extension was not built.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._publishing import futures as futures_module
from liftbridge_sync._publishing.futures import PublishFuture, settle, settle_acks, take_acks
from liftbridge_sync._publishing.pending import Entry
from liftbridge_sync._transport.h2.framing import FRAME_HEADER
from liftbridge_sync._wire import publish_codec, speedups
from liftbridge_sync._wire.publish_codec import ack_from_proto, head
from liftbridge_sync.models import AckPolicy

BUILT = importlib.util.find_spec("liftbridge_sync._speedups") is not None
FORCED_OFF = os.environ.get("LIFTBRIDGE_SYNC_NO_SPEEDUPS", "").strip().lower() not in (
    "",
    "0",
    "false",
    "no",
    "off",
)
needs_c = pytest.mark.skipif(not speedups.ACTIVE, reason="C speedups not built or disabled")

if BUILT:
    from liftbridge_sync import _speedups


def test_the_active_implementation_is_the_expected_one() -> None:
    assert speedups.ACTIVE == (BUILT and not FORCED_OFF)
    if os.environ.get("LIFTBRIDGE_SYNC_REQUIRE_SPEEDUPS") == "1":
        # `make test` sets this: there the extension must have been built, so the C
        # tests below run instead of being skipped.
        assert BUILT, "liftbridge_sync._speedups was not built (is a C compiler installed?)"
    if not speedups.ACTIVE:  # reported in the run's summary (-ra)
        pytest.skip("liftbridge_sync._speedups is not active: the pure-Python fallback runs")


_PRINT_ACTIVE = "from liftbridge_sync._wire import speedups; print(speedups.ACTIVE)"


@pytest.mark.parametrize(
    ("value", "active", "warned"),
    [
        ("1", False, False),
        (" TRUE ", False, False),
        ("on", False, False),
        ("0", BUILT, False),
        ("false", BUILT, False),  # turned them off before
        (" no", BUILT, False),
        ("OFF", BUILT, False),
        ("", BUILT, False),
        ("maybe", False, True),  # set for a reason: off, and said so
    ],
)
def test_the_environment_variable_forces_the_fallback(
    value: str, active: bool, warned: bool
) -> None:
    env = {**os.environ, "LIFTBRIDGE_SYNC_NO_SPEEDUPS": value}
    out = subprocess.run(
        [sys.executable, "-W", "always::RuntimeWarning", "-c", _PRINT_ACTIVE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(active)
    assert ("LIFTBRIDGE_SYNC_NO_SPEEDUPS='maybe' is not one of" in out.stderr) is warned, out.stderr


_HEAD = head("stream-name", 3, AckPolicy.ALL)


@needs_c
def test_frame_functions_refuse_wrong_types() -> None:
    with pytest.raises(TypeError):
        _speedups.frame_id(_HEAD, "text", "p", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.frame_id(_HEAD, b"v", "ünicode", 1)
    with pytest.raises(TypeError):
        _speedups.frame_values(_HEAD, (b"a",), "p")  # type: ignore[arg-type]


def _frame(payload: bytes, sid: int = 1, kind: int = 0, flags: int = 0) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | kind, flags, sid) + payload


def _message(response: api_pb2.PublishResponse) -> bytes:
    data = response.SerializeToString()
    return len(data).to_bytes(5, "big") + data


_text = st.text(max_size=20)
_int64 = st.integers(-(2**63), 2**63 - 1)
_acks = st.builds(
    api_pb2.Ack,
    stream=_text,
    partitionSubject=_text,
    msgSubject=_text,
    offset=_int64,
    ackInbox=_text,
    correlationId=st.text(min_size=1, max_size=30),
    ackPolicy=st.integers(0, 5),
    receptionTimestamp=_int64,
    commitTimestamp=_int64,
)


@needs_c
@settings(max_examples=200)
@given(acks=st.lists(_acks, min_size=1, max_size=8), per_frame=st.integers(1, 3))
def test_scan_acks_reads_what_protobuf_reads(acks: list[api_pb2.Ack], per_frame: int) -> None:
    messages = [_message(api_pb2.PublishResponse(ack=a)) for a in acks]
    data = bytearray()
    updates = bytearray()
    for i in range(0, len(messages), per_frame):
        data += _frame(b"".join(messages[i : i + per_frame]))
        # WINDOW_UPDATEs, of the connection and of the stream: summed, frames kept.
        update = _frame(b"\0\0\0\3", sid=0, kind=8) + _frame(b"\0\0\1\0", sid=1, kind=8)
        data += update
        updates += update
    data += _frame(b"\0\0\0\0", sid=0, kind=8)  # a zero increment: left for h2 (an error)
    pos, got, payload, control, pongs, windows = _speedups.scan_acks(data, 0, 1, 16384)
    assert pos == len(data)
    assert got == [ack_from_proto(a, -1) for a in acks]
    assert payload == sum(map(len, messages))
    assert control == _frame(b"\0\0\0\0", sid=0, kind=8)
    frames = len(range(0, len(messages), per_frame))
    assert windows == (3 * frames, 256 * frames, bytes(updates))
    assert pongs == b""


@needs_c
def test_scan_acks_answers_pings_and_drops_ping_acks() -> None:
    good = _frame(_message(api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="a"))))
    ping = _frame(b"12345678", sid=0, kind=6)
    ping_ack = _frame(b"abcdefgh", sid=0, kind=6, flags=1)
    data = bytearray(good + ping + ping_ack + good + ping)
    pos, got, _, control, pongs, windows = _speedups.scan_acks(data, 0, 1, 16384)
    assert pos == len(data) and len(got) == 2 and control == b"" and windows is None
    assert pongs == 2 * _frame(b"12345678", sid=0, kind=6, flags=1)


@needs_c
def test_scan_acks_leaves_everything_else_to_python() -> None:
    good = _frame(_message(api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="a"))))
    others = [
        _frame(
            _message(
                api_pb2.PublishResponse(
                    ack=api_pb2.Ack(correlationId="x", ackError="INCORRECT_OFFSET")
                )
            )
        ),
        _frame(
            _message(
                api_pb2.PublishResponse(
                    asyncError=api_pb2.PublishAsyncError(code="NOT_FOUND"), correlationId="x"
                )
            )
        ),
        _frame(_message(api_pb2.PublishResponse(ack=api_pb2.Ack(stream="no id")))),
        _frame(_message(api_pb2.PublishResponse())),
        _frame(good[9:], sid=3),  # another stream
        _frame(good[9:], flags=1),  # END_STREAM
        _frame(good[9:], flags=8),  # PADDED
        _frame(good[9:] + good[9:14]),  # a message split across frames
        _frame(b""),
        _frame(b"\1" + good[10:]),  # compressed
        _frame(b"\0\0\0\0\3\x0a\x01\xff"),  # truncated ack
        _frame(b"\0\0\0\0\3\x0a\x01\xff"),
        _frame(b"\x00" * 8, sid=0, kind=7),  # GOAWAY
        _frame(b"\x00" * 7, sid=0, kind=6),  # a PING of the wrong length
        _frame(b"\x00" * 5, sid=1, kind=1),  # HEADERS
    ]
    bad_utf8 = api_pb2.Ack(correlationId="x").SerializeToString() + b"\x0a\x02\xff\xfe"
    others.append(_frame(_message_raw(b"\x0a" + bytes([len(bad_utf8)]) + bad_utf8)))
    for other in others:
        data = bytearray(good + other + good)
        pos, got, _, _, _, _ = _speedups.scan_acks(data, 0, 1, 16384)
        assert (pos, len(got)) == (len(good), 1), other
    for partial in range(1, len(good)):
        pos, got, _, _, _, _ = _speedups.scan_acks(bytearray(good + good[:partial]), 0, 1, 16384)
        assert (pos, len(got)) == (len(good), 1)


def _message_raw(data: bytes) -> bytes:
    return len(data).to_bytes(5, "big") + data


@needs_c
@settings(max_examples=500)
@given(garbage=st.binary(max_size=200), start=st.integers(0, 20))
def test_scan_acks_on_garbage_stops_cleanly(garbage: bytes, start: int) -> None:
    data = bytearray(garbage)
    pos, got, payload, control, pongs, windows = _speedups.scan_acks(data, start, 1, 16384)
    assert pos == start or start <= pos <= len(data)
    assert payload <= len(data)
    for ack in got:
        assert ack.correlation_id and ack.ack_error is None and ack.partition == -1


def _Entry(future: PublishFuture[Any], partition: int) -> Entry:  # noqa: N802 - a stand-in
    return Entry(b"", "", partition, True, future, 1.0, 1.0)


@needs_c
def test_settle_acks_resolves_the_leading_plain_acks_in_bulk() -> None:
    acks = [ack_from_proto(api_pb2.Ack(correlationId=f"c{i}", offset=i), -1) for i in range(6)]
    futures: list[PublishFuture[Any]] = [PublishFuture() for _ in acks]
    pending: dict[str, Any] = {f"c{i}": _Entry(f, 7) for i, f in enumerate(futures)}
    del pending["c4"]  # unknown id: stops there
    waiter = threading.Thread(target=futures[2].result, args=(10,))
    waiter.start()
    while "_condition" not in futures[2].__dict__:
        time.sleep(0.001)
    assert settle_acks(acks, pending) == 4
    waiter.join(5)
    assert not waiter.is_alive()
    for i in range(4):
        assert futures[i].result(0) is acks[i] and acks[i].partition == 7
    assert not futures[5].done() and list(pending) == ["c5"]
    # A future with a done-callback, or already resolved, is left to Python.
    late = [ack_from_proto(api_pb2.Ack(correlationId=f"d{i}"), -1) for i in range(2)]
    with_callback: PublishFuture[Any] = PublishFuture()
    with_callback.add_done_callback(lambda f: None)
    pending = {"d0": _Entry(with_callback, 0), "d1": _Entry(PublishFuture(), 0)}
    assert settle_acks(late, pending) == 0 and len(pending) == 2
    falsy: PublishFuture[Any] = PublishFuture()
    falsy.add_done_callback(_FalsyCallback([], "cb"))  # a callback, though false
    pending = {"d0": _Entry(falsy, 0)}
    assert settle_acks(late, pending) == 0 and len(pending) == 1
    resolved: PublishFuture[Any] = PublishFuture()
    resolved.set_result(None)
    pending = {"d0": _Entry(resolved, 0)}
    assert settle_acks(late, pending) == 0 and len(pending) == 1
    # Not an Ack (a PublishResponse the Python reader parsed): left to Python.
    assert settle_acks([api_pb2.PublishResponse()], {}) == 0


def test_settle_acks_takes_nothing_without_the_speedups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(futures_module, "_settle_acks", None)
    ack = ack_from_proto(api_pb2.Ack(correlationId="c"), -1)
    pending: dict[str, Any] = {"c": _Entry(PublishFuture(), 0)}
    assert settle_acks([ack], pending) == 0 and len(pending) == 1


@needs_c
def test_take_acks_pops_every_entry_and_leaves_callbacks_to_settle() -> None:
    acks = [ack_from_proto(api_pb2.Ack(correlationId=f"c{i}", offset=i), -1) for i in range(5)]
    futures: list[PublishFuture[Any]] = [PublishFuture() for _ in acks]
    called: list[int] = []
    futures[1].add_done_callback(lambda f: called.append(1))
    futures[3].set_exception(RuntimeError("timed out meanwhile"))
    pending: dict[str, Any] = {f"c{i}": _Entry(f, 2) for i, f in enumerate(futures)}
    del pending["c2"]  # no entry: the ack is dropped
    tail = api_pb2.PublishResponse()  # not an Ack: where it stops
    count, ready = take_acks([*acks, tail], pending)
    assert count == 5 and not pending
    assert ready == [futures[1]] and not called  # callbacks are settle()'s job
    settle((), None, ready)
    assert called == [1]
    assert futures[0].result(0) is acks[0] and futures[4].result(0).partition == 2
    assert not futures[2].done()
    assert isinstance(futures[3].exception(0), RuntimeError)


_BULK_FUTURES = """
import gc
from liftbridge_sync._publishing.futures import PublishFuture, settle
futures = [PublishFuture() for _ in range(500)]
settle([(f, i, None) for i, f in enumerate(futures)])
print(sum(any(type(r) is dict for r in gc.get_referents(f)) for f in futures))
"""


def test_futures_created_in_bulk_before_any_resolves_carry_no_dict() -> None:
    # A fresh interpreter: the attribute layout is per class and per process. Without
    # priming it, every future would get a dict of its own (one more object per
    # publish for the garbage collector).
    out = subprocess.run(
        [sys.executable, "-c", _BULK_FUTURES], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"


@needs_c
def test_an_ack_read_by_the_c_reader_is_not_tracked_by_the_garbage_collector() -> None:
    data = _frame(_message(api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="a"))))
    _, acks, _, _, _, _ = _speedups.scan_acks(bytearray(data), 0, 1, 16384)
    assert [a.correlation_id for a in acks] == ["a"]
    assert not gc.is_tracked(acks[0])


@needs_c
def test_send_held_and_recv_held_move_bytes_over_a_socket() -> None:
    import socket

    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        right.setblocking(False)
        assert _speedups.recv_held(right.fileno(), 1024) is None  # nothing waiting yet
        assert _speedups.send_held(left.fileno(), b"hello") == 5
        assert _speedups.send_held(left.fileno(), bytearray(b" world")) == 6
        assert _speedups.recv_held(right.fileno(), 1024) == b"hello world"
        # A full socket buffer: a partial send, then 0 (would block), never an error.
        sent = [_speedups.send_held(left.fileno(), b"x" * 65536) for _ in range(64)]
        assert sent[-1] == 0 and sum(sent) > 0
        left.close()
        received = 0
        while (chunk := _speedups.recv_held(right.fileno(), 1 << 20)) != b"":
            assert chunk is not None, "everything sent is readable once the peer closed"
            received += len(chunk)
        assert received == sum(sent)  # then b"": the end of the stream


@needs_c
def test_recv_held_reads_what_a_tcp_socket_holds_up_to_the_size() -> None:
    # It asks the socket how much it holds (so a read of a few acks does not allocate
    # the whole 256 KiB the caller allows): the bytes come back exact and in order.
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        left = socket.create_connection(server.getsockname())
        right, _ = server.accept()
        with left, right:
            right.setblocking(False)
            assert _speedups.recv_held(right.fileno(), 1 << 18) is None
            left.sendall(b"abcdefgh")
            deadline = time.monotonic() + 5
            got = b""
            while len(got) < 3 and time.monotonic() < deadline:
                got += _speedups.recv_held(right.fileno(), 3 - len(got)) or b""
            assert got == b"abc"  # capped at the size asked for
            rest = b""
            while len(rest) < 5 and time.monotonic() < deadline:
                rest += _speedups.recv_held(right.fileno(), 1 << 18) or b""
            assert rest == b"defgh"
            left.close()
            while (end := _speedups.recv_held(right.fileno(), 1 << 18)) is None:
                assert time.monotonic() < deadline
            assert end == b""


@needs_c
def test_send_held_and_recv_held_raise_typed_errors() -> None:
    import socket

    with pytest.raises(TypeError):
        _speedups.send_held("3", b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        _speedups.recv_held(-1, 10)
    with pytest.raises(ValueError):
        _speedups.recv_held(0, 0)
    left, right = socket.socketpair()
    with left:
        right.close()
        with pytest.raises(OSError):  # EPIPE: the peer is gone
            _speedups.send_held(left.fileno(), b"x")
    with pytest.raises(OSError):  # EBADF: no such descriptor
        _speedups.recv_held(2**30, 10)


def test_new_entries_match_the_python_construction() -> None:
    from liftbridge_sync._publishing import pending

    framed, ids = [b"\0\0\0\0\1a", b"\0\0\0\0\1b"], ["x.0", "x.1"]
    built = pending.new_entries(framed, ids, 3, True, 5.0, 105.0)
    expected = pending._py_new_entries(framed, ids, 3, True, 5.0, 105.0)
    for entries, futures in (built, expected):
        assert [e.future for e in entries] == futures
        assert all(type(f) is PublishFuture and not f.done() for f in futures)
    fields = ("framed", "correlation_id", "partition", "wants_ack", "timeout", "deadline")
    more = ("seq", "resent_at", "key")
    assert [[getattr(e, n) for n in fields + more] for e in built[0]] == [
        [getattr(e, n) for n in fields + more] for e in expected[0]
    ]
    # Real entries: the fields stay writable, as the publisher needs.
    built[0][0].seq = 7
    assert built[0][0].seq == 7
    assert pending.new_entries([], [], 0, False, 1.0, 2.0) == ([], [])
    # A partition per request (a keyed batch that ByKey spread).
    for make in (pending.new_entries, pending._py_new_entries):
        spread, _ = make(framed, ids, [2, 0], True, 5.0, 105.0)
        assert [(e.correlation_id, e.partition) for e in spread] == [("x.0", 2), ("x.1", 0)]


@needs_c
def test_make_entries_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError):
        _speedups.make_entries([b"a"], [], 0, True, 1.0, 2.0)  # lengths differ
    with pytest.raises(TypeError):
        _speedups.make_entries([b"a"], ["x"], [0, 1], True, 1.0, 2.0)  # one partition each
    with pytest.raises(TypeError):
        _speedups.make_entries((b"a",), ("x",), 0, True, 1.0, 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.setup_entries(dict, PublishFuture)  # not an EntryCore


@needs_c
@pytest.mark.parametrize("builtin", [dict, int, object, type, bytes])
def test_setup_refuses_built_in_types_with_a_type_error(builtin: type) -> None:
    # From 3.12 on, a static built-in type has no tp_dict of its own: reading it crashed
    # the interpreter. Every set-up that locates slots by name must refuse it instead.

    with pytest.raises(TypeError, match="must derive from EntryCore"):
        _speedups.setup_entries(builtin, PublishFuture)
    with pytest.raises(TypeError, match="must derive from EntryCore"):
        _speedups.setup_entries(Entry, builtin)
    with pytest.raises(TypeError, match="must derive from AckCore"):
        _speedups.setup(builtin, (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE))


def test_new_entry_matches_the_python_construction() -> None:
    from liftbridge_sync._publishing import pending

    built = pending.new_entry(b"\0\0\0\0\1a", "x.0", 2, False, 5.0, 105.0)
    assert type(built) is pending.Entry and type(built.future) is PublishFuture
    assert not built.future.done()
    assert (built.framed, built.correlation_id, built.partition, built.wants_ack) == (
        b"\0\0\0\0\1a",
        "x.0",
        2,
        False,
    )
    assert (built.timeout, built.deadline, built.seq, built.resent_at, built.key) == (
        5.0,
        105.0,
        0,
        0.0,
        None,
    )


@pytest.mark.parametrize("which", ["active", "python"])
def test_frame_entry_is_frame_id_and_new_entry_in_one(which: str) -> None:
    from liftbridge_sync._publishing import pending

    make = pending.frame_entry if which == "active" else pending._py_frame_entry
    cached = head("orders", 3, AckPolicy.ALL)
    value = b"v" * 300
    framed, correlation_id = publish_codec.frame_id(cached, value, "p.", 41)
    built = make(cached, value, "p.", 41, len(framed), 3, True, 2.0, 9.0)
    assert type(built) is pending.Entry and type(built.future) is PublishFuture
    assert (built.framed, built.correlation_id, built.partition, built.wants_ack) == (
        framed,
        correlation_id,
        3,
        True,
    )
    assert (built.timeout, built.deadline, built.seq, built.resent_at, built.key) == (
        2.0,
        9.0,
        0,
        0.0,
        None,
    )
    # One byte over the limit: nothing is built.
    assert make(cached, value, "p.", 41, len(framed) - 1, 3, True, 2.0, 9.0) is None


@needs_c
def test_run_callbacks_runs_them_in_order_and_stops_at_a_waited_future() -> None:
    calls: list[tuple[str, int]] = []
    futures: list[Any] = [PublishFuture() for _ in range(4)]
    for i, future in enumerate(futures):
        future.add_done_callback(lambda f, i=i: calls.append(("a", i)))
        future.add_done_callback(lambda f, i=i: calls.append(("b", i)))
    boom = ValueError("boom")

    def fail(_: object) -> None:
        raise boom

    futures[1].add_done_callback(fail)
    futures[2]._condition  # noqa: B018 - somebody waits on this one
    for future in futures:
        future._state = "FINISHED"
    index, errors = _speedups.run_callbacks(futures, 0)
    assert index == 2
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert errors == [(futures[1], boom)]
    assert futures[0]._done_callbacks == () and futures[2]._done_callbacks != ()
    index, errors = _speedups.run_callbacks(futures, 3)
    assert (index, errors) == (4, [])
    assert calls[-2:] == [("a", 3), ("b", 3)]


@needs_c
def test_run_callbacks_lets_a_keyboard_interrupt_through() -> None:
    future: Any = PublishFuture()

    def interrupt(_: object) -> None:
        raise KeyboardInterrupt

    future.add_done_callback(interrupt)
    future._state = "FINISHED"
    with pytest.raises(KeyboardInterrupt):
        _speedups.run_callbacks([future], 0)


def test_settle_logs_a_failing_callback_and_runs_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    futures: list[Any] = [PublishFuture() for _ in range(3)]
    seen: list[int] = []
    futures[0].add_done_callback(lambda f: seen.append(0))
    futures[1].add_done_callback(lambda f: 1 / 0)
    futures[2].add_done_callback(lambda f: seen.append(2))
    with caplog.at_level("ERROR", logger="liftbridge_sync.publisher"):
        assert settle([(f, i, None) for i, f in enumerate(futures)]) == 3
    assert seen == [0, 2]
    [record] = caplog.records
    assert "exception calling callback" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError


class _FalsyCallback:
    """A callable that is false in a boolean context (it has a length of 0)."""

    def __init__(self, seen: list[object], tag: str) -> None:
        self.seen = seen
        self.tag = tag

    def __len__(self) -> int:
        return 0

    def __call__(self, future: object) -> None:
        self.seen.append((self.tag, future))


def test_a_single_callback_is_kept_without_a_list_and_runs_even_if_falsy() -> None:
    # One callback is stored as itself (one object less per publish); it must still
    # count as a callback however it answers bool().
    seen: list[object] = []
    lone: Any = PublishFuture()
    lone.add_done_callback(_FalsyCallback(seen, "lone"))
    assert isinstance(lone._done_callbacks, _FalsyCallback)
    pair: Any = PublishFuture()
    pair.add_done_callback(_FalsyCallback(seen, "first"))
    pair.add_done_callback(_FalsyCallback(seen, "second"))
    assert [c.tag for c in pair._done_callbacks] == ["first", "second"]
    assert settle([(lone, 1, None), (pair, 2, None)]) == 2
    assert seen == [("lone", lone), ("first", pair), ("second", pair)]
    assert [lone._done_callbacks, pair._done_callbacks] == [(), ()]


def test_acks_for_a_future_with_a_falsy_callback_are_left_to_the_owner() -> None:
    # The stream's thread resolves only callback-less futures; a falsy callable must
    # not pass for "none" there either (C and Python paths alike).
    seen: list[object] = []
    future: Any = PublishFuture()
    future.add_done_callback(_FalsyCallback(seen, "cb"))
    skipped = futures_module.settle_plain([(future, "ack")])
    assert skipped == [0] and not future.done() and seen == []


@needs_c
def test_run_callbacks_calls_a_single_falsy_callback() -> None:
    seen: list[object] = []
    future: Any = PublishFuture()
    future.add_done_callback(_FalsyCallback(seen, "cb"))
    future._state = "FINISHED"
    assert _speedups.run_callbacks([future], 0) == (1, [])
    assert seen == [("cb", future)] and future._done_callbacks == ()


@needs_c
def test_entries_built_in_c_are_not_tracked_by_the_cyclic_gc() -> None:
    # Thousands of entries wait for their acks at once; the collector need not walk
    # them (nothing but the publisher's tables refers to an entry). Their futures,
    # which users hold and hang callbacks on, stay tracked.
    from liftbridge_sync._publishing.pending import new_entries, new_entry

    entry = new_entry(b"x", "c", 0, True, 1.0, 2.0)
    entries, futures = new_entries([b"a", b"b"], ["c1", "c2"], 0, True, 1.0, 2.0)
    assert not any(gc.is_tracked(e) for e in [entry, *entries])
    assert all(gc.is_tracked(f) for f in [entry.future, *futures])


@needs_c
def test_settle_acks_reads_real_entries_through_their_slots() -> None:
    # Entries of the publisher's own class are read by slot offset (other objects by
    # attribute, as above); the ack's partition is written into its slot.
    from liftbridge_sync._publishing.pending import new_entry

    acks = [ack_from_proto(api_pb2.Ack(correlationId=f"e{i}", offset=i), -1) for i in range(3)]
    entries = [new_entry(b"x", f"e{i}", 5 + i, True, 1.0, 2.0) for i in range(3)]
    pending: dict[str, Any] = {e.correlation_id: e for e in entries}
    assert settle_acks(acks, pending) == 3 and not pending
    assert [e.future.result(0) for e in entries] == acks
    assert [a.partition for a in acks] == [5, 6, 7]


@needs_c
def test_setup_refuses_an_ack_class_not_made_of_an_ack_core_and_keeps_the_old_one() -> None:
    with pytest.raises(TypeError, match="must derive from AckCore"):
        _speedups.setup(PublishFuture, (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE))
    # Still set up with the real Ack: decoding works as before.
    ack = api_pb2.PublishResponse(ack=api_pb2.Ack(correlationId="z", offset=9))
    message = ack.SerializeToString()
    payload = b"\0" + len(message).to_bytes(4, "big") + message
    frame = len(payload).to_bytes(3, "big") + b"\0\0" + (1).to_bytes(4, "big") + payload
    _, got, _, _, _, _ = _speedups.scan_acks(bytearray(frame), 0, 1, 16384)
    assert [(a.correlation_id, a.offset, a.partition) for a in got] == [("z", 9, -1)]


@pytest.mark.parametrize("which", ["active", "python"])
def test_pop_answered_pops_only_the_answered_head(which: str) -> None:
    import collections

    from liftbridge_sync._publishing import pending as pending_module

    pop = pending_module.pop_answered if which == "active" else pending_module._py_pop_answered
    entries = [pending_module.new_entry(b"x", f"q{i}", 0, True, 1.0, 2.0) for i in range(5)]
    queue_ = collections.deque(entries)
    # q0 answered, q1 re-entered under a new entry object (a re-send), q2 pending, q3
    # answered behind it: only the head run goes.
    pending: dict[str, Any] = {"q1": pending_module.new_entry(b"y", "q1", 0, True, 1.0, 2.0)}
    pending["q2"] = entries[2]
    pending["q4"] = entries[4]
    assert pop(queue_, pending) is True
    assert list(queue_) == entries[2:]
    del pending["q2"]
    assert pop(queue_, pending) is True and list(queue_) == entries[4:]
    pending.clear()
    assert pop(queue_, pending) is False and not queue_


@needs_c
def test_submit_setup_refuses_bad_arguments() -> None:
    import collections

    from liftbridge_sync._wire.publish_codec import _heads

    lock_type = type(threading.Lock())
    with pytest.raises(TypeError, match="setup_submit"):  # the old signature, with a lock type
        _speedups.setup_submit(lock_type, collections.deque, _heads, AckPolicy.NONE)  # type: ignore[call-arg,arg-type]
    with pytest.raises(TypeError, match="setup_submit"):
        _speedups.setup_submit(collections.deque, [], AckPolicy.NONE)  # type: ignore[arg-type]


@needs_c
def test_submit_plain_leaves_anything_but_the_common_case_to_python() -> None:
    # None: nothing made, the caller does it all (here: not a PendingCore, or one that
    # is closing); nothing raises.
    assert _speedups.submit_plain(object(), "s", b"v", 0, AckPolicy.LEADER, 5.0) is None  # type: ignore[arg-type]
    core = _speedups.PendingCore(8, 1 << 20, "p.", time.monotonic)
    core.closing = True
    assert _speedups.submit_plain(core, "s", b"v", 0, AckPolicy.LEADER, 5.0) is None
    assert core.pending == {} and core.seq == 0
