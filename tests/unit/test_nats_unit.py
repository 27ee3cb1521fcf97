"""Unit tests of ``liftbridge_sync.nats`` that need no NATS server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import nats.aio.client
import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.envelope import MessageType, encode_envelope
from liftbridge_sync.errors import (
    AckTimeoutError,
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
    PublishQueueFullError,
    WrongThreadError,
)
from liftbridge_sync.models import AckPolicy
from liftbridge_sync.nats import NatsPublisher, _support, partition_subject
from liftbridge_sync.nats import _thread as thread_module
from tests.stacks import thread_in
from tests.waiting import wait_until


def _nats_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-nats"]


def _closed_port_url() -> str:
    """A URL on loopback where nothing listens (the port was just released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


@pytest.fixture
def publisher() -> Iterator[NatsPublisher]:
    """A publisher that is never connected (its URL is not used by these tests)."""
    pub = NatsPublisher(_closed_port_url(), connect_timeout=0.5)
    yield pub
    pub.close()


# ---------------------------------------------------------------- subjects


@pytest.mark.parametrize(
    ("subject", "partition", "expected"),
    [
        ("foo", 0, "foo"),
        ("foo", 1, "foo.1"),
        ("foo.bar", 12, "foo.bar.12"),
        ("a", 2**31 - 1, f"a.{2**31 - 1}"),
    ],
)
def test_partition_subject(subject: str, partition: int, expected: str) -> None:
    assert partition_subject(subject, partition) == expected


def test_partition_subject_defaults_to_partition_zero() -> None:
    assert partition_subject("orders") == "orders"


@pytest.mark.parametrize("subject", ["", "a..b", ".a", "a.", "has space", "tab\t", 3, None])
def test_partition_subject_rejects_bad_subjects(subject: object) -> None:
    with pytest.raises(ConfigurationError):
        partition_subject(subject, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("partition", [-1, 2**31, True, 1.0, "1", None])
def test_partition_subject_rejects_bad_partitions(partition: object) -> None:
    with pytest.raises(ConfigurationError):
        partition_subject("foo", partition)  # type: ignore[arg-type]


# ---------------------------------------------------------------- construction


def test_no_thread_after_construction() -> None:
    before = len(_nats_threads())
    pub = NatsPublisher("nats://127.0.0.1:4222")
    try:
        assert len(_nats_threads()) == before
        assert "idle" in repr(pub)
        assert not pub.closed
    finally:
        pub.close()
    assert pub.closed
    assert len(_nats_threads()) == before


def test_close_without_use_is_idempotent_and_later_use_fails() -> None:
    pub = NatsPublisher("nats://127.0.0.1:4222")
    with pub:
        pass
    pub.close()
    assert "closed" in repr(pub)
    with pytest.raises(ClientClosedError):
        pub.publish_async("foo", b"x")
    with pytest.raises(ClientClosedError):
        pub.publish_raw("foo", b"x")
    with pytest.raises(ClientClosedError):
        pub.flush(1)
    assert not _nats_threads()


def test_flush_before_any_publish_returns_without_starting() -> None:
    with NatsPublisher("nats://127.0.0.1:4222") as pub:
        pub.flush(1)
        assert not _nats_threads()


def test_accepts_sequence_of_servers() -> None:
    with NatsPublisher(["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]) as pub:
        assert "4223" in repr(pub)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ack_timeout": 0},
        {"ack_timeout": -1.0},
        {"ack_timeout": float("nan")},
        {"ack_timeout": True},
        {"connect_timeout": 0},
        {"connect_timeout": "2"},
        {"max_in_flight": 0},
        {"max_in_flight": 1.5},
        {"max_in_flight": True},
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        NatsPublisher("nats://127.0.0.1:4222", **kwargs)  # type: ignore[arg-type]


def test_inbox_prefix_with_a_wildcard_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="wildcards"):
        NatsPublisher("nats://127.0.0.1:4222", inbox_prefix="_INBOX.*")


@pytest.mark.parametrize("prefix", [5, None, ["_INBOX"]])
def test_an_inbox_prefix_that_is_no_str_is_refused_at_construction(prefix: object) -> None:
    # It passed, and the first publish failed after connect_timeout as an unreachable
    # NATS (nats-py refusing the option).
    with pytest.raises(ArgumentTypeError, match="'inbox_prefix' must be a str"):
        NatsPublisher("nats://127.0.0.1:4222", inbox_prefix=prefix)


@pytest.mark.parametrize("servers", ["", [], [""], [3]])
def test_bad_servers(servers: object) -> None:
    with pytest.raises(ConfigurationError):
        NatsPublisher(servers)  # type: ignore[arg-type]


def test_ack_inbox_shape_and_uniqueness() -> None:
    first = NatsPublisher("nats://127.0.0.1:4222")
    second = NatsPublisher("nats://127.0.0.1:4222")
    custom = NatsPublisher("nats://127.0.0.1:4222", inbox_prefix="_MY.INBOX")
    try:
        assert first.ack_inbox.startswith("_INBOX.")
        assert first.ack_inbox.endswith(".acks")
        assert first.ack_inbox != second.ack_inbox
        assert custom.ack_inbox.startswith("_MY.INBOX.")
    finally:
        for pub in (first, second, custom):
            pub.close()


def test_correlation_ids_are_unique_across_threads(publisher: NatsPublisher) -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        local = [publisher.next_correlation_id() for _ in range(500)]
        with lock:
            ids.extend(local)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 2000


# ---------------------------------------------------------------- argument validation


def test_str_value_is_a_type_error(publisher: NatsPublisher) -> None:
    with pytest.raises(TypeError, match="encode"):
        publisher.publish_async("foo", "text")  # type: ignore[arg-type]
    assert not _nats_threads()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"key": "text"},
        {"key": 3},
        {"headers": {"h": "text"}},
        {"headers": [("h", b"x")]},
        {"ack_policy": 0},
        {"ack_policy": "LEADER"},
    ],
)
def test_wrong_types_are_type_errors(publisher: NatsPublisher, kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        publisher.publish_async("foo", b"x", **kwargs)  # type: ignore[arg-type]
    assert not _nats_threads()


def test_expected_offset_with_ack_policy_none_is_refused(publisher: NatsPublisher) -> None:
    with pytest.raises(ConfigurationError, match="expected_offset"):
        publisher.publish_async("foo", b"x", ack_policy=AckPolicy.NONE, expected_offset=3)
    with pytest.raises(ConfigurationError, match="expected_offset"):
        publisher.publish("foo", b"x", ack_policy=AckPolicy.NONE, expected_offset=0)
    assert not _nats_threads()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partition": -1},
        {"partition": True},
        {"expected_offset": -2},
        {"expected_offset": -1},
        {"expected_offset": -1.0},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": float("inf")},
        {"timeout": "1"},
        {"correlation_id": ""},
        {"correlation_id": 5},
        {"crc": 1},
    ],
)
def test_bad_values_are_configuration_errors(
    publisher: NatsPublisher, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ConfigurationError):
        publisher.publish_async("foo", b"x", **kwargs)  # type: ignore[arg-type]
    assert not _nats_threads()


