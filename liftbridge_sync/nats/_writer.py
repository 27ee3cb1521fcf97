"""The NATS publisher's loop side: its connection, its writer task, acks and the shutdown.

nats-py is asyncio-only. The callers hand jobs over through the :class:`~._ledger.Ledger`
and wake the writer task defined here; writing, acks, NATS flushes, error mapping and the
shutdown all run on the ``liftbridge-nats`` thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Coroutine, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from liftbridge_sync._runtime.throttled_log import ThrottledWarning
from liftbridge_sync._wire.status import error_from_ack_error
from liftbridge_sync._wire.validate import SUBJECT_MAX_BYTES
from liftbridge_sync.envelope import unmarshal_ack
from liftbridge_sync.errors import ClientClosedError, EnvelopeError, LiftbridgeError
from liftbridge_sync.nats._deadlines import AckDeadlines
from liftbridge_sync.nats._ledger import Ledger
from liftbridge_sync.nats._outcomes import map_nats_error, timed_out
from liftbridge_sync.nats._support import Job, settle

if TYPE_CHECKING:
    from nats.aio.client import Client as _NatsClient
    from nats.aio.msg import Msg as _NatsMsg

__all__ = ["LoopWriter"]

_log = logging.getLogger("liftbridge_sync.nats")

#: At least a PUB command's bytes besides its payload (verb, subject, reply, size, CRLFs).
_PUB_OVERHEAD = 64 + 2 * SUBJECT_MAX_BYTES
#: Seconds closing the NATS connection may take even when close()'s timeout is used up.
_CLOSE_GRACE = 0.5

#: How long nats-py itself waits for a flush's PONG. Longer than any caller's bound:
#: nats-py cancels its PONG future when its own wait ends, and a PONG arriving after
#: that kills its read loop (``InvalidStateError`` in ``_process_pong``, nats-py 2.16),
#: after which no ack is ever read. Within the hour a live connection answers, or
#: nats-py's pings find it stale and reconnect, which drops the futures without a
#: result.
_PONG_WAIT = 3600.0


async def flushed(nc: _NatsClient, timeout: float) -> None:
    """``nc.flush()`` bounded by ``timeout`` seconds without ever cancelling nats-py's
    PONG future (see :data:`_PONG_WAIT`): the flush goes on in a task of its own.

    Raises:
        TimeoutError: no PONG within ``timeout``.
        What ``nc.flush`` raises (a closed connection).
    """
    task = asyncio.ensure_future(nc.flush(timeout=_PONG_WAIT))  # type: ignore[arg-type]
    task.add_done_callback(_observe)
    await asyncio.wait_for(asyncio.shield(task), timeout)


def _observe(task: asyncio.Future[None]) -> None:
    """Retrieve an abandoned flush's outcome (asyncio logs one never retrieved)."""
    if not task.cancelled():
        task.exception()


def _abort(nc: _NatsClient) -> None:
    """Cut ``nc``'s connection without writing what it still holds.

    nats-py has no way to: its close writes its buffer out first. Its TCP (and TLS)
    transport keeps the asyncio stream writer as ``_io_writer``; another transport is
    left to the event loop's end.
    """
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is not None:
        transport.abort()


