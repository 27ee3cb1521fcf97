"""The NATS publisher's ``liftbridge-nats`` thread: its event loop, started on first use,
connected before it is handed out, and stopped and joined with a bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from liftbridge_sync._runtime.doorbell import join_sliced
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
    ForkedClientError,
    LiftbridgeError,
    LocalResourceError,
    WrongThreadError,
)
from liftbridge_sync.nats._support import THREAD_NAME, DnsExecutor, wait_future

__all__ = ["CLOSE_MARGIN", "LoopThread"]

_log = logging.getLogger("liftbridge_sync.nats")

#: Seconds past ``close()``'s timeout for the shutdown's own steps (cutting the
#: connection, the loop's last turn) and the ``liftbridge-nats`` thread's end.
CLOSE_MARGIN = 10.0

_Connect = Callable[[], Coroutine[Any, Any, None]]


#: What an OSError says when no file descriptor was left, in the process or the system.
_NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})


def _local_error(exc: OSError, what: str) -> LocalResourceError:
    """The error for ``exc``, raised trying to ``what`` when no file descriptor was left
    (this process's shortage, not NATS's)."""
    return LocalResourceError(
        f"cannot {what}: this process has no file descriptor left "
        f"({exc.strerror or exc}); close files or connections it no longer needs or "
        "raise its open-file limit (ulimit -n)"
    )


def _reason(exc: BaseException) -> str:
    """What went wrong, for a message: the exception's text, or its class's name (a
    ``TimeoutError`` has no text)."""
    return str(exc) or type(exc).__name__


class LoopThread:
    """An asyncio event loop on a daemon thread named ``liftbridge-nats``.

    Args:
        connect: Makes the coroutine that connects to NATS; run on the loop before
            :meth:`start` hands the loop out.
        connect_timeout: Seconds ``connect`` bounds itself by.
        servers: The NATS servers, for error messages.
        closed: Whether the owner is closed (then nothing starts).

    Thread-safe: starting is serialised by a lock; the loop itself is reached only
    through ``call_soon_threadsafe`` / ``run_coroutine_threadsafe``.
    """

    def __init__(
        self,
        connect: _Connect,
        *,
        connect_timeout: float,
        servers: Sequence[str],
        closed: Callable[[], bool],
    ) -> None:
        self._connect = connect
        self._connect_timeout = connect_timeout
        self._servers = list(servers)
        self._closed = closed
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: The thread being started and connected (then not yet :attr:`_thread`).
        self._starting: threading.Thread | None = None
        #: The first connection under way, for :meth:`stop` to cancel.
        self._connecting: concurrent.futures.Future[None] | None = None
        self._dns: DnsExecutor | None = None
        self._pid: int | None = None  # the process that started the loop

    @property
    def started(self) -> bool:
        """Whether the loop runs (connected), or ran: it stays set after the stop."""
        return self._loop is not None

    def on_thread(self) -> bool:
        """Whether the caller is the ``liftbridge-nats`` thread, also while it connects
        (nats-py runs callbacks such as ``error_cb`` there then)."""
        current = threading.current_thread()
        return current is self._thread or current is self._starting

    def forbid_here(self, name: str) -> None:
        """Refuse the blocking method ``name`` on the ``liftbridge-nats`` thread.

        Raises:
            WrongThreadError: Called there (in a future's done-callback): it would wait
                for the thread it holds.
        """
        if self.on_thread():
            raise WrongThreadError(
                f"NatsPublisher.{name} blocks and cannot run on the {THREAD_NAME} thread "
                "(in a future's done-callback); use publish_async there"
            )

    def forked(self) -> bool:
        """Whether this is a forked child's copy of a started loop."""
        pid = self._pid
        return pid is not None and pid != os.getpid()

    def refuse_if_forked(self) -> None:
        """Raise in a forked child's copy of a started loop (before any lock: the
        parent's threads may have held them at fork).

        Raises:
            ForkedClientError: This is such a copy.
        """
        if self.forked():
            raise ForkedClientError(
                f"the NatsPublisher was started before the process forked: its {THREAD_NAME} "
                "thread and NATS connection are the parent's; create one in the child"
            )

    def start(self) -> asyncio.AbstractEventLoop:
        """The running loop, started and connected on the first call.

        Raises:
            ClientClosedError: The owner is closed.
            BrokerUnavailableError: NATS could not be reached in time.
            ConfigurationError: nats-py refused an option's value.
            LocalResourceError: The process has no file descriptor left.
            WrongThreadError: Called on the loop thread while it connects.
        """
        loop = self._loop
        if loop is not None:
            return loop
        if threading.current_thread() is self._starting:
            # A nats-py callback while the first connection is made: the start holds
            # the lock and waits for this very thread.
            raise WrongThreadError(
                f"NatsPublisher cannot publish on the {THREAD_NAME} thread while it connects "
                "(in a nats-py callback during the first connection)"
            )
        with self._start_lock:
            if self._closed():
                raise ClientClosedError("NatsPublisher is closed")
            if self._loop is not None:
                return self._loop
            try:
                loop = asyncio.new_event_loop()  # a selector and a socket pair
            except OSError as exc:
                if exc.errno not in _NO_DESCRIPTOR:
                    raise
                raise _local_error(exc, "start the NATS publisher's event loop") from exc
            # Connecting to a host name resolves it in the default executor; asyncio's own
            # would leave an unnamed pool thread behind. loop.close() shuts this one down.
            self._dns = DnsExecutor()
            loop.set_default_executor(self._dns)
            thread = threading.Thread(target=_run_loop, args=(loop,), name=THREAD_NAME, daemon=True)
            # Known as the loop thread before it runs: a close() in a nats-py callback
            # while it connects must not wait for this start, which waits for it.
            self._starting = thread
            thread.start()
            connected: concurrent.futures.Future[None] | None = None
            try:
                connected = asyncio.run_coroutine_threadsafe(self._connect(), loop)
                self._connecting = connected
                if self._closed():  # by another thread since the check: stop() missed it
                    connected.cancel()
                # connect bounds itself by connect_timeout; the margin covers cleanup. In
                # slices: a Ctrl-C that did not wake the sleep is raised within one.
                wait_future(connected, self._connect_timeout + 10.0)
            except BaseException as exc:
                # Whatever ended the wait (an interrupt too), the thread must not outlive
                # it: nobody would stop or join it.
                self._connecting = None
                if connected is not None:
                    connected.cancel()
                try:
                    loop.call_soon_threadsafe(loop.stop)
                except RuntimeError:
                    if not loop.is_closed():
                        raise
                    # A close() on the loop thread (in a nats-py callback) ended it.
                join_sliced(thread, CLOSE_MARGIN)
                self._starting = None  # (kept once started: the same as _thread)
                if thread.is_alive():
                    _log.warning(
                        "the %s thread did not end within %gs of a failed start",
                        THREAD_NAME,
                        CLOSE_MARGIN,
                    )
                if not isinstance(exc, Exception):
                    raise  # an interrupt (KeyboardInterrupt, SystemExit) as it is
                if self._closed():  # by a nats-py callback: it cancelled the connection
                    raise ClientClosedError("NatsPublisher was closed while it connected") from exc
                if isinstance(exc, LiftbridgeError):
                    raise
                raise self._start_error(exc) from exc
            self._connecting = None
            self._thread = thread
            self._pid = os.getpid()
            self._loop = loop
            return loop

    def _start_error(self, exc: BaseException) -> LiftbridgeError:
        """The error for a start that failed with ``exc`` (not a library error)."""
        if isinstance(exc, OSError) and exc.errno in _NO_DESCRIPTOR:
            return _local_error(exc, f"connect to NATS at {', '.join(self._servers)}")
        if isinstance(exc, TypeError | ValueError):
            # nats-py refusing an option's value (e.g. max_reconnect_attempts="x"): no
            # retry would connect.
            return ConfigurationError(f"NATS refused the connection options: {_reason(exc)}")
        # nats-py retries until connect_timeout: the timeout is the usual end.
        reason = (
            f"no connection within {self._connect_timeout}s"
            if isinstance(exc, TimeoutError)
            else _reason(exc)
        )
        return BrokerUnavailableError(
            f"cannot connect to NATS at {', '.join(self._servers)}: {reason}"
        )

    def stop(self, shutdown: _Connect | None, seconds: float) -> bool:
        """Run ``shutdown`` on the loop (it stops the loop), then join the thread.

        ``shutdown`` gets ``seconds`` plus :data:`CLOSE_MARGIN` in all, and so does the
        join: a done-callback that blocks holds the loop thread, and the caller must not
        wait for the application's code without end. ``None``: the shutdown was started
        already; only join. Host name lookups under way are joined for ``seconds``.
        Not on the loop thread itself, which cannot wait for itself (see
        :meth:`on_thread`: the owner starts the shutdown there instead). The owner is
        closed by then: a first connection under way is cancelled, and its start fails
        with ``ClientClosedError`` at once.

        Returns:
            Whether the thread ended (or never ran); ``False``: it is still held, and
            what the shutdown would have settled may be unsettled.
        """
        connecting = self._connecting
        if connecting is not None:
            # The start holds the lock until the connection is made or fails: without
            # this, at connect_timeout, however short close()'s timeout.
            connecting.cancel()
        with self._start_lock:  # a first connection in progress finishes (or fails) first
            loop, thread, dns = self._loop, self._thread, self._dns
        if loop is None or thread is None:
            if dns is not None:  # a failed start may have left a name lookup under way
                dns.join(seconds)
            return True
        close_by = time.monotonic() + seconds + CLOSE_MARGIN
        if shutdown is not None:
            future = asyncio.run_coroutine_threadsafe(shutdown(), loop)
            try:
                # In slices (as the join below): a Ctrl-C that did not wake the sleep
                # is raised within one, not at close()'s timeout.
                wait_future(future, max(0.0, close_by - time.monotonic()))
            except concurrent.futures.TimeoutError:
                # The loop thread is held (a done-callback that blocks): the shutdown
                # stays scheduled and, once the thread is free, closes the NATS
                # connection and stops the loop itself. Stopping the loop here would
                # cancel it, leaving the connection's socket open.
                pass
            except Exception:  # pragma: no cover - the shutdown never raises
                _log.exception("NatsPublisher shutdown failed")
                loop.call_soon_threadsafe(loop.stop)
        ended = join_sliced(thread, close_by - time.monotonic())
        if not ended:
            _log.warning(
                "the liftbridge-nats thread did not end within %gs of close()'s timeout "
                "(a done-callback that blocks?); it ends by itself once free",
                CLOSE_MARGIN,
            )
        if dns is not None and not dns.join(seconds):
            _log.warning("a NATS host name lookup is still under way after close")
        return ended


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