@pytest.mark.parametrize("kwargs", [{"correlation_id": 5}, {"crc": 1}, {"crc": None}])
def test_values_of_the_wrong_type_are_argument_type_errors(
    publisher: NatsPublisher, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ArgumentTypeError, match=f"'{next(iter(kwargs))}'"):
        publisher.publish_async("foo", b"x", **kwargs)  # type: ignore[arg-type]
    assert not _nats_threads()


@pytest.mark.parametrize("subject", ["", "a b", "a..b", "orders.*", ">", "a.>"])
def test_bad_stream_subject(publisher: NatsPublisher, subject: str) -> None:
    with pytest.raises(ConfigurationError):
        publisher.publish_async(subject, b"x")


def test_publish_raw_validation(publisher: NatsPublisher) -> None:
    with pytest.raises(TypeError):
        publisher.publish_raw("foo", "text")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        publisher.publish_raw("", b"x")
    with pytest.raises(ConfigurationError):
        publisher.publish_raw("foo", b"x", reply="bad reply")
    # NATS refuses a publish to a wildcard subject.
    with pytest.raises(ConfigurationError, match="wildcards"):
        publisher.publish_raw("foo.*", b"x")
    with pytest.raises(ConfigurationError, match="wildcards"):
        publisher.publish_raw("foo", b"x", reply="replies.>")
    assert not _nats_threads()


def test_flush_and_close_validate_timeouts(publisher: NatsPublisher) -> None:
    with pytest.raises(ConfigurationError):
        publisher.flush(-1)
    with pytest.raises(ConfigurationError):
        publisher.close(0)


# ---------------------------------------------------------------- connection failure


def test_connect_failure_raises_and_joins_thread() -> None:
    pub = NatsPublisher(_closed_port_url(), connect_timeout=0.5)
    try:
        started = time.monotonic()
        # The reason was empty: "cannot connect to NATS at nats://...: ".
        with pytest.raises(
            BrokerUnavailableError,
            match=r"^cannot connect to NATS at nats://127\.0\.0\.1:\d+: no connection within "
            r"0\.5s$",
        ):
            pub.publish_async("foo", b"x")
        assert time.monotonic() - started < 5.0
        assert not _nats_threads()
        # A later call tries again (and fails again) instead of hanging.
        with pytest.raises(BrokerUnavailableError):
            pub.publish_raw("foo", b"x")
        assert not _nats_threads()
    finally:
        pub.close()


def test_resolving_a_host_name_starts_only_named_threads_joined_on_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    url = _closed_port_url().replace("127.0.0.1", "localhost")  # resolved by getaddrinfo
    pub = NatsPublisher(url, connect_timeout=1.0)
    with pytest.raises(BrokerUnavailableError):
        pub.publish_async("foo", b"x")
    pub.close()
    assert "liftbridge-nats-dns" in started
    assert [name for name in started if not name.startswith("liftbridge-")] == []
    assert not [t for t in threading.enumerate() if t.name.startswith("liftbridge-nats")]