class LoopWriter:
    """The publisher's NATS connection and the task writing the ledger's jobs to it.

    Args:
        nats: The nats-py module.
        ledger: The jobs callers queue; shared with them.
        servers: NATS server URLs.
        connect_timeout: Seconds for the first connection (and its ack inbox SUB).
        nats_options: More arguments for ``nats.connect``.
        ack_inbox: The subject acks come back on.
        pending_limit: What nats-py buffers before a publish waits for a flush.

    Not thread-safe: after construction, only the ``liftbridge-nats`` thread (the event
    loop's) calls its methods; callers reach it with ``loop.call_soon_threadsafe``.
    """

    def __init__(
        self,
        nats: ModuleType,
        ledger: Ledger,
        *,
        servers: Sequence[str],
        connect_timeout: float,
        nats_options: dict[str, Any],
        ack_inbox: str,
        pending_limit: float,
    ) -> None:
        self._nats = nats
        self._ledger = ledger
        self._servers = list(servers)
        self._connect_timeout = connect_timeout
        self._nats_options = nats_options
        self._ack_inbox = ack_inbox
        self._pending_limit = pending_limit
        self._deadlines = AckDeadlines(ledger)
        self._nc: _NatsClient | None = None
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # Anyone may publish to the ack inbox: its junk is told once a minute at most.
        self._bad_acks = ThrottledWarning(_log)
        self._nats_errors = ThrottledWarning(_log)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _error(self, exc: BaseException) -> LiftbridgeError:
        return map_nats_error(self._nats, exc, closed=self._ledger.closed)

    async def connect(self) -> None:
        """Connect, subscribe to the ack inbox and start the writer."""
        nc = self._nats.aio.client.Client()
        # nats-py gives up after 60 reconnect attempts and closes the connection for good:
        # the publisher would fail every publish after a NATS outage of two minutes.
        options = {
            "max_reconnect_attempts": -1,
            "error_cb": self._on_nats_error,
            **self._nats_options,
        }
        try:
            await asyncio.wait_for(
                nc.connect(
                    servers=self._servers,
                    connect_timeout=self._connect_timeout,
                    **options,
                ),
                timeout=self._connect_timeout,
            )
            await nc.subscribe(self._ack_inbox, cb=self._on_ack_msg)
            # The SUB must reach the server before the first publish asks for an ack.
            await flushed(nc, self._connect_timeout)
        except BaseException:
            try:
                await nc.close()
            except Exception:  # pragma: no cover - best effort cleanup
                _log.debug("closing a failed NATS connection", exc_info=True)
            raise
        self._nc = nc
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def max_payload(self) -> int | None:
        """The NATS server's largest payload, once connected (``None`` before).

        Any thread may read it: an int attribute nats-py replaces on (re)connect.
        """
        nc = self._nc
        return None if nc is None else int(nc.max_payload)

    def wake(self) -> None:
        """Have the writer take the ledger's queued jobs."""
        if self._wake is not None:
            self._wake.set()

    async def _write_loop(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            await wake.wait()
            wake.clear()
            while batch := self._ledger.next_batch():
                await self._write(batch)
            if self._stopping:
                return

    async def _write(self, batch: list[Job]) -> None:
        nc = self._nc
        assert nc is not None
        flushed: list[Job] = []
        scheduled = False
        for index, job in enumerate(batch):
            if job.future.done():
                # Cancelled, or failed by a blocked publish() giving up: not written.
                self._forget(job)
                continue
            if job.kind == "flush":
                self._spawn(self._flush_marker(job))
                continue
            if job.kind == "ack":
                self._deadlines.schedule(job)
                scheduled = True
            try:
                await self._publish(nc, job, batch, index + 1)
            except Exception as exc:
                self._forget(job)
                settle(job.future, error=self._error(exc))
                continue
            if job.kind == "raw":
                settle(job.future)
            elif job.kind == "none":
                flushed.append(job)
        if scheduled:
            self._deadlines.arm()
        if flushed:
            self._spawn(self._resolve_when_flushed(flushed))

    async def _publish(self, nc: _NatsClient, job: Job, batch: list[Job], rest: int) -> None:
        """Hand ``job``'s message to nats-py, bounded by the job's deadline if it may wait.

        nats-py suspends a publish only when its buffer would exceed ``pending_size``: it
        then waits for a forced flush, with no timeout by default. Only then is the loop
        timer armed (ack deadlines must fire while the writer waits) and the wait bounded
        (jobs queued behind must not stall past it); the common path stays timer-free. A
        client that does not tell its buffered size always takes the bounded path.

        While it waits, the jobs not yet written (``batch[rest:]`` and the queue) fail at
        their own deadlines, which may be earlier than ``job``'s.
        """
        limit = self._pending_limit
        buffered = getattr(nc, "pending_data_size", None)
        if limit <= 0 or (
            isinstance(buffered, int) and buffered + len(job.payload) + _PUB_OVERHEAD <= limit
        ):
            await nc.publish(job.subject, job.payload, reply=job.reply)
            return
        self._deadlines.arm()
        wake = self._wake
        assert wake is not None
        send = asyncio.ensure_future(nc.publish(job.subject, job.payload, reply=job.reply))
        try:
            while True:
                now = time.monotonic()
                if now >= job.deadline:
                    raise TimeoutError
                until = min(job.deadline, self._expire_unwritten(batch, rest, now))
                # A job queued from now on wakes this wait: its deadline may come first.
                self._ledger.expect_wake()
                wake.clear()
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait(
                        {send, woken}, timeout=until - now, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    woken.cancel()
                if send.done():
                    send.result()
                    return
        finally:
            send.cancel()  # no-op once done; the message stays in nats-py's buffer anyway

    def _expire_unwritten(self, batch: list[Job], rest: int, now: float) -> float:
        """Fail the jobs not yet written whose deadline has passed; the next deadline.

        Jobs that will not be written (failed or cancelled, their slot free again) leave
        the queue now rather than when the held writer gets to them: the queue stays
        within ``max_in_flight`` live jobs, plus those cancelled since the last look.
        """
        upcoming = math.inf
        queued = self._ledger.queued()
        for job in itertools.chain(itertools.islice(batch, rest, None), queued):
            if not job.future.done():
                if job.kind == "flush":
                    continue  # its deadline is its NATS flush's timeout, not a time
                if job.deadline > now:
                    upcoming = min(upcoming, job.deadline)
                    continue
                settle(job.future, error=timed_out(job))
            self._forget(job)
        self._ledger.prune()
        return upcoming

    def _forget(self, job: Job) -> None:
        if job.kind == "ack":
            self._ledger.forget(job)
        self._deadlines.cancel(job)

    async def _resolve_when_flushed(self, jobs: list[Job]) -> None:
        """AckPolicy.NONE: resolve once a PING/PONG shows NATS has the messages."""
        nc = self._nc
        assert nc is not None
        wait = max(job.deadline for job in jobs) - time.monotonic()
        try:
            await flushed(nc, max(wait, 0.001))
        except Exception as exc:
            error = self._error(exc)
            for job in jobs:
                settle(job.future, error=error)
        else:
            for job in jobs:
                settle(job.future)

    async def _flush_marker(self, job: Job) -> None:
        nc = self._nc
        assert nc is not None
        try:
            await flushed(nc, job.deadline)  # a flush marker's deadline is its timeout
        except Exception as exc:
            settle(job.future, error=self._error(exc))
        else:
            settle(job.future)

    async def _on_nats_error(self, exc: Exception) -> None:
        """nats-py's own default logs every connection error at ERROR with a traceback
        (printed on stderr where logging is not set up), once per reconnect attempt;
        what matters reaches the caller as a typed error. One line, throttled."""
        self._nats_errors.warning("NATS connection: %s: %s", type(exc).__name__, exc)

    async def _on_ack_msg(self, msg: _NatsMsg) -> None:
        try:
            ack = unmarshal_ack(msg.data)
        except EnvelopeError as exc:
            self._bad_acks.warning("ignoring undecodable ack on %s: %s", msg.subject, exc)
            return
        job = self._ledger.claim(ack.correlation_id)
        if job is None:
            _log.debug(
                "ack for unknown, unwritten or expired correlation id %r", ack.correlation_id
            )
            return
        self._deadlines.cancel(job)
        if ack.ack_error:
            settle(job.future, error=error_from_ack_error(ack.ack_error))
        else:
            settle(job.future, dataclasses.replace(ack, partition=job.partition))

    def start_shutdown(self, timeout: float) -> None:
        """Begin :meth:`shutdown` in a task (from a callback on the loop thread)."""
        self._spawn(self.shutdown(timeout))

    async def shutdown(self, timeout: float) -> None:
        """Write queued jobs, flush NATS, fail what is left, close, stop the loop.

        Writing and flushing share ``timeout``; closing the connection gets what is left
        of it (at least :data:`_CLOSE_GRACE`), after which the connection is cut: nats-py
        would otherwise wait for ever to hand its buffer to a server that stopped reading.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            self._stopping = True
            writer = self._writer
            if writer is not None and not writer.done():
                self.wake()
                done, _ = await asyncio.wait({writer}, timeout=deadline - loop.time())
                if not done:
                    writer.cancel()
            nc = self._nc
            left = deadline - loop.time()
            if nc is not None and nc.is_connected and left > 0:
                try:
                    await nc.flush(timeout=left)  # type: ignore[arg-type]
                except Exception as exc:
                    _log.warning("NATS flush on close failed: %s", exc)
            leftover, outstanding = self._ledger.drain()
            self._deadlines.clear()
            error = ClientClosedError("NatsPublisher closed before the publish completed")
            for job in leftover:
                settle(job.future, error=error)
            for future in outstanding:
                settle(future, error=error)
            if nc is not None:
                await _close_connection(nc, max(deadline - loop.time(), _CLOSE_GRACE), timeout)
        finally:
            loop.stop()


async def _close_connection(nc: _NatsClient, seconds: float, timeout: float) -> None:
    """Close ``nc`` within ``seconds``, else cut it (``timeout``: close()'s, for the log)."""
    try:
        await asyncio.wait_for(nc.close(), timeout=seconds)
    except TimeoutError:
        _log.warning(
            "NATS did not take the last %d bytes within %.1fs of close(): the connection is cut",
            getattr(nc, "pending_data_size", 0),
            timeout,
        )
        _abort(nc)
    except Exception as exc:  # pragma: no cover - best effort
        _log.warning("closing the NATS connection failed: %s", exc)
