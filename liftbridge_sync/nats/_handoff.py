"""The NATS publisher's thread hand-off: starting ``liftbridge-nats`` and queueing jobs.

Between the caller side (:mod:`.publisher`, the public API) and the loop side
(:mod:`._loop`): the first publish or flush starts the event loop thread and connects;
every job is registered under the publisher's lock and the writer on the loop is woken
at most once per batch. Thread-safe: these methods run on any caller's thread, and the
shared state is guarded by the publisher's lock (the start by its start lock).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any

from liftbridge_sync._runtime.doorbell import Doorbell
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
    ForkedClientError,
    LiftbridgeError,
    PublishQueueFullError,
)
from liftbridge_sync.nats._loop import LoopSide
from liftbridge_sync.nats._support import THREAD_NAME, DnsExecutor, Job

__all__ = ["Handoff"]


def _reason(exc: BaseException) -> str:
    """What went wrong, for a message: the exception's text, or its class's name (a
    ``TimeoutError`` has no text)."""
    return str(exc) or type(exc).__name__


class Handoff(LoopSide):
    """Caller-thread plumbing of :class:`~liftbridge_sync.nats.NatsPublisher` (a mixin).

    Thread-safe: shared state is guarded by the publisher's locks.
    """

    # Declared by the publisher's __init__.
    _start_lock: threading.Lock
    _loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None
    _dns: DnsExecutor | None
    _loop_pid: int | None
    _max_in_flight: int
    _in_flight: int
    _slot_freed: Doorbell

    def _forbid_loop_thread(self, name: str) -> None:
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError(
                f"NatsPublisher.{name} blocks and cannot run on the {THREAD_NAME} thread "
                "(in a future's done-callback); use publish_async there"
            )

    def _forked(self) -> bool:
        """Whether this is a forked child's copy of a started publisher."""
        pid = self._loop_pid
        return pid is not None and pid != os.getpid()

    def _refuse_if_forked(self) -> None:
        """Raise in a forked child's copy of a started publisher (before any lock: the
        parent's threads may have held them at fork)."""
        if self._forked():
            raise ForkedClientError(
                f"the NatsPublisher was started before the process forked: its {THREAD_NAME} "
                "thread and NATS connection are the parent's; create one in the child"
            )

    def _submit(self, job: Job) -> None:
        """Register ``job`` and hand it to the writer on the loop thread.

        A publish first takes one of ``max_in_flight`` slots, waiting for one until its
        deadline (a flush marker takes none).
        """
        self._refuse_if_forked()
        loop = self._ensure_started()
        publish = job.kind != "flush"
        if publish:
            wake = self._wait_for_slot(job)
        else:
            with self._lock:
                wake = self._register(job)
        job.future.add_done_callback(self._on_publish_done if publish else self._on_done)
        if wake:
            try:
                loop.call_soon_threadsafe(self._wake_writer)
            except RuntimeError:
                if not loop.is_closed():
                    raise
                # A close() on another thread ended the loop since the job was queued;
                # its shutdown settled the job's future (ClientClosedError).

    def _wait_for_slot(self, job: Job) -> bool:
        """Take a slot for ``job`` and register it; whether to wake the writer."""
        # Slots are freed on the loop thread: a done-callback there cannot wait for one.
        on_loop = threading.current_thread() is self._thread

        def take() -> bool | None:
            if self._in_flight >= self._max_in_flight and not self._closed:
                if on_loop:
                    raise self._queue_full()
                return None
            wake = self._register(job)
            self._in_flight += 1
            return wake

        wake = self._slot_freed.wait(self._lock, take, job.deadline)
        if wake is None:
            raise self._queue_full()
        return wake

    def _queue_full(self) -> PublishQueueFullError:
        return PublishQueueFullError(
            f"{self._max_in_flight} NATS publishes are pending (max_in_flight) and none "
            "completed in time"
        )

    def _register(self, job: Job) -> bool:
        """Queue ``job`` (lock held); whether the writer needs waking."""
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
        return wake

    def _on_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._outstanding.discard(future)

    def _on_publish_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._outstanding.discard(future)
            self._in_flight -= 1
            self._slot_freed.ring()

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
            # Connecting to a host name resolves it in the default executor; asyncio's own
            # would leave an unnamed pool thread behind. loop.close() shuts this one down.
            self._dns = DnsExecutor()
            loop.set_default_executor(self._dns)
            thread = threading.Thread(
                target=self._run_loop, args=(loop,), name=THREAD_NAME, daemon=True
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
                if isinstance(exc, TypeError | ValueError):
                    # nats-py refusing an option's value (e.g. max_reconnect_attempts="x"):
                    # no retry would connect.
                    raise ConfigurationError(
                        f"NATS refused the connection options: {_reason(exc)}"
                    ) from exc
                # nats-py retries until connect_timeout: the timeout is the usual end.
                reason = (
                    f"no connection within {self._connect_timeout}s"
                    if isinstance(exc, TimeoutError)
                    else _reason(exc)
                )
                raise BrokerUnavailableError(
                    f"cannot connect to NATS at {', '.join(self._servers)}: {reason}"
                ) from exc
            self._thread = thread
            self._loop_pid = os.getpid()
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