def test_an_unreachable_nats_is_one_warning_line_not_nats_pys_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """nats-py's default ``error_cb`` logged the refused connection at ERROR with its
    traceback, printed on stderr where logging is not set up, beside the typed error."""
    pub = NatsPublisher(_closed_port_url(), connect_timeout=1.0)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(BrokerUnavailableError):
            pub.publish_async("foo", b"x")
        pub.close()
    assert not [r for r in caplog.records if r.name.startswith("nats")], caplog.text
    (warning,) = [r for r in caplog.records if r.name == "liftbridge_sync.nats"]
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert warning.getMessage().startswith("NATS connection: "), warning.getMessage()


# ---------------------------------------------------------------- optional dependency


def test_missing_nats_py_gives_install_hint() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["nats"] = None  # makes `import nats` raise ImportError
        import liftbridge_sync  # must not need nats-py
        from liftbridge_sync.nats import NatsPublisher, partition_subject
        assert partition_subject("foo", 2) == "foo.2"
        try:
            NatsPublisher("nats://127.0.0.1:4222")
        except ImportError as exc:
            print("IMPORT-ERROR:", exc)
        else:
            raise SystemExit("no ImportError")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "IMPORT-ERROR:" in result.stdout
    assert "pip install liftbridge-sync[nats]" in result.stdout


def test_import_liftbridge_sync_does_not_import_nats() -> None:
    code = "import sys, liftbridge_sync; print('nats' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


#: Pasted at the head of the interrupt tests' scripts: the names of the functions the
#: main thread is in, to send a signal once it sleeps where the test means it to.
_MAIN_THREAD_CALLS = textwrap.dedent(
    """
    import gc, sys, threading

    def main_thread_calls():
        gc.disable()  # CPython 3.11 can deadlock collecting in there (tests/stacks.py)
        try:
            frame = sys._current_frames().get(threading.main_thread().ident)
        finally:
            gc.enable()
        names = set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        return names
    """
)


