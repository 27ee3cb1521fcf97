"""Direct NATS publishing: envelopes straight to a stream's NATS subject.

Liftbridge partition leaders subscribe to their partition's NATS subject (the stream
subject for partition 0, ``<subject>.<N>`` for partition N). :class:`NatsPublisher`
publishes Liftbridge envelopes (:func:`~liftbridge_sync.envelope.new_message`) there
over its own NATS connection, without a gRPC round trip, and collects the leader's acks
on a private ack inbox.

This is the optional extra ``nats``: nats-py is imported only when a
:class:`NatsPublisher` is created, so ``import liftbridge_sync`` never needs it. Install
it with ``pip install liftbridge-sync[nats]``.

What a direct publish does **not** do, unlike ``Client.publish`` (gRPC):

* A **paused partition is not resumed**: its leader is not subscribed to the subject
  while paused, so the message is simply not stored (you get an ack timeout).
* There is **no error for a missing stream or partition**: nobody listens on the
  subject, so the publish ends with :class:`~liftbridge_sync.errors.AckTimeoutError`
  (or, with ``AckPolicy.NONE``, succeeds and the message is lost).
* A **read-only partition** gives no ``ReadonlyPartitionError``: the message is not
  stored and the publish ends with an ack timeout.
* No authorization on the stream (NATS permissions on the subject apply instead), and
  ``AckPolicy.NONE`` is accepted on streams with optimistic concurrency control (the
  gRPC path refuses it).
* Anything that is not a valid envelope (e.g. :meth:`NatsPublisher.publish_raw`) is
  stored verbatim as the message value, without key or ack.

The leader still refuses a message with an error ack (``INCORRECT_OFFSET``,
``TOO_LARGE``, ``ENCRYPTION``); those fail the publish with a typed error.

Delivery is at-most-once: nothing is re-sent. If the NATS connection drops, nats-py
reconnects and buffers publishes meanwhile (up to its ``pending_size``), but acks sent
while disconnected are lost, so those publishes fail with ``AckTimeoutError`` although
the message may have been stored.

Threading: nats-py is asyncio-only, so each publisher runs a private event loop in one
daemon thread named ``liftbridge-nats``, started on first use and joined by
:meth:`NatsPublisher.close`. Callers on any thread hand work to it with
``loop.call_soon_threadsafe`` / ``asyncio.run_coroutine_threadsafe``. Ack timeouts come
from a hashed timer wheel driven by one loop timer: no thread or timer object per message.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import importlib
import itertools
import logging
import math
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from liftbridge_sync._runtime.timerwheel import TimerHandle, TimerWheel
from liftbridge_sync._wire.status import (
    error_from_ack_error,
)
from liftbridge_sync._wire.validate import (
    check_bytes,
    check_headers,
    check_partition,
    check_subject,
)
from liftbridge_sync.envelope import new_message, unmarshal_ack
from liftbridge_sync.errors import (
    AckTimeoutError,
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
    EnvelopeError,
    LiftbridgeError,
    PublishError,
    PublishRejectedError,
)
from liftbridge_sync.models import Ack, AckPolicy

if TYPE_CHECKING:
    from nats.aio.client import Client as _NatsClient
    from nats.aio.msg import Msg as _NatsMsg

__all__ = ["NatsPublisher", "partition_subject"]

_log = logging.getLogger("liftbridge_sync.nats")

AckFuture = concurrent.futures.Future[Ack | None]

_INSTALL_HINT = "pip install liftbridge-sync[nats]"
_THREAD_NAME = "liftbridge-nats"
_DEFAULT_FLUSH_TIMEOUT = 10.0


def _import_nats() -> ModuleType:
    """Import nats-py, or explain how to install it."""
    try:
        return importlib.import_module("nats")
    except ImportError as exc:
        raise ImportError(
            f"liftbridge_sync.nats needs nats-py, which is not installed: {_INSTALL_HINT}"
        ) from exc


def partition_subject(stream_subject: str, partition: int = 0) -> str:
    """The NATS subject a stream partition's leader listens on.

    Args:
        stream_subject: The stream's subject (as given to ``create_stream``).
        partition: Partition id (>= 0).

    Returns:
        ``stream_subject`` for partition 0, ``"<stream_subject>.<partition>"`` otherwise.

    Raises:
        ConfigurationError: The subject or partition is invalid.

    Pure function; safe to call from any thread.
    """
    subject = check_subject("stream_subject", stream_subject)
    number = check_partition("partition", partition)
    return subject if number == 0 else f"{subject}.{number}"


def _check_timeout(name: str, value: object, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name!r} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"{name!r} must be a finite number of seconds > 0, got {value!r}")
    return seconds


@dataclasses.dataclass(slots=True, eq=False)
class _Job:
    """One unit of work for the writer: a publish, a raw publish or a flush marker."""

    kind: str  # "ack" (wants an ack), "none" (AckPolicy.NONE), "raw", "flush"
    future: concurrent.futures.Future[Any]
    subject: str = ""
    payload: bytes = b""
    reply: str = ""
    correlation_id: str = ""
    partition: int = -1
    #: Monotonic ack deadline ("ack", "none"); for "flush", the NATS flush timeout.
    deadline: float = 0.0
    handle: TimerHandle[str] | None = None


def _settle(
    future: concurrent.futures.Future[Any],
    result: object = None,
    error: BaseException | None = None,
) -> None:
    """Resolve ``future`` unless it is already done (e.g. cancelled by its owner)."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:  # cancelled concurrently
        pass


