"""Fuzzing of the C speedups, meant to run under AddressSanitizer and UBSan (``make fuzz``).

``make fuzz`` compiles ``liftbridge_sync/_speedups*.c`` with ``-fsanitize=address,undefined``
into ``build/fuzz/`` and runs this module with the sanitizer runtime preloaded,
``PYTHONMALLOC=malloc`` (so that Python's objects come from the sanitized ``malloc`` and
a read past one is caught) and ``LIFTBRIDGE_SYNC_FUZZ_MODULE`` naming the sanitized
extension, which is loaded in place of the installed one. Without that variable it fuzzes
the installed extension (no sanitizer: only the assertions below).

Targets, each given an equal share of ``LIFTBRIDGE_SYNC_FUZZ_SECONDS`` (default 60):

* ``scan_acks`` on exact-size buffers (ctypes arrays: ``malloc`` of exactly the input's
  length) of frames valid and not, from any position and with any frame size limit;
  and through the publish reader (``ResponseReader``), fed in arbitrary chunks;
* ``decode_ack`` (the codec's drop-in) on exact-size messages valid and not: ``None``
  or the Ack protobuf reads, never an Ack where protobuf raises;
* ``settle_acks`` and ``run_callbacks`` with re-entrant locks, futures and callbacks
  that change the lists and tables the C code is walking;
* the frame builders (``frame_value``, ``frame_id``, ``frame_values``, ``frame_pairs``,
  ``frame_entry``, ``make_entries``) against their Python twins in the publish codec;
* ``recv_held``/``send_held`` over a socket pair, in arbitrary chunk and read sizes;
* the ``EntryCore`` and ``FutureCore`` types: arbitrary constructor arguments and field
  writes, against ``EntryCore``'s Python twin.

Every target also checks that what comes out is bounded by what went in. A failure
raises (the exit status is non-zero); a sanitizer report aborts the process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _load_module_under_test() -> Any:
    path = os.environ.get("LIFTBRIDGE_SYNC_FUZZ_MODULE")
    if path:
        spec = importlib.util.spec_from_file_location("liftbridge_sync._speedups", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["liftbridge_sync._speedups"] = module  # before anything imports it
    from liftbridge_sync._wire import speedups

    assert speedups.ACTIVE, "the C speedups are not active"
    from liftbridge_sync import _speedups

    if path:
        assert os.path.samefile(_speedups.__file__, path)
    return _speedups


C = _load_module_under_test()

# Imported only now: they import liftbridge_sync._wire.speedups, which must see the
# sanitized module.
from liftbridge_sync._proto import api_pb2  # noqa: E402
from liftbridge_sync._publishing.futures import PublishFuture  # noqa: E402
from liftbridge_sync._publishing.gates import PyGate  # noqa: E402
from liftbridge_sync._publishing.pending import Entry, PyEntryCore  # noqa: E402
from liftbridge_sync._publishing.pending_core import PyPendingCore  # noqa: E402
from liftbridge_sync._transport.h2.framing import FRAME_HEADER  # noqa: E402
from liftbridge_sync._transport.h2.outbound_queue import PyOutboundQueue  # noqa: E402
from liftbridge_sync._wire import publish_codec  # noqa: E402
from liftbridge_sync._wire.publish_codec import head  # noqa: E402
from liftbridge_sync.models import Ack, AckPolicy  # noqa: E402
from liftbridge_sync.models._ack import ACK_FIELD_NAMES, PyAckCore  # noqa: E402

_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def exact(data: bytes) -> ctypes.Array[ctypes.c_char]:
    """``data`` in a buffer of exactly its size (ctypes mallocs arrays over 16 bytes)."""
    buffer = (ctypes.c_char * len(data))()
    ctypes.memmove(buffer, data, len(data))
    return buffer


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload


def message(body: bytes) -> bytes:
    return len(body).to_bytes(5, "big") + body


_acks = st.builds(
    api_pb2.Ack,
    stream=st.text(max_size=6),
    correlationId=st.text(min_size=1, max_size=6),
    offset=st.integers(-(2**63), 2**63 - 1),
    ackPolicy=st.integers(0, 4),
    ackError=st.integers(0, 5),
)


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    """One HTTP/2 frame of the kinds the publish reader meets, well formed or not."""
    choice = draw(st.integers(0, 7))
    if choice <= 2:  # DATA of stream 1: acks, corrupted or not
        bodies = [
            api_pb2.PublishResponse(ack=a).SerializeToString()
            for a in draw(st.lists(_acks, max_size=3))
        ]
        payload = b"".join(message(b) for b in bodies)
        if payload and draw(st.booleans()):
            cut = draw(st.integers(0, len(payload)))
            payload = payload[:cut] + draw(st.binary(max_size=8))
        return frame(
            0, draw(st.sampled_from([0, 0, 1, 8])), draw(st.sampled_from([1, 1, 3])), payload
        )
    if choice == 3:
        return frame(6, draw(st.sampled_from([0, 1])), 0, draw(st.binary(min_size=7, max_size=9)))
    if choice == 4:
        return frame(4, draw(st.sampled_from([0, 1])), 0, draw(st.binary(max_size=13)))
    if choice == 5:
        payload = draw(st.binary(min_size=3, max_size=5))
        return frame(8, 0, draw(st.sampled_from([0, 1, 3])), payload)
    if choice == 6:  # a header announcing more than follows, or than allowed
        return FRAME_HEADER.pack(draw(st.integers(0, 2**24 - 1)) << 8, 0, 1) + draw(
            st.binary(max_size=20)
        )
    return draw(st.binary(max_size=30))


_streams = st.lists(_frames(), max_size=30).map(b"".join)  # type: ignore[call-arg]


@_SETTINGS
@given(
    data=_streams,
    cut=st.integers(0, 20),
    start=st.integers(-3, 40),
    max_frame=st.sampled_from([0, 8, 16, 100, 16384, 2**24]),
)
def fuzz_scan_acks(data: bytes, cut: int, start: int, max_frame: int) -> None:
    data = data[: max(len(data) - cut, 0)]  # the last frame short by a few bytes
    for buffer in (exact(data), data, bytearray(data)):
        pos, acks, payload, control, pongs, windows = C.scan_acks(buffer, start, 1, max_frame)
        assert max(start, 0) <= pos <= max(len(data), start, 0)
        assert all(type(a) is Ack for a in acks)
        taken = max(pos - max(start, 0), 0)
        # Whatever comes out is bounded by what was read.
        assert payload + len(control) + len(pongs) <= taken
        if windows is not None:
            assert len(windows[2]) <= taken and len(windows[2]) % 13 == 0


_bodies = st.builds(lambda a: api_pb2.PublishResponse(ack=a).SerializeToString(), _acks)


#: Bytes to change in an input: (index, modulo its length; new byte).
_flips = st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), max_size=4)


def _mangled(data: bytes, flips: list[tuple[int, int]], cut: int) -> bytes:
    """``data`` with its last ``cut`` bytes cut off and the ``flips`` applied."""
    changed = bytearray(data[: max(len(data) - cut, 0)])
    for index, byte in flips:
        if changed:
            changed[index % len(changed)] = byte
    return bytes(changed)


@_SETTINGS
@given(
    data=st.one_of(_bodies, _streams),
    flips=_flips,
    cut=st.integers(0, 8),
)
def fuzz_decode_ack(data: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    """Responses (or frame soup) with a few bytes changed and the end cut off, as one
    PublishResponse message."""
    data = _mangled(data, flips, cut)
    for buffer in (exact(data), data):
        ack = C.decode_ack(buffer)
        if ack is None:
            continue
        assert type(ack) is Ack
        parsed = api_pb2.PublishResponse.FromString(data)  # raises: C took what it rejects
        assert ack == publish_codec.ack_from_proto(parsed.ack, -1)


_publish_requests = st.builds(
    lambda key, value, stream, partition, cid: publish_codec.frame(
        api_pb2.PublishRequest(
            key=key, value=value, stream=stream, partition=partition, correlationId=cid
        ).SerializeToString()
    ),
    st.binary(max_size=200),
    st.binary(max_size=300),
    st.text(max_size=140),
    st.integers(0, 2**31 - 1),
    st.text(max_size=20),
)


@_SETTINGS
@given(
    framed=st.one_of(_publish_requests, st.binary(max_size=64)),
    flips=_flips,
    cut=st.integers(0, 8),
    answer=st.text(max_size=140),
)
def fuzz_answers_another_stream(
    framed: bytes, flips: list[tuple[int, int]], cut: int, answer: str
) -> None:
    """Framed requests (or soup) changed and cut short: the C check of an answer's
    stream reads within them and agrees with its Python twin."""
    data = _mangled(framed, flips, cut)
    own = publish_codec.framed_stream(data)
    names = [answer] if own is None else [answer, own.decode("utf-8", "ignore")]
    for name in names:
        expected = publish_codec.py_answers_another_stream(name, data)
        assert C.answers_another_stream(name, data) == expected, (name, data)


_good_frames = st.one_of(
    st.builds(
        lambda a: frame(0, 0, 1, message(api_pb2.PublishResponse(ack=a).SerializeToString())),
        _acks.filter(lambda a: a.ackError == 0),
    ),
    st.just(frame(6, 0, 0, b"pingpong")),
    st.just(frame(6, 1, 0, b"pingpong")),
    st.just(frame(4, 0, 0, b"")),
    st.just(frame(8, 0, 0, b"\0\0\1\0")),
    st.just(frame(8, 0, 1, b"\0\0\1\0")),
)


@_SETTINGS
@given(frames=st.lists(_good_frames, min_size=1, max_size=8), cut=st.integers(1, 12))
def fuzz_scan_acks_truncated(frames: list[bytes], cut: int) -> None:
    """Frames the fast path reads, the last one short by a few bytes: never read."""
    data = b"".join(frames)
    data = data[: max(len(data) - cut, 0)]
    pos, _, payload, control, pongs, _ = C.scan_acks(exact(data), 0, 1, 16384)
    assert pos <= len(data) - (len(frames[-1]) - cut)
    assert payload + len(control) + len(pongs) <= pos


@_SETTINGS
@given(count=st.integers(0, 3000), tail=st.binary(max_size=20))
def fuzz_scan_acks_ping_flood(count: int, tail: bytes) -> None:
    """Many PINGs at once: the answer buffer grows with them, and no more."""
    data = frame(6, 0, 0, b"12345678") * count + tail
    pos, _, _, control, pongs, _ = C.scan_acks(exact(data), 0, 1, 16384)
    assert pos >= 17 * count and len(control) <= len(tail)
    assert 17 * count <= len(pongs) <= 17 * count + len(tail)  # the tail's own, if any


def _reader() -> Any:
    import h2.config
    import h2.connection

    from liftbridge_sync._transport.h2.responses import ResponseReader

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
    reader.receive(server.data_to_send())
    return reader


@_SETTINGS
@given(data=_streams, cuts=st.lists(st.integers(1, 64), max_size=40))
def fuzz_reader_chunking(data: bytes, cuts: list[int]) -> None:
    """The publish reader fed any chunking: it ends or keeps at most one frame."""
    import h2.exceptions

    from liftbridge_sync._transport.h2.framing import MAX_FRAME_SIZE, FrameError

    reader = _reader()
    pos = 0
    for size in [*cuts, len(data)]:
        chunk = data[pos : pos + size]
        pos += size
        try:
            reader.receive(chunk)
        except (FrameError, h2.exceptions.ProtocolError):
            return  # the connection is closed on these
        assert len(reader._inbuf) <= MAX_FRAME_SIZE + 9 + len(chunk)
        if reader.ended or pos >= len(data):
            return


class _Lock:
    """A lock whose acquire/release run arbitrary code (re-entrancy into the caller's
    data while the C code holds references into it)."""

    def __init__(self, on_acquire: Callable[[], None], on_release: Callable[[], None]) -> None:
        self._on_acquire = on_acquire
        self._on_release = on_release

    def acquire(self) -> bool:
        self._on_acquire()
        return True

    def release(self) -> None:
        self._on_release()


class _MeddlingState(str):
    """A future state whose comparison changes the pending table and the ack list (the
    C code compares a state that is not its own interned string)."""

    meddle: Callable[[], None]

    def __eq__(self, other: object) -> bool:
        self.meddle()
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _meddling_future(meddle: Callable[[], None]) -> PublishFuture[Any]:
    future: PublishFuture[Any] = PublishFuture()
    state = _MeddlingState("RUNNING")
    state.meddle = meddle
    future._state = state
    return future


@_SETTINGS
@given(
    count=st.integers(0, 12),
    plan=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 11)), max_size=12),
    owner=st.booleans(),
    meddling=st.lists(st.booleans(), min_size=12, max_size=12),
    requests=st.lists(st.binary(max_size=24), min_size=12, max_size=12),
    streams=st.lists(st.sampled_from(["", "s", "other", "s\u00e9"]), min_size=12, max_size=12),
)
def fuzz_settle_acks(
    count: int,
    plan: list[tuple[int, int]],
    owner: bool,
    meddling: list[bool],
    requests: list[bytes],
    streams: list[str],
) -> None:
    # Each entry's framed request: one sent to stream "s", or bytes that may not parse
    # (what the answer's stream is compared with); each ack names one of a few streams.
    framed = [
        _PUBLISH_TO_S if i % 2 else b"\0\0\0\0" + bytes([len(r)]) + r
        for i, r in enumerate(requests)
    ]
    acks: list[Any] = [speedups_ack(f"c{i}", streams[i]) for i in range(count)]
    pending: dict[str, Any] = {}
    steps = iter(plan)

    def meddle() -> None:
        step = next(steps, None)
        if step is None:
            return
        action, index = step
        key = f"c{index}"
        if action == 0:
            acks.clear()
        elif action == 1:
            pending.pop(key, None)
        elif action == 2:
            pending.clear()
        elif action == 3:
            acks.append(api_pb2.PublishResponse())
        elif action == 4 and acks:
            del acks[index % len(acks)]
        elif action == 5:
            pending[key] = Entry(framed[index], key, 0, True, PublishFuture(), 0.0, 0.0)
        else:
            acks.insert(0, speedups_ack(key))

    for i in range(count):
        future: PublishFuture[Any] = _meddling_future(meddle) if meddling[i] else PublishFuture()
        if i % 3 == 1:
            future.add_done_callback(lambda f: meddle())
        if i % 5 == 4:
            future.set_result(None)
        pending[f"c{i}"] = Entry(framed[i], f"c{i}", i, True, future, 0.0, 0.0)
    before = len(acks)
    taken, ready = C.settle_acks(acks, pending, _Lock(meddle, meddle), owner)
    assert 0 <= taken <= max(before, len(acks)) + len(plan)
    assert len(ready) <= taken
    index, errors = C.run_callbacks(ready, 0)
    assert index <= len(ready) and len(errors) <= len(ready) * 2


#: A framed PublishRequest to stream "s", behind its key (field order: protobuf's).
_REQUEST_TO_S = api_pb2.PublishRequest(
    key=b"k", stream="s", value=b"v", correlationId="c"
).SerializeToString()
_PUBLISH_TO_S = b"\0" + len(_REQUEST_TO_S).to_bytes(4, "big") + _REQUEST_TO_S


def speedups_ack(correlation_id: str, stream: str = "") -> Ack:
    data = frame(
        0,
        0,
        1,
        message(
            api_pb2.PublishResponse(
                ack=api_pb2.Ack(correlationId=correlation_id, stream=stream)
            ).SerializeToString()
        ),
    )
    _, acks, _, _, _, _ = C.scan_acks(data, 0, 1, 16384)
    assert len(acks) == 1
    ack: Ack = acks[0]
    return ack


@_SETTINGS
@given(
    actions=st.lists(st.integers(0, 5), max_size=10),
    count=st.integers(0, 8),
)
def fuzz_run_callbacks(actions: list[int], count: int) -> None:
    futures: list[Any] = []
    todo = iter(actions)

    def callback(future: Any) -> None:
        action = next(todo, None)
        if action == 0:
            futures.clear()
        elif action == 1:
            extra: PublishFuture[Any] = PublishFuture()
            extra.add_done_callback(callback)
            extra.set_result(None)
            futures.append(extra)
        elif action == 2:
            raise ValueError("a callback that fails")
        elif action == 3 and futures:
            C.run_callbacks(futures, len(futures) - 1)  # re-entered
        elif action == 4:
            future.add_done_callback(callback)

    for i in range(count):
        future: PublishFuture[Any] = PublishFuture()
        future._done_callbacks = [callback, callback] if i % 2 else callback  # type: ignore[assignment]
        future._state = "FINISHED"  # type: ignore[assignment]
        futures.append(future)
    index, errors = C.run_callbacks(futures, 0)
    assert index <= len(futures) + len(actions)
    assert all(isinstance(e, ValueError) for _, e in errors)


_HEAD = head("stream", 2, AckPolicy.ALL)
_prefixes = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=300)


@_SETTINGS
@given(
    value=st.binary(max_size=3000),
    prefix=_prefixes,
    n=st.integers(-(2**63), 2**63 - 1),
    values=st.lists(st.one_of(st.binary(max_size=200), st.text(max_size=3)), max_size=10),
    max_size=st.integers(-1, 4000),
)
def fuzz_frame_builders(
    value: bytes, prefix: str, n: int, values: list[Any], max_size: int
) -> None:
    framed, cid = C.frame_id(_HEAD, value, prefix, n)
    assert cid == f"{prefix}{n}"
    assert framed == publish_codec.py_frame_value(_HEAD, value, cid.encode())
    assert C.frame_value(_HEAD, value, cid.encode()) == framed
    assert len(framed) <= len(_HEAD) + len(value) + len(cid) + 25
    expected = publish_codec.py_frame_values(_HEAD, values, prefix)
    assert C.frame_values(_HEAD, values, prefix) == expected
    entry = C.frame_entry(_HEAD, value, prefix, n, max_size, 0, True, None, None)
    assert entry is None if len(framed) > max_size else entry.framed == framed
    ids = [f"{prefix}{i}" for i in range(len(values))]
    entries, futures = C.make_entries(list(values), ids, 1, False, None, None)
    assert [e.correlation_id for e in entries] == ids and len(futures) == len(ids)
    spread = [len(i) for i in ids]
    entries, futures = C.make_entries(list(values), ids, spread, False, None, None)
    assert [e.partition for e in entries] == spread and len(futures) == len(ids)


_pair_items = st.lists(
    st.one_of(
        st.binary(max_size=200),
        st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.binary(max_size=200)),
        st.tuples(st.text(max_size=3), st.binary(max_size=5)),  # ends the run
        st.tuples(st.binary(max_size=5), st.text(max_size=3)),
        st.tuples(st.binary(max_size=5)),
        st.text(max_size=3),
    ),
    max_size=12,
)


@_SETTINGS
@given(items=_pair_items, prefix=_prefixes, partitions=st.integers(1, 7))
def fuzz_frame_pairs(items: list[Any], prefix: str, partitions: int) -> None:
    heads = [head("stream", p, AckPolicy.LEADER) for p in range(partitions)]
    expected = publish_codec.py_frame_pairs(heads, items, prefix)
    assert C.frame_pairs(heads, items, prefix) == expected


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=70000), max_size=6),
    reads=st.lists(st.integers(1, 100000), min_size=1, max_size=20),
)
def fuzz_socket_io(chunks: list[bytes], reads: list[int]) -> None:
    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        right.setblocking(False)
        sent = bytearray()
        received = bytearray()
        wanted = b"".join(chunks)
        step = 0
        deadline = time.monotonic() + 10
        while len(received) < len(wanted):
            assert time.monotonic() < deadline, "socket fuzz made no progress"
            if len(sent) < len(wanted):
                n = C.send_held(left.fileno(), exact(wanted[len(sent) : len(sent) + 65536]))
                assert 0 <= n <= 65536
                sent += wanted[len(sent) : len(sent) + n]
            size = reads[step % len(reads)]
            step += 1
            got = C.recv_held(right.fileno(), size)
            if got is not None:
                assert 0 < len(got) <= size  # bounded by the request, not by what waits
                received += got
        assert received == wanted
        left.close()
        assert C.recv_held(right.fileno(), 10) == b""


#: The lock operations of the C types (one implementation, _speedups_lock.c) and of
#: their twins (OwnLock), fuzzed alike in each type's target.
_LOCK_OPS = ("lock", "trylock", "unlock", "with")


def _lock_op(owner: Any, op: str, held: bool, results: list[Any]) -> None:
    """Run lock operation ``op`` on ``owner`` (``held``: the fuzz loop holds its lock)."""
    if op == "lock":
        results.append(None if held else owner.acquire())
    elif op == "trylock":
        results.append(owner.acquire(blocking=False) and owner.release())
    elif op == "unlock":
        results.append(owner.release() if held else None)
    elif not held:  # "with"
        with owner:
            results.append(owner.locked())


def _held_after(op: Any, held: bool) -> bool:
    """Whether the fuzz loop holds the lock after ``op``."""
    if op == "lock":
        return True
    if op == "unlock":
        return False
    return held


_CORE_OPS = st.lists(
    st.one_of(
        st.sampled_from(["seq", "id", "lock", "trylock", "unlock", "with"]),
        st.tuples(st.just("sleep"), st.floats(allow_nan=False)),
        st.tuples(st.just("flags"), st.booleans(), st.booleans()),
        st.tuples(st.just("live"), st.sampled_from([None, "stream", 7])),
        st.tuples(st.just("in_line"), st.integers(0, 2**62)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(ops=_CORE_OPS, limit=st.integers(1, 2**31), prefix=_prefixes)
def fuzz_pending_core(ops: list[Any], limit: int, prefix: str) -> None:
    """The C PendingCore and its Python twin: the same results for any sequence of calls."""
    cores = [
        C.PendingCore(limit, limit, prefix, time.monotonic),
        PyPendingCore(limit, limit, prefix, time.monotonic),
    ]
    held = False
    for op in ops:
        results = []
        for core in cores:
            if op == "seq":
                results.append(core.next_seq())
            elif op == "id":
                results.append(core.next_id())
            elif op in _LOCK_OPS:
                _lock_op(core, op, held, results)
            elif op[0] == "sleep":
                core.sleep_until = op[1]
            elif op[0] == "flags":
                core.closing, core.finished = op[1], op[2]
            elif op[0] == "in_line":
                core.in_line = op[1]
            else:
                core.live = op[1]
        held = _held_after(op, held)
        assert results[:1] * 2 == results or not results, (op, results)
        states = [
            (
                c.seq,
                c.sleep_until,
                c.in_line,
                c.closing,
                c.finished,
                c.live,
                c.locked(),
                c.pending,
                c.id_prefix,
            )
            for c in cores
        ]
        assert states[0] == states[1], (op, states)
    if held:
        for core in cores:
            core.release()


_QUEUE_OPS = st.lists(
    st.one_of(
        st.sampled_from(["take", "lock", "trylock", "unlock", "with", "locked"]),
        st.tuples(st.just("append"), st.binary(max_size=40)),
        st.tuples(st.just("asked"), st.integers(0, 2**40)),
        st.tuples(st.just("queued"), st.integers(0, 2**62)),
        st.tuples(st.just("flags"), st.booleans(), st.booleans(), st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(ops=_QUEUE_OPS, write_here_at=st.integers(0, 2**40))
def fuzz_outbound_queue(ops: list[Any], write_here_at: int) -> None:
    """The C OutboundQueue and its Python twin: the same results for any sequence of
    calls."""
    queues = [C.OutboundQueue(write_here_at), PyOutboundQueue(write_here_at)]
    held = False
    for op in ops:
        results: list[Any] = []
        for queue in queues:
            if op == "take":
                results.append(queue.take())
            elif op in _LOCK_OPS:
                _lock_op(queue, op, held, results)
            elif op == "locked":
                results.append(queue.locked())
            elif op[0] == "append":
                queue.frames.append(op[1])
                queue.queued_bytes += len(op[1])
            elif op[0] == "asked":
                queue.asked += op[1]
            elif op[0] == "queued":
                queue.queued_bytes = op[1]
            else:
                queue.signalled, queue.done, queue.close_requested = op[1:]
        held = _held_after(op, held)
        assert results[:1] * 2 == results or not results, (op, results)
        states = [
            (
                q.frames,
                q.queued_bytes,
                q.taken_bytes,
                q.asked,
                q.signalled,
                q.done,
                q.close_requested,
                q.write_here_at,
                q.locked(),
            )
            for q in queues
        ]
        assert states[0] == states[1], (op, states)
    if held:
        for queue in queues:
            queue.release()


_ENTRY_FIELDS: tuple[str, ...] = PyEntryCore.__slots__  # every field, in order
_DELETE = object()  # a write that deletes the field
_anything = st.one_of(
    st.none(), st.integers(), st.floats(), st.binary(max_size=8), st.text(max_size=4)
)


@_SETTINGS
@given(
    args=st.lists(_anything, max_size=12),
    kwargs=st.dictionaries(st.sampled_from([*_ENTRY_FIELDS, "colour"]), _anything, max_size=4),
    writes=st.lists(st.tuples(st.sampled_from(_ENTRY_FIELDS), _anything), max_size=6),
)
def fuzz_entry_core(args: list[Any], kwargs: dict[str, Any], writes: list[tuple[str, Any]]) -> None:
    """The C EntryCore and its Python twin accept and refuse the same arguments, and keep
    the same fields; a C FutureCore keeps what is written to it."""
    built: list[Any] = []
    for kind in (C.EntryCore, PyEntryCore):
        try:
            built.append(kind(*args, **kwargs))
        except TypeError:
            built.append(TypeError)
    if built[0] is TypeError or built[1] is TypeError:
        assert built[0] is built[1], (args, kwargs, built)
        return
    for name, value in writes:
        for entry in built:
            setattr(entry, name, value)
    c_fields, py_fields = ([getattr(e, n) for n in _ENTRY_FIELDS] for e in built)
    assert repr(c_fields) == repr(py_fields)
    future: Any = C.FutureCore()
    for name, value in writes:
        future._result, future.ledger, future._gate = value, name, (name, value)
        assert (future._result, future.ledger, future._gate) == (value, name, (name, value))
        future._waited = bool(value)
        assert future._waited is bool(value)


@_SETTINGS
@given(
    args=st.lists(_anything, max_size=3),
    kwargs=st.dictionaries(st.sampled_from([*ACK_FIELD_NAMES, "colour"]), _anything, max_size=3),
    writes=st.lists(
        st.tuples(st.sampled_from(ACK_FIELD_NAMES), st.one_of(_anything, st.just(_DELETE))),
        max_size=12,
    ),
)
def fuzz_ack_core(args: list[Any], kwargs: dict[str, Any], writes: list[tuple[str, Any]]) -> None:
    """The C AckCore and its Python twin refuse the same arguments and keep the same
    fields through writes and deletions; an Ack made of anything decodes to the same
    values and is freed (its fields are the C struct's)."""
    built: list[Any] = []
    for kind in (C.AckCore, PyAckCore):
        try:
            built.append(kind(*args, **kwargs))
        except TypeError:
            built.append(TypeError)
    assert (built[0] is TypeError) == (built[1] is TypeError), (args, kwargs, built)
    if built[0] is TypeError:
        return
    for name, value in writes:
        for fields in built:
            if value is _DELETE:
                try:
                    object.__delattr__(fields, name)
                except AttributeError:
                    pass
            else:
                object.__setattr__(fields, name, value)
    c_fields, py_fields = ([getattr(f, n, _DELETE) for n in ACK_FIELD_NAMES] for f in built)
    assert repr(c_fields) == repr(py_fields)
    values: dict[str, Any] = dict(zip(ACK_FIELD_NAMES, (v for _, v in writes), strict=False))
    given: dict[str, Any] = {name: values.get(name) for name in ACK_FIELD_NAMES}
    ack = Ack(**given)
    assert isinstance(ack, C.AckCore)
    assert [getattr(ack, n) for n in ACK_FIELD_NAMES] == [values.get(n) for n in ACK_FIELD_NAMES]


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    ops=st.lists(
        st.one_of(
            st.just("open"),
            st.tuples(st.just("wait"), st.one_of(st.none(), st.floats(-1.0, 0.0))),
        ),
        max_size=40,
    )
)
def fuzz_gate(ops: list[Any]) -> None:
    """The C Gate and its Python twin: the same results (or the same error) for any
    sequence of opens and waits that cannot block; gates dropped open or closed."""
    gates = [C.Gate(), PyGate()]
    is_open = False
    for op in ops:
        if op == "open":
            outcomes: list[Any] = []
            for gate in gates:
                try:
                    gate.open()
                    outcomes.append("opened")
                except RuntimeError:
                    outcomes.append("refused")
            assert outcomes == ["refused"] * 2 if is_open else ["opened"] * 2, outcomes
            is_open = True
            continue
        timeout = op[1]
        if timeout is None and not is_open:
            continue  # would block for ever
        results: list[Any] = []
        for gate in gates:
            try:
                results.append(gate.wait(timeout))
            except ValueError:
                results.append("refused")
        assert results[0] == results[1], (op, results)
        if results[0] is True:
            is_open = False


TARGETS: list[Callable[[], None]] = [
    fuzz_scan_acks,
    fuzz_scan_acks_truncated,
    fuzz_scan_acks_ping_flood,
    fuzz_decode_ack,
    fuzz_reader_chunking,
    fuzz_settle_acks,
    fuzz_answers_another_stream,
    fuzz_run_callbacks,
    fuzz_frame_builders,
    fuzz_frame_pairs,
    fuzz_socket_io,
    fuzz_pending_core,
    fuzz_outbound_queue,
    fuzz_entry_core,
    fuzz_ack_core,
    fuzz_gate,
]


def main() -> int:
    """Runs every target for its share of the time budget; 0 when nothing failed."""
    budget = float(os.environ.get("LIFTBRIDGE_SYNC_FUZZ_SECONDS", "60"))
    share = budget / len(TARGETS)
    for target in TARGETS:
        start = time.monotonic()
        rounds = 0
        while True:
            target()
            rounds += 1
            if time.monotonic() - start >= share:
                break
        took = time.monotonic() - start
        print(f"fuzz: {target.__name__}: {rounds} rounds in {took:.1f} s", flush=True)
    print(f"fuzz: every target ({len(TARGETS)}) ran clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