@pytest.mark.parametrize("when", ["connecting", "waiting", "another-thread"])
def test_an_interrupt_during_the_first_connection_stays_an_interrupt(when: str) -> None:
    # Ctrl-C while a publish waited for the first NATS connection came out as a
    # BrokerUnavailableError: code retrying on that error swallowed the interrupt. One
    # landing while the connection was being handed to the loop ("connecting": the
    # loop takes it at once) left the liftbridge-nats thread running, unjoined.
    # One the kernel gave another thread ("another-thread"), or the main thread just
    # before it went to sleep (1 run in 15 under load), did not wake the wait: the
    # KeyboardInterrupt came only once it timed out (connect_timeout + 10 s).
    code = (
        f"WHEN = {when!r}\n"
        + _MAIN_THREAD_CALLS
        + textwrap.dedent(
            """
        import asyncio, gc, os, signal, sys, threading
        import nats.aio.client
        from liftbridge_sync.errors import BrokerUnavailableError
        from liftbridge_sync.nats import NatsPublisher

        connecting = threading.Event()

        class Nats:  # a NATS server that never answers CONNECT
            async def connect(self, **kwargs):
                connecting.set()
                await asyncio.Event().wait()

            async def close(self):
                pass

        def waiting_for_the_connection():  # asleep on the connection's future
            names = main_thread_calls()
            # Future.result(), or the package's sliced wait (wait_future) in its sleep.
            return "result" in names or ("wait_sliced" in names and "wait" in names)

        def interrupt():  # once the caller waits for the connection (polled)
            connecting.wait(30)
            tick = threading.Event()
            while WHEN != "connecting" and not waiting_for_the_connection():
                tick.wait(0.01)
            if WHEN == "another-thread":  # handled here: the main thread sleeps on
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)

        nats.aio.client.Client = Nats
        pub = NatsPublisher("nats://127.0.0.1:4222", connect_timeout=60.0)
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            pub.publish_async("s", b"v")
        except KeyboardInterrupt:
            print("INTERRUPTED")
        except BrokerUnavailableError as exc:
            print("BROKER-UNAVAILABLE:", exc)
        left = [t.name for t in threading.enumerate() if t.name.startswith("liftbridge-nats")]
        print("THREADS:", left)
        """
        )
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "INTERRUPTED" in result.stdout, result.stdout
    assert "THREADS: []" in result.stdout, result.stdout


def test_a_process_out_of_file_descriptors_gets_a_local_resource_error() -> None:
    # The first publish of a process with no descriptor left raised a bare OSError
    # (EMFILE, from creating the event loop), or blamed NATS (BrokerUnavailableError)
    # when the connection's socket could not be made.
    code = textwrap.dedent(
        """
        import os, resource, threading
        from liftbridge_sync.errors import LocalResourceError
        from liftbridge_sync.nats import NatsPublisher

        pub = NatsPublisher("nats://127.0.0.1:4222", connect_timeout=5.0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            pub.publish_async("s", b"v")
        except LocalResourceError as exc:
            print("LOCAL:", exc)
        except BaseException as exc:
            print("OTHER:", type(exc).__name__, exc)
        for fd in held:
            os.close(fd)
        left = [t.name for t in threading.enumerate() if t.name.startswith("liftbridge-nats")]
        print("THREADS:", left)
        pub.close()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "LOCAL:" in result.stdout and "ulimit -n" in result.stdout, result.stdout
    assert "THREADS: []" in result.stdout, result.stdout


# ---------------------------------------------------------------- a NATS that stops reading


class _StuckNats:
    """Fault fake of a client that does not tell its buffered size, whose publishes wait
    for a flush that never completes (the server never reads)."""

    is_connected = True
    max_payload = 1024 * 1024

    async def connect(self, **kwargs: object) -> None:
        pass

    async def subscribe(self, subject: str, cb: object) -> None:
        pass

    async def flush(self, timeout: float | None = None) -> None:
        pass

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


class _FullNats(_StuckNats):
    """Fault fake of a nats-py client whose buffer is over ``pending_size``."""

    pending_data_size = 4 * 1024 * 1024


@pytest.fixture(params=[_FullNats, _StuckNats])
def stuck_publisher(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[NatsPublisher]:
    monkeypatch.setattr(nats.aio.client, "Client", request.param)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=0.2)
    yield pub
    pub.close()


def test_ack_timeout_fires_while_nats_publish_waits(stuck_publisher: NatsPublisher) -> None:
    started = time.monotonic()
    first = stuck_publisher.publish_async("s", b"v", timeout=0.2)
    queued = stuck_publisher.publish_async("s", b"w", timeout=0.2)
    with pytest.raises(AckTimeoutError):
        first.result(timeout=3)
    with pytest.raises(AckTimeoutError):
        queued.result(timeout=3)
    assert time.monotonic() - started < 1.5
    started = time.monotonic()
    stuck_publisher.close()
    assert time.monotonic() - started < 2.0
    assert not _nats_threads()


def test_a_queued_publish_fails_at_its_own_timeout_while_nats_publish_waits(
    stuck_publisher: NatsPublisher,
) -> None:
    # Only written publishes had an ack timer: one queued behind a write NATS held up
    # failed when the writer reached it, at the earlier publish's timeout (here 30 s).
    stuck_publisher.publish_async("s", b"v", timeout=30.0)
    started = time.monotonic()
    queued = stuck_publisher.publish_async("s", b"w", timeout=0.2)
    raw = stuck_publisher.publish_async("s", b"x", timeout=0.4, ack_policy=AckPolicy.NONE)
    with pytest.raises(AckTimeoutError):
        queued.result(timeout=3)
    with pytest.raises(AckTimeoutError):
        raw.result(timeout=3)
    assert time.monotonic() - started < 1.5
    stuck_publisher.close(0.2)  # not the 5 s the held write may take by default


def test_publishes_cancelled_while_nats_publish_waits_do_not_pile_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cancelled (or expired) publish freed its slot but stayed queued, payload and
    # all, until the held write ended: publish, wait a while, cancel, again, grew the
    # queue past max_in_flight for as long as NATS did not read.
    monkeypatch.setattr(nats.aio.client, "Client", _FullNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=30.0, max_in_flight=2)
    try:
        pub.publish_async("s", b"v")  # its write waits for NATS
        wait_until(
            lambda: not pub._handoff._ledger.queued(), timeout=5, what="the writer holding it"
        )
        for _ in range(50):
            pub.publish_async("s", b"w" * 1000).cancel()
        wait_until(
            lambda: len(pub._handoff._ledger.queued()) <= 1, timeout=5, what="the queue pruned"
        )
    finally:
        pub.close(0.2)


def test_blocking_publishes_are_bounded_while_nats_publish_waits(
    stuck_publisher: NatsPublisher,
) -> None:
    started = time.monotonic()
    with pytest.raises(AckTimeoutError):
        stuck_publisher.publish("s", b"v")
    with pytest.raises(AckTimeoutError):
        stuck_publisher.publish_raw("s", b"raw")
    assert time.monotonic() - started < 3.0


def test_publishes_are_capped_while_nats_does_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every publish was queued however long NATS did not read: the queue (and nats-py's
    # buffer behind it) grew with each publish until memory ran out.
    monkeypatch.setattr(nats.aio.client, "Client", _FullNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=0.5, max_in_flight=2)
    try:
        held = [pub.publish_async("s", b"v", timeout=3.0) for _ in range(2)]
        started = time.monotonic()
        with pytest.raises(PublishQueueFullError):
            pub.publish_async("s", b"w", timeout=0.2)
        with pytest.raises(PublishQueueFullError):
            pub.publish_raw("s", b"w")  # its wait is bounded by ack_timeout...
        assert time.monotonic() - started < 2.0
        for future in held:
            with pytest.raises(AckTimeoutError):
                future.result(timeout=5)
        # ...and a slot freed lets the next publish in.
        later = pub.publish_async("s", b"x", timeout=0.2)
        with pytest.raises(AckTimeoutError):
            later.result(timeout=5)
    finally:
        pub.close(0.5)


def test_a_publish_waiting_for_a_slot_ends_when_another_thread_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nats.aio.client, "Client", _FullNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=30.0, max_in_flight=1)
    outcome: list[BaseException] = []

    def waiter() -> None:
        try:
            pub.publish_async("s", b"w")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    try:
        pub.publish_async("s", b"v")
        thread = threading.Thread(target=waiter, name="waiter", daemon=True)
        thread.start()
        wait_until(lambda: thread_in(thread, "take_slot"), what="the publish waiting")
    finally:
        started = time.monotonic()
        pub.close(0.5)
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 3.0
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError)


def test_a_done_callback_is_refused_a_slot_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # It runs on the thread that frees slots: waiting there could never end.
    monkeypatch.setattr(nats.aio.client, "Client", _ScriptedNats)
    scripted = NatsPublisher("nats://127.0.0.1:4222", max_in_flight=2)
    fake = _hold_the_writer(scripted)
    errors: list[BaseException] = []
    first = scripted.publish_async("s", b"v", ack_policy=AckPolicy.NONE)

    def publish_more(_: object) -> None:
        try:
            for _ in range(3):
                scripted.publish_async("s", b"w", ack_policy=AckPolicy.NONE)
        except PublishQueueFullError as exc:
            errors.append(exc)

    first.add_done_callback(publish_more)
    fake.release_gate()
    try:
        first.result(timeout=5)
        scripted.flush(5)
    finally:
        scripted.close()
    assert len(errors) == 1


# ---------------------------------------------------------------- acks and the write order


class _ScriptedNats:
    """Fault fake of a nats-py client: publishes to ``gate`` wait until released, and
    the test delivers (late, duplicate) acks itself."""

    last: _ScriptedNats | None = None
    is_connected = True
    pending_data_size = 0
    max_payload = 1024 * 1024

    def __init__(self) -> None:
        self.published: list[str] = []
        self._written = threading.Condition()
        self.gate_entered = threading.Event()
        self._cb: Callable[[Any], Coroutine[Any, Any, None]] | None = None
        self._ack_inbox = ""
        _ScriptedNats.last = self

    async def connect(self, **kwargs: object) -> None:
        self.loop = asyncio.get_running_loop()
        self._gate = asyncio.Event()

    async def subscribe(self, subject: str, cb: Callable[[Any], Coroutine[Any, Any, None]]) -> None:
        self._ack_inbox = subject
        self._cb = cb

    async def flush(self, timeout: float | None = None) -> None:
        pass

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        if subject == "gate":
            self.gate_entered.set()
            await self._gate.wait()
        with self._written:
            self.published.append(subject)
            self._written.notify_all()

    async def close(self) -> None:
        pass

    def release_gate(self) -> None:
        self.loop.call_soon_threadsafe(self._gate.set)

    def wait_published(self, count: int) -> list[str]:
        with self._written:
            assert self._written.wait_for(lambda: len(self.published) >= count, timeout=5)
            return list(self.published)

    def ack(self, correlation_id: str) -> None:
        """Deliver an ack for ``correlation_id`` and wait until the publisher handled it."""
        wire = api_pb2.Ack(stream="s", partitionSubject="s", correlationId=correlation_id)
        data = encode_envelope(wire.SerializeToString(), MessageType.ACK, crc=False)
        msg = types.SimpleNamespace(subject=self._ack_inbox, data=data)
        assert self._cb is not None
        asyncio.run_coroutine_threadsafe(self._cb(msg), self.loop).result(timeout=5)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[NatsPublisher]:
    monkeypatch.setattr(nats.aio.client, "Client", _ScriptedNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=5.0)
    yield pub
    pub.close()


def _hold_the_writer(pub: NatsPublisher) -> _ScriptedNats:
    pub.publish_async("gate", b"g", ack_policy=AckPolicy.NONE)
    fake = _ScriptedNats.last
    assert fake is not None
    assert fake.gate_entered.wait(5)
    return fake


def test_an_ack_arriving_before_the_write_resolves_nothing(scripted: NatsPublisher) -> None:
    fake = _hold_the_writer(scripted)
    queued = scripted.publish_async("s", b"v", correlation_id="x", timeout=0.5)
    fake.ack("x")  # a late duplicate of an earlier publish's ack
    assert not queued.done()
    fake.release_gate()
    assert fake.wait_published(2) == ["gate", "s"]
    fake.ack("x")
    ack = queued.result(timeout=5)
    assert ack is not None and ack.correlation_id == "x"
    # A later publish reusing the id is not failed by an earlier entry's timer (0.5 s).
    later = scripted.publish_async("s", b"w", correlation_id="x", timeout=5)
    fake.wait_published(3)
    done, _ = concurrent.futures.wait([later], timeout=1.0)
    assert not done
    fake.ack("x")
    assert later.result(timeout=5) is not None


def test_a_publish_given_up_before_its_write_is_not_written(scripted: NatsPublisher) -> None:
    fake = _hold_the_writer(scripted)
    with pytest.raises(AckTimeoutError):
        scripted.publish("s", b"v", timeout=0.2)
    fake.release_gate()
    scripted.flush(5)
    assert fake.published == ["gate"]


def test_a_publish_whose_thread_close_overtook_returns_a_failed_future(
    scripted: NatsPublisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A close() on another thread could end the loop between the publish queueing its
    # job and waking the writer: RuntimeError('Event loop is closed') escaped the call.
    scripted.flush(5)  # connected, the writer idle: the next job wakes it
    ledger = scripted._handoff._ledger
    queue = ledger.take_slot

    def queue_then_lose_the_cpu(job: Any, *, on_loop: bool) -> bool:
        wake = queue(job, on_loop=on_loop)
        closer = threading.Thread(target=scripted.close, name="closer", daemon=True)
        closer.start()
        closer.join(10)
        assert not closer.is_alive() and not _nats_threads()
        return wake

    monkeypatch.setattr(ledger, "take_slot", queue_then_lose_the_cpu)
    future = scripted.publish_async("s", b"v")
    with pytest.raises(ClientClosedError):
        future.result(timeout=0)


def test_close_does_not_wait_without_end_for_a_done_callback_that_blocks(
    scripted: NatsPublisher, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # close() joined the liftbridge-nats thread without a bound: a done-callback that
    # blocked it (here until released) held close() for as long.
    monkeypatch.setattr(thread_module, "CLOSE_MARGIN", 0.5)
    release = threading.Event()
    blocked = threading.Event()

    def block(_: object) -> None:
        blocked.set()
        release.wait(30)

    future = scripted.publish_async("s", b"v", correlation_id="x")
    future.add_done_callback(block)
    fake = _ScriptedNats.last
    assert fake is not None
    fake.wait_published(1)
    wire = api_pb2.Ack(stream="s", partitionSubject="s", correlationId="x")
    data = encode_envelope(wire.SerializeToString(), MessageType.ACK, crc=False)
    assert fake._cb is not None
    # Not waited for: the ack's handling runs the callback, which blocks the loop.
    asyncio.run_coroutine_threadsafe(
        fake._cb(types.SimpleNamespace(subject=fake._ack_inbox, data=data)), fake.loop
    )
    assert blocked.wait(5)
    started = time.monotonic()
    try:
        scripted.close(0.2)
        assert time.monotonic() - started < 5.0
        assert any("did not end within" in r.getMessage() for r in caplog.records)
    finally:
        release.set()
    wait_until(lambda: not _nats_threads(), timeout=10, what="the loop thread freed")


def test_junk_on_the_ack_inbox_is_told_once_not_once_a_message(
    scripted: NatsPublisher, caplog: pytest.LogCaptureFixture
) -> None:
    # Anyone may publish to the ack inbox: each undecodable message logged a WARNING,
    # so a peer could flood the application's log.
    scripted.publish_async("s", b"v", ack_policy=AckPolicy.NONE)  # connects
    fake = _ScriptedNats.last
    assert fake is not None
    fake.wait_published(1)
    assert fake._cb is not None
    with caplog.at_level(logging.WARNING, logger="liftbridge_sync.nats"):
        for i in range(50):
            junk = types.SimpleNamespace(subject=fake._ack_inbox, data=b"junk %d" % i)
            asyncio.run_coroutine_threadsafe(fake._cb(junk), fake.loop).result(timeout=5)
    told = [r.getMessage() for r in caplog.records if "undecodable ack" in r.getMessage()]
    assert len(told) == 1, told


def test_a_header_name_longer_than_the_server_logs_is_refused(publisher: NatsPublisher) -> None:
    with pytest.raises(ConfigurationError, match="32768 bytes"):
        publisher.publish_async("foo", b"x", headers={"h" * 32768: b""})
    assert not _nats_threads()


def test_an_unknown_nats_option_is_refused_at_construction() -> None:
    # It used to reach nats.connect at the first publish: a retryable "cannot connect".
    with pytest.raises(ConfigurationError, match="'max_reconect_attempts'"):
        NatsPublisher("nats://127.0.0.1:4222", max_reconect_attempts=3)
    assert not _nats_threads()


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("ping_interval", 0, ConfigurationError),  # pinged without pause; acks missed
        ("ping_interval", math.nan, ConfigurationError),
        ("reconnect_time_wait", -1, ConfigurationError),
        ("drain_timeout", math.inf, ConfigurationError),
        ("max_reconnect_attempts", math.nan, ArgumentTypeError),
        ("max_reconnect_attempts", -2, ConfigurationError),
        ("max_outstanding_pings", 0, ConfigurationError),
        ("pending_size", -1, ConfigurationError),
        ("flusher_queue_size", "big", ArgumentTypeError),
    ],
)
def test_odd_numeric_nats_options_are_refused_at_construction(
    option: str, value: object, error: type[Exception]
) -> None:
    """nats-py checks none of them; they were taken silently."""
    with pytest.raises(error, match=f"NATS option {option}"):
        NatsPublisher("nats://127.0.0.1:4222", **{option: value})  # type: ignore[arg-type]
    assert not _nats_threads()
    # Their edges stay valid: reconnecting for ever, at once.
    NatsPublisher("nats://127.0.0.1:4222", max_reconnect_attempts=-1, reconnect_time_wait=0).close()


class _SilentNats(_StuckNats):
    """Fault fake of a NATS server that takes publishes but, once connected, never
    answers a PING."""

    connected = False

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        pass

    async def flush(self, timeout: float | None = None) -> None:
        if not self.connected:  # the flush that ends connecting
            self.connected = True
            return
        await asyncio.sleep(timeout or 0)
        raise nats.errors.FlushTimeoutError


@pytest.mark.parametrize("call", ["publish", "flush", "close"])
def test_an_interrupt_given_another_thread_ends_a_publishers_wait(call: str) -> None:
    # A SIGINT the kernel gave another thread (or the main thread just before it went to
    # sleep) did not wake publish()'s wait for its ack, flush()'s for the acks, nor
    # close()'s for a NATS flush: the KeyboardInterrupt came only at the timeout (here
    # 120 s).
    code = (
        f"CALL = {call!r}\n"
        + _MAIN_THREAD_CALLS
        + textwrap.dedent(
            """
        import asyncio, gc, signal, sys, threading
        import nats.aio.client
        from liftbridge_sync.nats import NatsPublisher

        class Nats:  # takes publishes, never acks them (nor a flush for close())
            is_connected = True
            connected = False
            max_payload = 1024 * 1024

            async def connect(self, **kwargs):
                pass

            async def subscribe(self, subject, cb):
                pass

            async def flush(self, timeout=None):
                if CALL == "close" and self.connected:
                    await asyncio.sleep(timeout)
                self.connected = True

            async def publish(self, subject, payload, reply=""):
                pass

            async def close(self):
                pass

        def waiting(name):
            names = main_thread_calls()
            return name in names and "wait" in names

        def interrupt():  # on this thread: the main thread sleeps on
            tick = threading.Event()
            while not waiting(CALL):
                tick.wait(0.01)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        nats.aio.client.Client = Nats
        pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=120.0)
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            if CALL == "publish":
                pub.publish("s", b"v")
            elif CALL == "flush":
                pub.publish_async("s", b"v")
                pub.flush(120.0)
            else:
                pub.publish_raw("s", b"v")
                pub.close(120.0)
        except KeyboardInterrupt:
            print("INTERRUPTED")
        if CALL != "close":  # (its NATS flush still waits)
            pub.close(0.1)
        """
        )
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "INTERRUPTED" in result.stdout, result.stdout


def test_an_interrupt_given_another_thread_ends_close_joining_a_name_lookup() -> None:
    # close() joins a liftbridge-nats-dns thread still resolving a host name for up to
    # its timeout (here 120 s) in one sleep: a SIGINT the kernel gave another thread
    # raised KeyboardInterrupt only then.
    code = _MAIN_THREAD_CALLS + textwrap.dedent(
        """
        import gc, signal, socket, sys, threading
        from liftbridge_sync.errors import BrokerUnavailableError
        from liftbridge_sync.nats import NatsPublisher

        resolving = threading.Event()

        def getaddrinfo(*args, **kwargs):  # a name server that never answers
            resolving.set()
            threading.Event().wait()

        socket.getaddrinfo = getaddrinfo

        def joining():
            names = main_thread_calls()
            return "close" in names and "join" in names

        def interrupt():  # on this thread: the main thread sleeps on
            tick = threading.Event()
            while not joining():
                tick.wait(0.01)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        pub = NatsPublisher("nats://nats.invalid:4222", connect_timeout=0.5)
        try:
            pub.publish_async("s", b"v")
        except BrokerUnavailableError:
            pass
        assert resolving.is_set()
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            pub.close(120.0)
        except KeyboardInterrupt:
            print("INTERRUPTED")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "INTERRUPTED" in result.stdout, result.stdout


def test_a_flush_without_a_timeout_names_the_nats_flush_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # flush(None) is bounded by the NATS flush's own limit; its error said "within Nones".
    monkeypatch.setattr(nats.aio.client, "Client", _SilentNats)
    monkeypatch.setattr("liftbridge_sync.nats.publisher.DEFAULT_FLUSH_TIMEOUT", 0.2)
    pub = NatsPublisher("nats://127.0.0.1:4222")
    try:
        pub.publish_raw("s", b"v")
        with pytest.raises(TimeoutError, match=r"^NATS flush did not complete within 0\.2s$"):
            pub.flush()
        with pytest.raises(TimeoutError, match=r"^NATS flush did not complete within 0\.1s$"):
            pub.flush(0.1)
    finally:
        pub.close(0.1)  # its own NATS flush times out too


class _ObservedLock:
    """A lock that tells when a thread other than ``owner`` had to wait for it."""

    def __init__(self, lock: Any, owner: threading.Thread) -> None:
        self._lock = lock
        self._owner = owner
        self.contended = threading.Event()

    def __enter__(self) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if threading.current_thread() is not self._owner:
            self.contended.set()
        return bool(self._lock.acquire())

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def test_joining_name_lookups_never_meets_one_not_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # close() on another thread joins the liftbridge-nats-dns threads while the loop
    # submits one: join() could take a thread submit() had registered but not started
    # yet, and joining it raised a plain RuntimeError ("cannot join thread before it is
    # started") out of close().
    executor = _support.DnsExecutor()
    observed = _ObservedLock(executor._calls_lock, threading.current_thread())
    monkeypatch.setattr(executor, "_calls_lock", observed)
    joined: list[object] = []
    joiner_done = threading.Event()
    start = threading.Thread.start

    def join_while_starting(thread: threading.Thread) -> None:
        if thread.name == "liftbridge-nats-dns":

            def join() -> None:
                try:
                    joined.append(executor.join(10))
                except BaseException as exc:
                    joined.append(exc)
                finally:
                    joiner_done.set()

            start(threading.Thread(target=join, name="liftbridge-test-joiner", daemon=True))
            # Started only once the joiner either got past the lock (and joined) or
            # waits for it: the window between registering and starting, made wide.
            wait_until(
                lambda: joiner_done.is_set() or observed.contended.is_set(),
                10,
                "the joiner past the lock or waiting for it",
            )
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", join_while_starting)
    release = threading.Event()
    future = executor.submit(release.wait, 10)
    release.set()
    assert future.result(timeout=10) is True
    assert joiner_done.wait(10)
    assert joined == [True]
    executor.shutdown()


def test_close_in_a_nats_callback_during_the_first_connection_ends_it_at_once() -> None:
    # nats-py calls error_cb on the liftbridge-nats thread while it connects; a close()
    # there was not known to run on that thread: it waited for the start, which waited
    # for the connection, which waited for the callback (20 s, then a warning).
    outcome: list[object] = []

    async def on_error(exc: Exception) -> None:
        if not outcome:
            try:
                pub.close()
                outcome.append(threading.current_thread().name)
            except BaseException as error:  # noqa: BLE001 - handed to the test thread
                outcome.append(error)

    pub = NatsPublisher(_closed_port_url(), connect_timeout=2.0, error_cb=on_error)
    started = time.monotonic()
    with pytest.raises(ClientClosedError, match="closed while it connected"):
        pub.publish_async("foo", b"x")
    assert time.monotonic() - started < 5.0
    assert outcome == ["liftbridge-nats"]
    assert pub.closed and not _nats_threads()
    pub.close()


def test_close_on_another_thread_ends_the_first_connection_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # close() waited for a first connection under way, until it failed at connect_timeout
    # (here 30 s), however short close()'s own timeout.
    connecting = threading.Event()

    class _HangingNats(_StuckNats):  # a NATS server that never answers CONNECT
        async def connect(self, **kwargs: object) -> None:
            connecting.set()
            await asyncio.Event().wait()

    monkeypatch.setattr(nats.aio.client, "Client", _HangingNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", connect_timeout=30.0)
    outcome: list[BaseException] = []

    def publish() -> None:
        try:
            pub.publish_async("s", b"v")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    publisher = threading.Thread(target=publish, name="liftbridge-test-publisher", daemon=True)
    publisher.start()
    assert connecting.wait(10)
    started = time.monotonic()
    pub.close(0.1)
    assert time.monotonic() - started < 5.0
    publisher.join(10)
    assert not publisher.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome
    assert not _nats_threads()


class _AcklessNats(_StuckNats):
    """Fault fake of a NATS server that takes publishes and flushes, but where no
    Liftbridge server acks them."""

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        pass


def test_close_on_another_thread_while_a_flush_waits_for_acks_fails_the_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The publishes' futures failed with ClientClosedError, and the flush waiting for
    # them returned as if they had all been acked.
    monkeypatch.setattr(nats.aio.client, "Client", _AcklessNats)
    pub = NatsPublisher("nats://127.0.0.1:4222", ack_timeout=30.0)
    future = pub.publish_async("s", b"v")
    outcome: list[object] = []

    def flush() -> None:
        try:
            pub.flush(30.0)
            outcome.append("returned")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    flusher = threading.Thread(target=flush, name="liftbridge-test-flusher", daemon=True)
    flusher.start()
    wait_until(lambda: thread_in(flusher, "wait_all"), what="the flush waiting for acks")
    pub.close(0.1)
    flusher.join(10)
    assert not flusher.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError), outcome
    with pytest.raises(ClientClosedError):
        future.result(timeout=0)
    assert not _nats_threads()


def test_a_publish_in_a_nats_callback_during_the_first_connection_is_refused_at_once() -> None:
    # It waited for the start, which waited for the connection, which waited for the
    # callback: 20 s, then the start failed with a warning.
    outcome: list[BaseException] = []

    async def on_error(exc: Exception) -> None:
        if not outcome:
            try:
                pub.publish_async("foo", b"from the callback")
            except BaseException as error:  # noqa: BLE001 - handed to the test thread
                outcome.append(error)

    pub = NatsPublisher(_closed_port_url(), connect_timeout=1.0, error_cb=on_error)
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            pub.publish_async("foo", b"x")
        assert time.monotonic() - started < 5.0
        assert len(outcome) == 1 and isinstance(outcome[0], WrongThreadError), outcome
        assert "while it connects" in str(outcome[0])
        assert not _nats_threads()
    finally:
        pub.close()