class NatsPublisher:
    """Publish to Liftbridge streams directly over NATS, synchronously.

    Args:
        servers: NATS server URL(s) of the Liftbridge cluster, e.g.
            ``"nats://127.0.0.1:4222"`` (for the test harness: ``server.nats_url``).
        ack_timeout: Default seconds to wait for an ack before a publish fails with
            :class:`~liftbridge_sync.errors.AckTimeoutError`.
        connect_timeout: Seconds allowed for the first connection (on first use); also
            passed to nats-py as its per-attempt connect timeout.
        **nats_options: Passed to ``nats.connect`` (``user``, ``password``, ``token``,
            ``tls``, ``name``, ``error_cb``, ``inbox_prefix``, ...). Callbacks run on
            the ``liftbridge-nats`` thread.

    Nothing is connected or started in ``__init__``: the ``liftbridge-nats`` thread and
    the NATS connection are created on the first publish or flush. The publisher
    subscribes to its ack inbox (``<inbox_prefix>.<nuid>.acks``) before its first
    publish. Use it as a context manager or call :meth:`close`.

    Direct NATS publishes bypass the gRPC checks (see the module docs): a paused
    partition is not resumed and its messages are not stored, and a missing stream or a
    read-only partition gives no error, just an ack timeout. Nothing is re-sent
    (at-most-once delivery).

    Futures returned by :meth:`publish_async` are resolved on the ``liftbridge-nats``
    thread, so their done-callbacks run there; such a callback may call
    :meth:`publish_async`, :meth:`publish_raw` or :meth:`close`, but not the blocking
    :meth:`publish` or :meth:`flush` (they raise ``RuntimeError`` there).

    Raises:
        ImportError: nats-py is not installed (``pip install liftbridge-sync[nats]``).
        ConfigurationError: A timeout is not a positive number, or ``servers`` is empty.

    Thread-safe: any number of threads may publish through one instance concurrently.
    """

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        ack_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        **nats_options: Any,
    ) -> None:
        self._nats = _import_nats()
        if isinstance(servers, str):
            server_list = [servers]
        else:
            server_list = list(servers)
        if not server_list or not all(isinstance(s, str) and s for s in server_list):
            raise ConfigurationError("'servers' must be a non-empty str or sequence of str")
        self._servers = server_list
        ack = _check_timeout("ack_timeout", ack_timeout, optional=False)
        conn = _check_timeout("connect_timeout", connect_timeout, optional=False)
        assert ack is not None and conn is not None
        self._ack_timeout = ack
        self._connect_timeout = conn
        self._nats_options = dict(nats_options)
        inbox_prefix = nats_options.get("inbox_prefix", "_INBOX")
        if isinstance(inbox_prefix, bytes):
            inbox_prefix = inbox_prefix.decode()
        nuid = self._nats.nuid.NUID().next().decode()
        self._ack_inbox = check_subject("inbox_prefix", f"{inbox_prefix}.{nuid}.acks")
        self._id_prefix = f"{os.getpid():x}.{random.getrandbits(48):012x}."
        self._ids = itertools.count()

        # Shared state, guarded by _lock.
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._closed = False
        self._queue: collections.deque[_Job] = collections.deque()
        self._wake_pending = False
        self._pending: dict[str, _Job] = {}
        self._outstanding: set[concurrent.futures.Future[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

        # Loop-thread state: touched only on the liftbridge-nats thread.
        self._nc: _NatsClient | None = None
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._stopping = False
        self._wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=1024, now=time.monotonic())
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ properties

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._ack_inbox

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._loop else "idle")
        return f"<NatsPublisher servers={self._servers!r} {state}>"

    def __enter__(self) -> NatsPublisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ public API

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (random prefix + counter).

        Thread-safe.
        """
        return f"{self._id_prefix}{next(self._ids)}"

    def publish_async(
        self,
        stream_subject: str,
        value: bytes,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
        crc: bool = True,
    ) -> AckFuture:
        """Publish an envelope to a partition's NATS subject without waiting.

        Messages published through one publisher reach NATS in the order of the
        ``publish_async``/``publish_raw`` calls that enqueued them.

        Args:
            stream_subject: The stream's NATS subject (not its name).
            value: Payload, bytes-like (``str`` raises ``TypeError``: encode it).
            partition: Partition id; the message goes to ``stream_subject`` for 0 and to
                ``<stream_subject>.<partition>`` otherwise. Not checked against the
                stream: a partition nobody leads ends in an ack timeout.
            key: Optional message key.
            headers: ``str`` to bytes-like headers (the server overwrites ``subject``
                and ``reply``).
            ack_policy: ``LEADER`` (default) or ``ALL`` wait for the leader's ack;
                ``NONE`` resolves the future with ``None`` once NATS has the message
                (a PING/PONG round trip after it was written).
            expected_offset: Optimistic concurrency (streams created with
                ``optimistic_concurrency_control=True``): the offset the message must
                get; ``None`` or -1 for no check. Needs an ack policy other than NONE.
            correlation_id: Id echoed in the ack (default: a generated unique id); must
                not equal the id of another publish still awaiting its ack.
            timeout: Seconds until the future fails with :class:`AckTimeoutError`
                (default: the publisher's ``ack_timeout``).
            crc: Add the CRC-32C of the payload to the envelope header (the server
                checks it; a message failing the check would be stored verbatim).

        Returns:
            A future resolving to the :class:`~liftbridge_sync.models.Ack` (with
            ``partition`` set to ``partition``) or ``None`` for ``AckPolicy.NONE``. It
            fails with :class:`~liftbridge_sync.errors.AckTimeoutError`,
            :class:`~liftbridge_sync.errors.IncorrectOffsetError`,
            :class:`~liftbridge_sync.errors.PublishRejectedError` (``code``
            ``TOO_LARGE``, ``ENCRYPTION``, ``MAX_PAYLOAD``),
            :class:`~liftbridge_sync.errors.BrokerUnavailableError` (NATS connection
            lost) or :class:`~liftbridge_sync.errors.ClientClosedError`.

        Raises:
            TypeError: ``value``/``key``/``headers`` are not bytes-like.
            ConfigurationError: Any other invalid argument (checked before anything is
                sent or connected), or a duplicate pending ``correlation_id``.
            BrokerUnavailableError: The first connection to NATS failed.
            ClientClosedError: The publisher is closed.

        Thread-safe.
        """
        subject = partition_subject(stream_subject, partition)
        if not isinstance(ack_policy, AckPolicy):
            raise TypeError(f"ack_policy must be an AckPolicy, not {type(ack_policy).__name__}")
        if ack_policy is AckPolicy.NONE and expected_offset is not None and expected_offset != -1:
            raise ConfigurationError(
                "'expected_offset' needs an ack policy other than AckPolicy.NONE: the "
                "outcome of the offset check is only reported in the ack"
            )
        if not isinstance(crc, bool):
            raise ConfigurationError(f"'crc' must be a bool, got {type(crc).__name__}")
        if correlation_id is not None and (
            not isinstance(correlation_id, str) or not correlation_id
        ):
            raise ConfigurationError("'correlation_id' must be a non-empty str or None")
        seconds = _check_timeout("timeout", timeout, optional=True)
        ack_timeout = self._ack_timeout if seconds is None else seconds
        body = check_bytes("value", value)
        key_bytes = check_bytes("key", key, optional=True)
        checked_headers = check_headers(headers)
        wants_ack = ack_policy is not AckPolicy.NONE
        cid = correlation_id or self.next_correlation_id()
        payload = new_message(
            body if body is not None else b"",
            key=key_bytes,
            headers=checked_headers or None,
            ack_inbox=self._ack_inbox if wants_ack else None,
            correlation_id=cid,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            crc=crc,
        )
        job = _Job(
            kind="ack" if wants_ack else "none",
            future=concurrent.futures.Future(),
            subject=subject,
            payload=payload,
            correlation_id=cid,
            partition=partition,
            deadline=time.monotonic() + ack_timeout,
        )
        self._submit(job)
        return job.future

    def publish(
        self,
        stream_subject: str,
        value: bytes,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
        crc: bool = True,
    ) -> Ack | None:
        """Publish an envelope and wait for its ack (``None`` for ``AckPolicy.NONE``).

        Same arguments as :meth:`publish_async`; the errors it would set on the future
        are raised here.

        Raises:
            AckTimeoutError: No ack within ``timeout`` (e.g. no such stream, a paused or
                read-only partition: direct NATS publishes cannot tell).
            IncorrectOffsetError: ``expected_offset`` did not match.
            RuntimeError: Called on the ``liftbridge-nats`` thread (a done-callback).

        Thread-safe.
        """
        self._forbid_loop_thread("publish")
        future = self.publish_async(
            stream_subject,
            value,
            partition=partition,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            correlation_id=correlation_id,
            timeout=timeout,
            crc=crc,
        )
        # The future's own ack timer bounds this wait.
        return future.result()

    def publish_raw(self, subject: str, payload: bytes, *, reply: str | None = None) -> None:
        """Publish a plain NATS message (no envelope) and return once NATS has it queued.

        A Liftbridge leader stores data that is not an envelope verbatim as the value of
        a message (no key, no ack), with headers ``subject`` and ``reply``.

        Args:
            subject: Any NATS subject (e.g. a stream subject or ``<subject>.<N>``).
            payload: The bytes to publish.
            reply: Optional NATS reply subject (stored in the ``reply`` header).

        Raises:
            TypeError: ``payload`` is not bytes-like.
            ConfigurationError: Invalid subject or reply.
            PublishRejectedError: The payload exceeds the NATS server's max payload.
            BrokerUnavailableError: No NATS connection.
            ClientClosedError: The publisher is closed.
            RuntimeError: Called on the ``liftbridge-nats`` thread.

        Thread-safe.
        """
        self._forbid_loop_thread("publish_raw")
        checked_subject = check_subject("subject", subject)
        checked_reply = "" if reply is None else check_subject("reply", reply)
        data = check_bytes("payload", payload)
        job = _Job(
            kind="raw",
            future=concurrent.futures.Future(),
            subject=checked_subject,
            payload=data if data is not None else b"",
            reply=checked_reply,
        )
        self._submit(job)
        job.future.result()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until NATS has everything published so far and every publish resolved.

        Writes out queued messages, does a NATS PING/PONG round trip (so raw publishes
        have reached the server), then waits until every future returned by
        :meth:`publish_async` before this call has its ack or error.

        Args:
            timeout: Seconds to wait in all (``None``: no limit besides the NATS flush
                taking at most 10 s, and each publish's own ack timeout).

        Raises:
            TimeoutError: Not everything completed in time.
            BrokerUnavailableError: The NATS connection is lost.
            ClientClosedError: The publisher is closed.
            RuntimeError: Called on the ``liftbridge-nats`` thread.

        Thread-safe.
        """
        self._forbid_loop_thread("flush")
        seconds = _check_timeout("timeout", timeout, optional=True)
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._lock:
            if self._closed:
                raise ClientClosedError("NatsPublisher is closed")
            if self._loop is None:
                return  # nothing was ever published
            waiting = list(self._outstanding)
        marker = _Job(
            kind="flush",
            future=concurrent.futures.Future(),
            deadline=seconds if seconds is not None else _DEFAULT_FLUSH_TIMEOUT,
        )
        self._submit(marker)
        try:
            marker.future.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"NATS flush did not complete within {seconds}s") from None
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        _, not_done = concurrent.futures.wait(waiting, timeout=remaining)
        if not_done:
            raise TimeoutError(f"{len(not_done)} publishes still pending after {seconds}s")

    def close(self, timeout: float = 5.0) -> None:
        """Flush pending NATS data, fail unresolved publishes and stop the thread.

        Queued messages are written and flushed to NATS (for at most ``timeout``
        seconds); publishes still waiting for an ack then fail with
        :class:`~liftbridge_sync.errors.ClientClosedError` (call :meth:`flush` first to
        wait for acks). The NATS connection is closed and the ``liftbridge-nats`` thread
        joined. Idempotent; later calls return after the first has finished (except on
        the ``liftbridge-nats`` thread itself, where the shutdown is only started).

        Args:
            timeout: Seconds allowed for writing and flushing pending data.

        Thread-safe.
        """
        seconds = _check_timeout("timeout", timeout, optional=False)
        assert seconds is not None
        with self._lock:
            already = self._closed
            self._closed = True
        on_loop = threading.current_thread() is self._thread
        if on_loop:
            loop = self._loop
            if not already and loop is not None:
                self._spawn(self._shutdown(seconds))
            return
        with self._start_lock:  # a first connection in progress finishes (or fails) first
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not already:
            future = asyncio.run_coroutine_threadsafe(self._shutdown(seconds), loop)
            try:
                future.result(timeout=seconds + 10.0)
            except Exception:  # pragma: no cover - the shutdown never raises by design
                _log.exception("NatsPublisher shutdown failed")
                loop.call_soon_threadsafe(loop.stop)
        thread.join()

    # ------------------------------------------------------------------ any thread

    def _forbid_loop_thread(self, name: str) -> None:
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError(
                f"NatsPublisher.{name} blocks and cannot run on the {_THREAD_NAME} thread "
                "(in a future's done-callback); use publish_async there"
            )

    def _submit(self, job: _Job) -> None:
        """Register ``job`` and hand it to the writer on the loop thread."""
        loop = self._ensure_started()
        with self._lock:
            if self._closed:
                raise ClientClosedError("NatsPublisher is closed")
            if job.kind == "ack":
                if job.correlation_id in self._pending:
                    raise ConfigurationError(
                        f"correlation id {job.correlation_id!r} is already awaiting an ack"
                    )
                self._pending[job.correlation_id] = job
            self._outstanding.add(job.future)
            self._queue.append(job)
            wake = not self._wake_pending
            self._wake_pending = True
        job.future.add_done_callback(self._on_done)
        if wake:
            loop.call_soon_threadsafe(self._wake_writer)

    def _on_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._outstanding.discard(future)

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None:
            return loop
        with self._start_lock:
            if self._closed:
                raise ClientClosedError("NatsPublisher is closed")
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=self._run_loop, args=(loop,), name=_THREAD_NAME, daemon=True
            )
            thread.start()
            connected = asyncio.run_coroutine_threadsafe(self._connect(), loop)
            try:
                # _connect bounds itself by connect_timeout; the margin covers cleanup.
                connected.result(timeout=self._connect_timeout + 10.0)
            except BaseException as exc:
                connected.cancel()
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                if isinstance(exc, LiftbridgeError):
                    raise
                raise BrokerUnavailableError(
                    f"cannot connect to NATS at {', '.join(self._servers)}: "
                    f"{exc or type(exc).__name__}"
                ) from exc
            self._thread = thread
            self._loop = loop
            return loop

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    # ------------------------------------------------------------------ loop thread

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self) -> None:
        """Connect, subscribe to the ack inbox and start the writer (loop thread)."""
        nc = self._nats.aio.client.Client()
        try:
            await asyncio.wait_for(
                nc.connect(
                    servers=self._servers,
                    connect_timeout=self._connect_timeout,
                    **self._nats_options,
                ),
                timeout=self._connect_timeout,
            )
            await nc.subscribe(self._ack_inbox, cb=self._on_ack_msg)
            # The SUB must reach the server before the first publish asks for an ack.
            await nc.flush(timeout=self._connect_timeout)
        except BaseException:
            try:
                await nc.close()
            except Exception:  # pragma: no cover - best effort cleanup
                _log.debug("closing a failed NATS connection", exc_info=True)
            raise
        self._nc = nc
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def _wake_writer(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _write_loop(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            await wake.wait()
            wake.clear()
            while True:
                with self._lock:
                    if not self._queue:
                        self._wake_pending = False
                        break
                    batch = list(self._queue)
                    self._queue.clear()
                await self._write(batch)
            if self._stopping:
                return

    async def _write(self, batch: list[_Job]) -> None:
        nc = self._nc
        assert nc is not None
        flushed: list[_Job] = []
        scheduled = False
        for job in batch:
            if job.future.cancelled():
                self._forget(job)
                continue
            if job.kind == "flush":
                self._spawn(self._flush_marker(job))
                continue
            if job.kind == "ack":
                job.handle = self._wheel.schedule(job.deadline, job.correlation_id)
                scheduled = True
            try:
                await nc.publish(job.subject, job.payload, reply=job.reply)
            except Exception as exc:
                self._forget(job)
                _settle(job.future, error=self._map_nats_error(exc))
                continue
            if job.kind == "raw":
                _settle(job.future)
            elif job.kind == "none":
                flushed.append(job)
        if scheduled:
            self._arm_timer()
        if flushed:
            self._spawn(self._resolve_when_flushed(flushed))

    def _forget(self, job: _Job) -> None:
        if job.kind == "ack":
            with self._lock:
                if self._pending.get(job.correlation_id) is job:
                    del self._pending[job.correlation_id]
        if job.handle is not None:
            self._wheel.cancel(job.handle)

    async def _resolve_when_flushed(self, jobs: list[_Job]) -> None:
        """AckPolicy.NONE: resolve once a PING/PONG shows NATS has the messages."""
        nc = self._nc
        assert nc is not None
        wait = max(job.deadline for job in jobs) - time.monotonic()
        try:
            await nc.flush(timeout=max(wait, 0.001))  # type: ignore[arg-type]
        except Exception as exc:
            error = self._map_nats_error(exc)
            for job in jobs:
                _settle(job.future, error=error)
        else:
            for job in jobs:
                _settle(job.future)

    async def _flush_marker(self, job: _Job) -> None:
        nc = self._nc
        assert nc is not None
        try:
            await nc.flush(timeout=job.deadline)  # type: ignore[arg-type]
        except Exception as exc:
            _settle(job.future, error=self._map_nats_error(exc))
        else:
            _settle(job.future)

    async def _on_ack_msg(self, msg: _NatsMsg) -> None:
        try:
            ack = unmarshal_ack(msg.data)
        except EnvelopeError as exc:
            _log.warning("ignoring undecodable ack on %s: %s", msg.subject, exc)
            return
        with self._lock:
            job = self._pending.pop(ack.correlation_id, None)
        if job is None:
            _log.debug("ack for unknown or expired correlation id %r", ack.correlation_id)
            return
        if job.handle is not None:
            self._wheel.cancel(job.handle)
        if ack.ack_error:
            _settle(job.future, error=error_from_ack_error(ack.ack_error))
        else:
            _settle(job.future, dataclasses.replace(ack, partition=job.partition))

    def _arm_timer(self) -> None:
        next_deadline = self._wheel.next_deadline()
        if next_deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_at = math.inf
            return
        if self._timer is not None and self._timer_at <= next_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, next_deadline - time.monotonic()), self._on_timer)
        self._timer_at = next_deadline

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        expired = self._wheel.advance(time.monotonic())
        for cid in expired:
            with self._lock:
                job = self._pending.pop(cid, None)
            if job is not None:
                _settle(
                    job.future,
                    error=AckTimeoutError(
                        f"no ack for {job.subject!r} (correlation id {cid!r}) in time; "
                        "the stream may not exist, or the partition may be paused or read-only"
                    ),
                )
        self._arm_timer()

    def _map_nats_error(self, exc: BaseException) -> LiftbridgeError:
        errors = self._nats.errors
        if isinstance(exc, errors.MaxPayloadError):
            return PublishRejectedError(
                "publish: the message exceeds the NATS server's max_payload",
                code="MAX_PAYLOAD",
            )
        if isinstance(exc, errors.FlushTimeoutError | asyncio.TimeoutError | TimeoutError):
            return AckTimeoutError("NATS did not confirm the messages in time")
        if isinstance(exc, errors.ConnectionClosedError | errors.ConnectionDrainingError):
            if self._closed:
                return ClientClosedError("NatsPublisher is closed")
            return BrokerUnavailableError("the NATS connection is closed")
        if isinstance(exc, errors.OutboundBufferLimitError):
            return BrokerUnavailableError(
                "NATS is disconnected and the reconnect buffer is full (pending_size)"
            )
        if isinstance(exc, asyncio.CancelledError):
            return ClientClosedError("NatsPublisher is closed")
        error = PublishError(f"NATS publish failed: {exc or type(exc).__name__}")
        error.__cause__ = exc
        return error

    async def _shutdown(self, timeout: float) -> None:
        """Write queued jobs, flush NATS, fail what is left, close (loop thread)."""
        loop = asyncio.get_running_loop()
        try:
            self._stopping = True
            writer = self._writer
            if writer is not None and not writer.done():
                self._wake_writer()
                done, _ = await asyncio.wait({writer}, timeout=timeout)
                if not done:
                    writer.cancel()
            nc = self._nc
            if nc is not None and nc.is_connected:
                try:
                    await nc.flush(timeout=timeout)  # type: ignore[arg-type]
                except Exception as exc:
                    _log.warning("NATS flush on close failed: %s", exc)
            with self._lock:
                self._pending.clear()
                leftover = list(self._queue)
                self._queue.clear()
                outstanding = list(self._outstanding)
            self._wheel.pop_all()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            error = ClientClosedError("NatsPublisher closed before the publish completed")
            for job in leftover:
                _settle(job.future, error=error)
            for future in outstanding:
                _settle(future, error=error)
            if nc is not None:
                try:
                    await nc.close()
                except Exception as exc:  # pragma: no cover - best effort
                    _log.warning("closing the NATS connection failed: %s", exc)
        finally:
            loop.stop()
